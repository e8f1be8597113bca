"""`diff` never says "identical" without comparing: a refused or unreadable side, or two files without
tensors, are judged by the files' own bytes (exit 1 when they differ), or get no verdict (exit 2)."""

from __future__ import annotations

import json
import pickle

import torch

from ckinspect.cli import main


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)


def _diff(capsys, a, b, *extra):
    code = main(["diff", str(a), str(b), "--report", *extra])
    return code, capsys.readouterr().out


def test_two_different_whole_modules_are_different_not_identical(tmp_path, capsys):
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.manual_seed(0)
    torch.save(Net(), a)
    torch.manual_seed(1)
    torch.save(Net(), b)
    code, out = _diff(capsys, a, b)
    assert code == 1
    assert "different: the files' bytes differ (tensors not compared)" in out
    assert "A's tensors cannot be read (UNSAFE_PICKLE)" in out
    assert "A is refused:" in out and "B is refused:" in out and "Net" in out
    code, out = _diff(capsys, a, b, "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["diff"]["identical"] is False and doc["diff"]["verdict"] == "different"
    assert any(f["code"] == "UNSAFE_PICKLE" for f in doc["files"][0]["findings"])


def test_the_same_refused_file_twice_is_identical_by_its_bytes(tmp_path, capsys):
    a = tmp_path / "a.pt"
    torch.save(Net(), a)
    b = tmp_path / "b.pt"
    b.write_bytes(a.read_bytes())
    code, out = _diff(capsys, a, b)
    assert code == 0 and "identical: the two files are the same byte for byte" in out


def test_pickles_without_tensors_differ_by_their_bytes(tmp_path, capsys):
    a, b = tmp_path / "a.pkl", tmp_path / "b.pkl"
    a.write_bytes(pickle.dumps({"p": 0.25}, protocol=0))
    b.write_bytes(pickle.dumps({"p": 0.5}, protocol=0))
    code, out = _diff(capsys, a, b)
    assert code == 1 and "tensors not compared: neither file holds tensors" in out


def test_a_damaged_side_against_a_folder_gets_no_verdict(tmp_path, capsys):
    """No raw bytes to compare (a DCP folder): exit 2 with the reason, and the damaged side's CORRUPT."""
    a = tmp_path / "a.pt"
    a.write_bytes(b"PK\x03\x04" + b"\x00" * 60)
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "__0_0.distcp").write_bytes(b"")
    code, out = _diff(capsys, a, folder)
    assert code == 2
    assert "no verdict" in out and "A is damaged" in out


def test_permuted_strides_that_torch_calls_equal_are_said_so(tmp_path, capsys):
    """A transposed copy holds the same values in another layout: not "bit for bit", not "within --atol 0"."""
    torch.manual_seed(0)
    w = torch.randn(6, 4)
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.save({"w": w, "v": torch.ones(3)}, a)
    torch.save({"w": w.t().contiguous().t(), "v": torch.ones(3)}, b)  # strides (1, 6) instead of (4, 1)
    assert torch.equal(torch.load(a)["w"], torch.load(b)["w"])
    code, out = _diff(capsys, a, b)
    assert code == 0
    flat = " ".join(out.split())
    assert "identical: 2 tensors match: 1 bit for bit, 1 with equal values stored in another memory layout" in flat
    assert "within --atol" not in out
    code, out = _diff(capsys, a, b, "--atol", "0.5")
    flat = " ".join(out.split())
    assert code == 0 and "1 with equal values stored in another memory layout" in flat and "within --atol" not in flat


def test_equal_tensors_beside_a_code_running_pickle_are_not_identical(tmp_path, capsys):
    """data.pkl reads fine, but another pickle in the archive runs code: equal tensors alone say nothing."""
    import os
    import zipfile

    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.save({"w": torch.ones(4)}, a)
    b.write_bytes(a.read_bytes())

    class Call:
        def __reduce__(self):
            return (os.system, ("true",))

    with zipfile.ZipFile(a, "a") as z:
        z.writestr("a/extra/state.pkl", pickle.dumps(Call(), protocol=2))
    code, out = _diff(capsys, a, b)
    assert code == 1
    said = " ".join(out.split())  # the text report wraps at 80 columns
    assert "different: the files' bytes differ (1 tensors match bit for bit, but A names code-running globals" in said
    code, out = _diff(capsys, a, a, "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["diff"]["verdict"] == "identical" and doc["diff"]["unsafe"].startswith("A and B name")
