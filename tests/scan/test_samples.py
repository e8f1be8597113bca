"""The trainer's samples: a resumed run is bit-identical to a straight one; a stopped one is not."""

import json

from tests.conftest import run_cli


def test_straight_vs_resumed_is_identical(samples):
    for name in ("tiny_resume.pth", "tiny.pth"):
        proc = run_cli("diff", samples / "straight-60" / name, samples / "resumed-60" / name, "--report")
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_straight_vs_stopped_differs(samples):
    proc = run_cli(
        "diff",
        samples / "straight-60" / "tiny_resume.pth",
        samples / "stopped-30" / "tiny_resume.pth",
        "--report",
        "--format",
        "json",
    )
    assert proc.returncode == 1
    diff = json.loads(proc.stdout)["diff"]
    changed = {c["name"] for c in diff["changed"]}
    assert any(n.startswith("model.") for n in changed) and any("exp_avg" in n for n in changed)
    assert all(c["reason"] == "values" and c["max_abs_diff"] > 0 for c in diff["changed"])


def test_resume_file_against_its_fp16_weights(samples):
    proc = run_cli(
        "diff",
        samples / "straight-60" / "tiny_resume.pth",
        samples / "straight-60" / "tiny.pth",
        "--report",
        "--only",
        "model",
        "--format",
        "json",
    )
    diff = json.loads(proc.stdout)["diff"]
    assert proc.returncode == 1 and not diff["only_a"] and not diff["only_b"]
    assert {c["reason"] for c in diff["changed"]} == {"dtype"} and 0 < max(
        c["max_abs_diff"] for c in diff["changed"]
    ) < 1e-2


def test_logit_drift_matches_the_trainers_verify_figure(samples, open_ckpt):
    import torch

    from ckinspect.analysis.drift import logit_drift
    from trainer import experiment

    ckpt = open_ckpt(samples / "straight-60" / "tiny_resume.pth")
    ours = logit_drift(ckpt)
    resume = torch.load(samples / "straight-60" / "tiny_resume.pth", weights_only=True)
    fp16 = torch.load(samples / "straight-60" / "tiny.pth", weights_only=True)
    verify = experiment.logit_drift(resume["model"], resume["config"], other_state=fp16)  # what `trainer verify` prints
    assert ours["fp16"]["max_abs"] == verify["max_abs"] and ours["fp16"]["mean_abs"] == verify["mean_abs"]
    assert ours["fp16"]["top1_agreement"] == verify["top1_agreement"]
    assert 0 < ours["fp16"]["max_abs"] < ours["bf16"]["max_abs"]  # bf16 keeps fewer mantissa bits
    weights_only = logit_drift(open_ckpt(samples / "straight-60" / "tiny.pth"))
    assert (
        weights_only is not None and weights_only["fp16"]["max_abs"] == 0.0 and weights_only["stored_as"] == ["float16"]
    )
