"""Two processes under torchrun (gloo on CPU): stop, resume at world size 2 bit-exactly, and resume
at world size 1 with the step converted."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tests.conftest import cli_env
from trainer.checkpoint import load
from trainer.experiment import max_abs_diff
from trainer.train import train

pytestmark = [pytest.mark.torchrun, pytest.mark.slow]


def _torchrun(cwd, *args, nproc=2):
    # --standalone: a private rendezvous on a free port, so parallel test runs never collide
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)]
    proc = subprocess.run(
        [*launcher, "-m", "trainer", "train", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=cli_env({"OMP_NUM_THREADS": "1"}),
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_two_ranks_stop_and_resume_at_world_size_2_and_1(tmp_path):
    _torchrun(tmp_path, "--out", "straight", "--steps", "12")
    _torchrun(tmp_path, "--out", "stopped", "--steps", "12", "--stop-after", "4")
    _torchrun(tmp_path, "--out", "resumed", "--steps", "12", "--resume", "stopped/tiny_resume.pth")

    straight, stopped, resumed = (load(tmp_path / d / "tiny_resume.pth") for d in ("straight", "stopped", "resumed"))
    assert straight["world_size"] == stopped["world_size"] == 2
    # every rank's streams are in the file, and they are different streams
    assert len(stopped["rng"]) == 2
    assert not torch.equal(stopped["rng"][0]["batch"], stopped["rng"][1]["batch"])
    assert max_abs_diff(straight, resumed) == (0.0, 0.0)
    for mine, theirs in zip(straight["rng"], resumed["rng"], strict=True):
        assert all(torch.equal(mine[k], theirs[k]) for k in mine)

    said = []
    train(tmp_path / "single", 12, resume=tmp_path / "stopped" / "tiny_resume.pth", log=said.append)
    assert "resume: world size 2 -> 1: step 4 -> 8 (step * 2 // 1)" in said
    assert any("steps 8->12" in line for line in said)
    end = load(tmp_path / "single" / "tiny_resume.pth")
    assert (end["world_size"], end["step"]) == (1, 12)
    for folder in ("straight", "stopped", "resumed", "single"):
        assert sorted(p.name for p in (tmp_path / folder).iterdir()) == ["tiny.pth", "tiny_resume.pth"]
        assert torch.load(tmp_path / folder / "tiny.pth", weights_only=True)["norm.weight"].dtype == torch.float16
