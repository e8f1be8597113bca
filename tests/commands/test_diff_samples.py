"""`ckinspect diff --report` on the trainer's samples: a resumed run is bit-identical to a straight one;
a stopped one is not."""

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
