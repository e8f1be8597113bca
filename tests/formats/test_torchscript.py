"""TorchScript archives (torch.jit.save): tensors listed from data.pkl and constants.pkl, the code named
(EMBEDDED_CODE), torch's own TorchScript globals not called unsafe; diff and convert work on them."""

from __future__ import annotations

import json
import zipfile

import jsonschema
import numpy as np
import pytest
import torch

from ckinspect.analysis.diff import diff_checkpoints, value_blocks
from ckinspect.cli import main
from ckinspect.formats import open_checkpoint
from ckinspect.io.blobs import Blobs
from ckinspect.report.schema import SCHEMA_1


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("scale", torch.arange(3, dtype=torch.float64))
        self.offset = torch.tensor([1.0, 2.0, 3.0])  # neither parameter nor buffer: tracing makes it a constant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.scale.float() + self.offset


def _save(path, seed: int):
    torch.manual_seed(seed)
    module = torch.jit.trace(Tiny(), torch.ones(2, 4))
    torch.jit.save(module, str(path))
    return module


def _values(ckpt, name):
    t = next(t for t in ckpt.tensors if t.name == name)
    with Blobs() as blobs:
        return np.concatenate(list(value_blocks(blobs, ckpt, t)))


def test_tensors_code_and_no_unsafe(tmp_path):
    path = tmp_path / "tiny.pt"
    module = _save(path, 0)
    ckpt = open_checkpoint(path)
    assert ckpt.format == "torchscript"
    codes = [f.code for f in ckpt.findings]
    assert "UNSAFE_PICKLE" not in codes and "CORRUPT" not in codes
    (code,) = [f for f in ckpt.findings if f.code == "EMBEDDED_CODE"]
    with zipfile.ZipFile(path) as archive:
        code_files = [n for n in archive.namelist() if "/code/" in n and n.endswith(".py")]
    assert code_files and all(n in code.message for n in code_files)
    names = {t.name: t for t in ckpt.tensors}
    for name, tensor in module.state_dict().items():
        assert names[name].dtype == str(tensor.dtype).removeprefix("torch.")
        assert names[name].shape == tuple(tensor.shape)
        assert _values(ckpt, name).tobytes() == tensor.numpy().tobytes()
    constants = [n for n in names if n.startswith("CONSTANTS.")]
    assert constants == ["CONSTANTS.c0"]
    assert _values(ckpt, "CONSTANTS.c0").tolist() == [1.0, 2.0, 3.0]


def test_torch_globals_outside_a_torchscript_archive_stay_unsafe(tmp_path):
    """Without constants.pkl torch.load does not hand the zip to torch.jit.load: __torch__ is no class it knows."""
    path = tmp_path / "tiny.pt"
    _save(path, 0)
    stripped = tmp_path / "stripped.pt"
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(stripped, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            if not info.filename.endswith("/constants.pkl"):
                zout.writestr(info.filename, zin.read(info))
    ckpt = open_checkpoint(stripped)
    assert ckpt.format == "torch-zip"
    unsafe = [f for f in ckpt.findings if f.code == "UNSAFE_PICKLE"]
    assert any("data.pkl names globals" in f.message and "__torch__." in f.message for f in unsafe)
    assert not ckpt.tensors


def test_diff_sees_changed_weights_and_convert_writes_them(tmp_path, capsys):
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    _save(a, 0)
    module_b = _save(b, 1)
    result = diff_checkpoints(open_checkpoint(a), open_checkpoint(b))
    assert sorted(c.name for c in result.changed) == ["lin.bias", "lin.weight"]
    assert not result.identical
    assert main(["diff", str(a), str(b), "--report"]) == 1
    capsys.readouterr()

    from safetensors.torch import load_file

    out = tmp_path / "b.safetensors"
    assert main(["convert", str(b), str(out)]) == 0
    written = load_file(out)
    for name, tensor in module_b.state_dict().items():
        assert torch.equal(written[name], tensor)


@pytest.mark.parametrize("quick", [True, False])
def test_report_exit_status_is_a_warning_not_an_error(tmp_path, capsys, quick):
    path = tmp_path / "tiny.pt"
    _save(path, 0)
    args = ["--report", str(path), "--format", "json"] + (["--quick"] if quick else [])
    assert main(args) == 0  # EMBEDDED_CODE is a warning: --fail-on error passes
    report = json.loads(capsys.readouterr().out)
    jsonschema.validate(report, SCHEMA_1)  # EMBEDDED_CODE is one of the schema's finding codes
    assert [f["code"] for f in report["files"][0]["findings"]] == ["EMBEDDED_CODE"]
    assert main([*args, "--fail-on", "warning"]) == 1
    capsys.readouterr()
