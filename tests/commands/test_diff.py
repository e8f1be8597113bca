"""`ckinspect diff --report` as a user runs it (through the CLI's `main`, in this process): formats and exit codes."""

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


def _with_data_pkl(src, dst, edit, storage=None):
    import zipfile

    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.endswith("data.pkl"):
                data = edit(data)
            elif storage is not None and info.filename.endswith("/data/0"):
                data = storage
            zout.writestr(info.filename, data)
    return dst


def test_a_view_past_its_storage_is_unreadable_not_an_internal_error(tmp_path):
    torch.save({"w": torch.ones(4)}, tmp_path / "ok.pt")
    grow = lambda pkl: pkl.replace(b"K\x04\x85", b"K\x40\x85")  # noqa: E731 - size (4,) -> (64,): 256 of 16 bytes
    a = _with_data_pkl(tmp_path / "ok.pt", tmp_path / "a.pt", grow)
    b = _with_data_pkl(tmp_path / "ok.pt", tmp_path / "b.pt", grow, storage=bytes(16))
    proc = run_cli("diff", a, b, "--report")
    assert proc.returncode == 1 and proc.stderr == ""  # the tensor gives no verdict; the files' bytes differ
    assert "no verdict" not in proc.stdout and "the files' bytes differ" in proc.stdout
    assert "cannot compare w: range 0+256 outside storage 0 of 16 bytes" in proc.stdout
    assert "A is damaged: tensor w reaches byte 256 of storage 0, which holds 16" in proc.stdout
