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


def test_values_beside_the_tensors_are_reported(samples):
    """lr, loss and the epoch position differ between step 30 and step 60: text and JSON both say so."""
    a, b = samples / "stopped-30" / "tiny_resume.pth", samples / "straight-60" / "tiny_resume.pth"
    proc = run_cli("diff", a, b, "--report", "--format", "json")
    diff = json.loads(proc.stdout)["diff"]
    assert diff["metadata_changed"] == {"step": [30, 60]}
    values = {v["path"]: (v["a"], v["b"]) for v in diff["values_changed"]}
    assert sorted(values) == ["epoch_step", "loss", "optimizer.param_groups.0.lr"]
    assert values["epoch_step"] == (30, 60) and values["loss"][0] > values["loss"][1] > 0
    assert diff["values_only_a"] == diff["values_only_b"] == []
    text = run_cli("diff", a, b, "--report").stdout
    assert "3 other values changed" in text
    table = text[text.index("values that differ") :].splitlines()
    assert table[3].split() == ["step", "30", "60"]
    assert any(line.split()[0] == "optimizer.param_groups.0.lr" for line in table[4:])
