"""Findings whose evidence supports them: step counters are counters, repeated findings over one family
of tensors are one finding, and RESUME_INCOMPLETE reads what real trainers save."""

from __future__ import annotations

import torch

from ckinspect.analysis.inspect import inspect_path


def _codes(ckpt, code):
    return [f for f in ckpt.findings if f.code == code]


def _adam_resume(steps: int):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 4)).sum().backward()
    opt.step()
    state = opt.state_dict()
    for entry in state["state"].values():
        entry["step"] = torch.tensor(float(steps))  # a long run: far past float16's 65,504
    return model, state


def test_adam_step_counters_past_65504_are_no_fp16_overflow(tmp_path):
    model, state = _adam_resume(200_000)
    path = tmp_path / "resume.pt"
    torch.save({"model": model.state_dict(), "optimizer": state, "step": 200_000}, path)
    ckpt = inspect_path(path, quick=False)
    assert _codes(ckpt, "FP16_OVERFLOW") == []
    weights = model.state_dict()
    weights["0.weight"][0, 0] = 1e6  # a weight that does overflow is still reported
    torch.save({"model": weights, "optimizer": state, "step": 200_000}, path)
    (finding,) = _codes(inspect_path(path, quick=False), "FP16_OVERFLOW")
    assert finding.tensor == "model.0.weight"


def test_one_finding_per_family_with_count_and_examples(tmp_path):
    weights = {f"layers.{i}.attn.weight": torch.full((3,), 1e6) for i in range(5)}
    weights["head.weight"] = torch.full((2,), 1e6)
    path = tmp_path / "w.pt"
    torch.save(weights, path)
    found = _codes(inspect_path(path, quick=False), "FP16_OVERFLOW")
    assert len(found) == 2
    family = next(f for f in found if f.tensor == "layers.0.attn.weight")
    assert family.message.startswith("5 tensors named layers.*.attn.weight: layers.0.attn.weight: 3 of 3 values")
    assert "layers.2.attn.weight" in family.message and "and 2 more" in family.message
    assert "layers.3.attn.weight" not in family.message
    assert next(f for f in found if f.tensor == "head.weight").message.startswith("head.weight: 2 of 2 values")


def test_a_weights_file_that_says_it_saved_no_optimizer_is_not_a_resume_file(tmp_path):
    weights = torch.nn.Linear(3, 2).state_dict()
    path = tmp_path / "release.pt"
    torch.save({"model": weights, "global_step": 12_000, "config": {"save_optimizer": False, "lr": 0.1}}, path)
    assert _codes(inspect_path(path, quick=True), "RESUME_INCOMPLETE") == []
    torch.save({"model": weights, "global_step": 12_000, "config": {"lr": 0.1}}, path)
    (finding,) = _codes(inspect_path(path, quick=True), "RESUME_INCOMPLETE")  # saying nothing: still suspicious
    assert "optimizer state" in finding.message


def test_epoch_counter_and_scheduler_state_are_a_position_in_the_schedule(tmp_path):
    model, state = _adam_resume(10)
    sched = {"last_epoch": 600, "base_lrs": [0.1], "_step_count": 601}
    path = tmp_path / "resume.pt"
    torch.save({"model": model.state_dict(), "optimizer": state, "epoch": 600, "scheduler_state_dict": sched}, path)
    (finding,) = _codes(inspect_path(path, quick=True), "RESUME_INCOMPLETE")
    lacks = finding.message.split("but lacks", 1)[1]
    assert "step counter" not in lacks and "RNG" in lacks
