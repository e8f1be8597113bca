"""`ckinspect salvage` as a user runs it (through the CLI's `main`, in this process): what came back, what
did not and why, exit 1 when anything is missing."""

from __future__ import annotations

import json
import struct

import pytest
import torch

from ckinspect.commands.salvage import render
from ckinspect.ops.salvage import salvage
from ckinspect.vocab import CkinspectError
from tests.conftest import run_cli
from tests.helpers.torch_files import cut, many_tensors


def test_salvage_cli_reports_recovered_and_missing_and_exits_1(tmp_path):
    src = tmp_path / "w.pth"
    torch.save(many_tensors(6), src)
    cut(src, 0.6)
    proc = run_cli("salvage", src, tmp_path / "out.pth", "--format", "json")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["command"] == "salvage" and doc["summary"]["recovered"] + doc["summary"]["missing"] == 6
    assert doc["summary"]["missing"] >= 1 and all(m["why"] for m in doc["missing"])
    assert "recovered bit-exact" in render(salvage(src, tmp_path / "out2.pth"), "text")
    lost = tmp_path / "nopkl.pth"
    lost.write_bytes(src.read_bytes()[:40])
    with pytest.raises(CkinspectError, match="data.pkl"):
        salvage(lost, tmp_path / "out3.pth")
    assert not (tmp_path / "out3.pth").exists()


def test_safetensors_header_entries_that_cannot_be_trusted_are_named_the_rest_recovered(tmp_path):
    from safetensors.torch import save_file

    save_file({"a": torch.arange(4.0), "b": torch.ones(2, 3), "c": torch.zeros(5)}, tmp_path / "ok.safetensors")
    data = bytearray((tmp_path / "ok.safetensors").read_bytes())
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + n])
    header["b"]["dtypf"] = header["b"].pop("dtype")  # a flipped bit in a key
    header["c"]["shape"] = [6]  # 6 float32 do not fit 20 bytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    assert len(raw) <= n
    raw = raw.ljust(n)
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(data[:8] + raw + data[8 + n :])
    proc = run_cli("salvage", broken, tmp_path / "out.pt", "--format", "json")
    assert proc.returncode == 1 and "internal error" not in proc.stderr
    result = json.loads(proc.stdout)
    assert result["recovered"] == ["a"]
    assert {m["tensor"]: m["why"] for m in result["missing"]} == {
        "b": "its header entry cannot be trusted: no dtype",
        "c": "its header entry cannot be trusted: offsets [40, 60] hold 20 bytes but F32 [6] needs 24",
    }
    assert torch.equal(torch.load(tmp_path / "out.pt", weights_only=True)["a"], torch.arange(4.0))


def test_a_source_that_names_code_running_globals_is_said_and_exits_1(tmp_path):
    """Salvage reads one data.pkl; a second pickle in the zip that torch.load or another reader would run
    is judged as --report judges it: the tensors are written, the danger is said, exit 1, nothing ran."""
    import os
    import pickle
    import zipfile

    class Call:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'MARKER'}",))

    src = tmp_path / "w.pth"
    torch.save({"w": torch.ones(3)}, src)
    with zipfile.ZipFile(src, "a") as z:
        z.writestr("w/extra/state.pkl", pickle.dumps(Call(), protocol=2))
    proc = run_cli("salvage", src, tmp_path / "out.pth", "--format", "json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and doc["recovered"] == ["w"] and doc["missing"] == []
    assert "posix.system" in doc["unsafe"] and any(n.startswith("UNSAFE_PICKLE in the source") for n in doc["notes"])
    assert torch.equal(torch.load(tmp_path / "out.pth")["w"], torch.ones(3))
    assert not (tmp_path / "MARKER").exists()
