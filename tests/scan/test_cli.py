"""`ckinspect diff --report` and `ckinspect drift --report` as a user runs them: formats and exit codes."""

import json

import pytest
import torch

from tests.conftest import run_cli


@pytest.fixture
def files(tmp_path):
    torch.manual_seed(0)
    state = {"tok.weight": torch.randn(40, 8), "norm.weight": torch.ones(8)}
    torch.save(state, tmp_path / "a.pt")
    torch.save({k: v.clone() for k, v in state.items()}, tmp_path / "same.pt")
    changed = {k: v.clone() for k, v in state.items()}
    changed["tok.weight"][2, 3] += 1.0
    torch.save(changed, tmp_path / "b.pt")
    optimizer = {"state": {0: {"exp_avg": torch.zeros(40, 8)}}, "param_groups": [{"params": [0, 1]}]}
    torch.save({"model": state, "optimizer": optimizer, "step": 3}, tmp_path / "resume.pt")
    return tmp_path


def test_diff_exit_0_when_identical_1_when_different_2_on_error(files):
    same = run_cli("diff", files / "a.pt", files / "same.pt", "--report")
    assert same.returncode == 0, same.stderr
    assert "identical" in same.stdout
    diff = run_cli("diff", files / "a.pt", files / "b.pt", "--report")
    assert diff.returncode == 1 and "tok.weight" in diff.stdout and "[2, 3]" in diff.stdout.replace(",", ", ")
    missing = run_cli("diff", files / "a.pt", files / "nope.pt", "--report")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    (files / "text.pt").write_text("not a checkpoint\n")
    junk = run_cli("diff", files / "a.pt", files / "text.pt", "--report")
    # B's tensors cannot be read, and the files' bytes already differ: different, with B's CORRUPT shown
    assert junk.returncode == 1 and "Traceback" not in junk.stderr
    assert "B is damaged: not a checkpoint: looks like text" in junk.stdout


def test_diff_json_is_schema_1_with_both_files_and_the_diff(files):
    proc = run_cli("diff", files / "a.pt", files / "b.pt", "--report", "--format", "json")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["schema"] == 1 and [f["path"] for f in doc["files"]] == [str(files / "a.pt"), str(files / "b.pt")]
    d = doc["diff"]
    assert (d["identical"], d["same"], d["only_a"], d["only_b"]) == (False, 1, [], [])
    [change] = d["changed"]
    assert (change["name"], change["reason"], change["n_diff"], change["first_index"]) == (
        "tok.weight",
        "values",
        1,
        [2, 3],
    )
    assert change["max_abs_diff"] == pytest.approx(1.0, abs=1e-6)


def test_diff_only_model_and_atol(files):
    assert run_cli("diff", files / "resume.pt", files / "a.pt", "--report").returncode == 1
    proc = run_cli("diff", files / "resume.pt", files / "a.pt", "--report", "--only", "model", "--format", "markdown")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "prefix 'model.'" in proc.stdout
    assert run_cli("diff", files / "a.pt", files / "b.pt", "--report", "--atol", "2").returncode == 0
    nothing = run_cli("diff", files / "a.pt", files / "b.pt", "--report", "--only", "rng")
    assert nothing.returncode == 2 and "nothing to compare" in nothing.stderr


def test_drift_report(files):
    proc = run_cli("drift", files / "a.pt", "--report", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    drift = json.loads(proc.stdout)["drift"]
    assert {w["name"] for w in drift["weights"]} == {"tok.weight", "norm.weight"}
    assert drift["logits"] is None and drift["logits_skipped"]
    text = run_cli("drift", files / "a.pt", "--report")
    assert text.returncode == 0 and "bf16" in text.stdout


def test_report_value_scan_finds_a_flipped_byte_and_nan_that_quick_does_not(files, open_ckpt):
    from tests.scan.helpers import flip_byte

    ckpt = open_ckpt(files / "b.pt")
    flip_byte(files / "b.pt", ckpt.storages[ckpt.tensor("norm.weight").storage_key].offset + 3)
    bad = {"w": torch.tensor([1.0, float("nan"), 1e5])}
    torch.save(bad, files / "nan.pt")
    proc = run_cli("--report", files / "b.pt", files / "nan.pt", "--format", "json")
    assert proc.returncode == 1, proc.stderr
    found = {(f["code"], f.get("tensor")) for entry in json.loads(proc.stdout)["files"] for f in entry["findings"]}
    assert {("CORRUPT", "norm.weight"), ("NONFINITE", "w"), ("FP16_OVERFLOW", "w")} <= found
    assert run_cli("--report", files / "b.pt", "--quick").returncode == 0
