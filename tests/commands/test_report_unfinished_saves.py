"""A save that died before its first rename leaves only `x.pth.tmp`: possibly the only copy of the newest
checkpoint. `ckinspect --report FOLDER` must show it, as an entry for the missing `x.pth`."""

import json

import torch

from tests.conftest import run_cli

SCHEMA_KEYS = {
    "path",
    "format",
    "file_bytes",
    "tensor_count",
    "tensor_bytes",
    "storage_bytes",
    "groups",
    "optimizer_share",
    "metadata",
    "findings",
}


def save(path, step, n=4):
    torch.save({"model": {"w": torch.ones(n)}, "step": step}, path)


def report(*args):
    proc = run_cli("--report", "--quick", "--format", "json", *args)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_complete_tmp_without_its_main_is_reported_as_the_missing_checkpoint(tmp_path):
    save(tmp_path / "a.pth", 30)
    save(tmp_path / "x.pth", 60)
    (tmp_path / "x.pth").rename(tmp_path / "x.pth.tmp")
    status, doc = report(tmp_path)
    entries = {e["path"]: e for e in doc["files"]}
    assert list(entries) == [str(tmp_path / "a.pth"), str(tmp_path / "x.pth")]
    missing = entries[str(tmp_path / "x.pth")]
    assert set(missing) >= SCHEMA_KEYS and doc["schema"] == 1
    sizes = (missing["format"], missing["file_bytes"], missing["tensor_count"], missing["tensor_bytes"])
    assert sizes == ("unknown", 0, 0, 0)
    [finding] = missing["findings"]
    assert finding["code"] == "LEFTOVER_TMP" and finding["severity"] == "warning"
    message = finding["message"]
    assert "x.pth.tmp is complete, step 60" in message and "x.pth is missing" in message
    assert "`ckinspect repair --apply` would promote it" in message
    assert status == 0 and doc["summary"] == {"files": 2, "errors": 0, "warnings": 2, "infos": 0}  # a.pth: no optimizer
    assert run_cli("--report", "--quick", "--fail-on", "warning", tmp_path).returncode == 1
    assert (tmp_path / "x.pth.tmp").exists() and not (tmp_path / "x.pth").exists()  # a report never repairs


def test_a_folder_holding_only_a_partial_tmp_is_no_longer_empty(tmp_path):
    save(tmp_path / "y.pth", 70, n=4000)
    data = (tmp_path / "y.pth").read_bytes()
    (tmp_path / "y.pth.tmp").write_bytes(data[: len(data) // 2])
    (tmp_path / "y.pth").unlink()
    _, doc = report(tmp_path)
    [entry] = doc["files"]
    assert entry["path"] == str(tmp_path / "y.pth") and entry["format"] == "unknown"
    [finding] = entry["findings"]
    assert finding["code"] == "LEFTOVER_TMP"
    assert "y.pth.tmp is partial" in finding["message"] and "y.pth is missing" in finding["message"]
    assert "salvage y.pth.tmp" in finding["message"] and "would promote" not in finding["message"]
    text = run_cli("--report", "--quick", ".", cwd=tmp_path)  # short path: one header line at any width
    assert "y.pth  unknown" in text.stdout and "LEFTOVER_TMP" in text.stdout and "no tensors" in text.stdout


def test_a_tmp_beside_its_main_or_named_by_the_user_is_not_listed_twice(tmp_path):
    save(tmp_path / "z.pth", 10)
    save(tmp_path / "z.pth.tmp", 20)
    save(tmp_path / "w.pth.tmp", 5)
    _, doc = report(tmp_path)
    assert [e["path"] for e in doc["files"]] == [str(tmp_path / "w.pth"), str(tmp_path / "z.pth")]
    z = doc["files"][1]
    assert z["format"] == "torch-zip" and [f["code"] for f in z["findings"]].count("LEFTOVER_TMP") == 1
    _, doc = report(tmp_path / "w.pth.tmp")
    assert [e["path"] for e in doc["files"]] == [str(tmp_path / "w.pth.tmp")]
