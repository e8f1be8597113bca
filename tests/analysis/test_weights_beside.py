"""The weights file beside a resume file (issue 27): `<name>.pth` next to `<name>_resume.pth`, as the bundled
trainer and MiniMind's lm_checkpoint write them one after the other. A kill between the two saves leaves a
weights file of another step: WEIGHTS_DIFFER on the resume file, saying which one is newer."""

from __future__ import annotations

import os
import shutil

import torch

from ckinspect.analysis.inspect import inspect_path
from ckinspect.analysis.runs import last_good
from tests.analysis.minimind import minimind_model
from trainer.train import train


def codes(path, **kw):
    return [f.code for f in inspect_path(path, **kw).findings]


def weights_differ(path):
    return [f for f in inspect_path(path).findings if f.code == "WEIGHTS_DIFFER"]


def test_trainer_pair_of_one_save_agrees(tmp_path):
    train(tmp_path, steps=2, seed=0, log=None)
    assert weights_differ(tmp_path / "tiny_resume.pth") == []


def test_trainer_killed_between_its_two_saves(tmp_path):
    # The trainer writes tiny_resume.pth, then tiny.pth. A kill between the two at step 4 leaves step 4's
    # resume file beside step 2's weights file: the same bytes as this, made by the real trainer.
    stale = tmp_path / "step2.pth"
    train(tmp_path / "run", steps=2, seed=0, log=None)
    shutil.copy2(tmp_path / "run" / "tiny.pth", stale)
    train(tmp_path / "run", steps=4, seed=0, log=None)
    weights, resume = tmp_path / "run" / "tiny.pth", tmp_path / "run" / "tiny_resume.pth"
    os.replace(stale, weights)
    before = resume.stat().st_mtime - 30
    os.utime(weights, (before, before))

    (found,) = weights_differ(resume)
    assert found.severity == "warning"
    n = len(torch.load(weights, weights_only=True))
    head = f"tiny.pth beside it holds other weights than this resume file's model ({n} of {n} "
    assert found.message.startswith(head)
    assert "tiny.pth is older (written 30.0 s before this file): a kill between the two saves" in found.message
    assert "WEIGHTS_DIFFER" not in codes(resume, quick=True)  # --quick reads no value
    assert codes(weights) == []  # said once, on the resume file
    # the resume file itself is whole: still the run's resume point, with the finding beside its verdict
    run = last_good(tmp_path / "run", everything=True)
    assert run.last_good is not None and run.last_good.path == resume


def _minimind_lm_checkpoint(folder, model, step):
    """MiniMind's lm_checkpoint: the half weights to `<weight>_<hidden>.pth`, then the resume data, whose
    model is the same half state dict, to `<weight>_<hidden>_resume.pth` (each via .tmp and os.replace)."""
    state = {k: v.half().cpu() for k, v in model.state_dict().items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.arange(8).view(1, 8)).logits.sum().backward()
    optimizer.step()
    weights, resume = folder / "full_sft_64.pth", folder / "full_sft_64_resume.pth"
    torch.save(state, weights)
    data = {"model": state, "optimizer": optimizer.state_dict(), "epoch": 0, "step": step, "world_size": 1}
    torch.save(data, resume)
    return weights, resume, {k: v.half().cpu() for k, v in model.state_dict().items()}


def test_minimind_pair_agrees_and_a_killed_save_is_named(tmp_path):
    model = minimind_model()
    weights, resume, stepped = _minimind_lm_checkpoint(tmp_path, model, step=100)
    assert weights_differ(resume) == []
    # the next save's weights file is written, the kill comes before its resume file
    torch.save(stepped, weights)
    later = resume.stat().st_mtime + 12
    os.utime(weights, (later, later))
    (found,) = weights_differ(resume)
    changed = [k for k in stepped if not torch.equal(stepped[k], torch.load(resume, weights_only=True)["model"][k])]
    head = f"full_sft_64.pth beside it holds other weights than this resume file's model ({len(changed)} of "
    assert found.message.startswith(f"{head}{len(stepped)} ")
    assert "full_sft_64.pth is newer (written 12.0 s after this file)" in found.message
    assert found.tensor == sorted(changed)[0]


def test_a_different_model_beside_is_named_by_its_names(tmp_path):
    model = minimind_model()
    weights, resume, _ = _minimind_lm_checkpoint(tmp_path, model, step=5)
    torch.save({"other.weight": torch.zeros(4, 4, dtype=torch.float16)}, weights)
    (found,) = weights_differ(resume)
    assert f"({len(model.state_dict()) + 1} of {len(model.state_dict()) + 1} tensors differ" in found.message
