"""`ckinspect convert` as a user runs it (through the CLI's `main`, in this process): refusals are one line
on stderr, exit 2, and no output file."""

from __future__ import annotations

import os

import pytest
import torch

from ckinspect.ops.convert import convert
from ckinspect.vocab import CkinspectError
from tests.conftest import run_cli
from tests.helpers.torch_files import save_resume


@pytest.fixture
def resume(tmp_path):
    return save_resume(tmp_path / "run_resume.pth", step=30, seed=1)


class _RunsCode:
    def __reduce__(self):
        return (os.getcwd, ())


def test_unsafe_pickle_is_refused_without_trust_and_announced_with_it(tmp_path):
    path = tmp_path / "evil.pth"
    torch.save({"w": torch.ones(2), "x": _RunsCode()}, path)
    with pytest.raises(CkinspectError, match="refused"):
        convert(path, tmp_path / "out.safetensors")
    assert not (tmp_path / "out.safetensors").exists()
    proc = run_cli("convert", path, tmp_path / "out.pth")
    assert proc.returncode == 2 and "--trust" in proc.stderr
    proc = run_cli("convert", path, tmp_path / "out.pth", "--trust")
    assert proc.returncode == 0, proc.stderr
    assert "about to run torch.load(" in proc.stderr and "weights_only=False" in proc.stderr and "getcwd" in proc.stderr


def test_a_member_in_a_compression_torch_cannot_read_is_refused_as_damaged(resume, tmp_path):
    import re
    import zipfile

    data = bytearray(resume.read_bytes())
    name = next(n for n in zipfile.ZipFile(resume).namelist() if n.endswith("/data/0"))
    entries = [m.start() for m in re.finditer(rb"PK\x01\x02", data)]
    entry = next(e for e in entries if data[e + 46 :].startswith(name.encode()))
    data[entry + 10 : entry + 12] = (99).to_bytes(2, "little")  # the directory names a method nobody can read
    broken = tmp_path / "method99.pth"
    broken.write_bytes(data)
    proc = run_cli("convert", broken, tmp_path / "out.pth")
    assert proc.returncode == 2 and proc.stdout == ""
    why = f"{broken.name}: storage {name} uses zip compression method 99, which torch cannot read"
    assert proc.stderr == f"ckinspect: {broken} is damaged ({why}); try `ckinspect salvage {broken} OUT`\n"
    assert not (tmp_path / "out.pth").exists()


def test_a_deflated_member_that_fails_its_crc_is_a_tensor_without_bytes(resume, tmp_path):
    import zipfile

    deflated = tmp_path / "deflated.pth"
    with zipfile.ZipFile(resume) as zin, zipfile.ZipFile(deflated, "w") as zout:
        for info in zin.infolist():
            method = zipfile.ZIP_DEFLATED if info.filename.endswith("/data/0") else zipfile.ZIP_STORED
            zout.writestr(info.filename, zin.read(info), compress_type=method)
    with zipfile.ZipFile(deflated) as z:
        member = next(i for i in z.infolist() if i.filename.endswith("/data/0"))
    data = bytearray(deflated.read_bytes())
    start = member.header_offset + 30 + len(member.filename) + len(member.extra)
    data[start + member.compress_size // 2] ^= 0x55  # inside the deflate stream: bad data or a bad CRC
    deflated.write_bytes(data)
    proc = run_cli("convert", deflated, tmp_path / "out.pth")
    assert proc.returncode == 2 and proc.stdout == ""
    missing = "2 tensor(s) have no readable bytes (model.emb.weight, model.head.weight)"  # the tied embedding
    assert proc.stderr == f"ckinspect: {deflated}: {missing}; try ckinspect salvage\n"
    assert not (tmp_path / "out.pth").exists()
