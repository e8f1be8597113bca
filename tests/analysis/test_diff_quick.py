"""`diff --quick`: names, dtypes, shapes, sizes, layouts and non-tensor values, without reading a storage byte."""

from __future__ import annotations

import io
import warnings
import zipfile

import pytest
import torch
import torch.distributed.checkpoint as dcp

from ckinspect.analysis import diff as diff_module
from ckinspect.api import compare, open_checked
from ckinspect.vocab import SAME_STRUCTURE
from tests.conftest import run_cli


def _garbled(path) -> None:
    """Every storage member's bytes overwritten in place (CRCs no longer match): only a read would notice."""
    with zipfile.ZipFile(path) as z:
        spans = [(i.header_offset, i.compress_size) for i in z.infolist() if "/data/" in i.filename]
    raw = bytearray(path.read_bytes())
    for header, size in spans:
        name_len, extra_len = int.from_bytes(raw[header + 26 : header + 28], "little"), int.from_bytes(
            raw[header + 28 : header + 30], "little")  # fmt: skip
        start = header + 30 + name_len + extra_len
        raw[start : start + size] = b"\xa5" * size
    path.write_bytes(bytes(raw))


@pytest.fixture
def pair(tmp_path):
    torch.manual_seed(0)
    state = {"model": {"w": torch.randn(8, 4), "b": torch.zeros(4)}, "step": 10, "lr": 0.1}
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.save(state, a)
    torch.save({**state, "model": {"w": state["model"]["w"] + 1, "b": state["model"]["b"]}}, b)
    _garbled(b)
    return a, b


def test_quick_reads_no_storage_and_says_same_structure(pair, monkeypatch):
    a, b = pair

    def refuse(*_args, **_kwargs):
        raise AssertionError("diff --quick opened storage bytes")

    monkeypatch.setattr(diff_module, "Blobs", refuse)
    result = compare(open_checked(a, structure_only=True), open_checked(b, structure_only=True), quick=True)
    assert result.verdict == SAME_STRUCTURE and not result.identical and result.bytes_compared == 0
    assert sorted(result.same_structure) == ["model.b", "model.w"] and result.same == [] and result.changed == []


def test_quick_from_the_command_line(pair, tmp_path):
    a, b = pair
    quick = run_cli("diff", str(a), str(b), "--report", "--quick")
    assert quick.returncode == 0 and "same structure: 2 tensors match" in quick.stdout, quick.stdout + quick.stderr
    assert "identical" not in quick.stdout
    full = run_cli("diff", str(a), str(b), "--report")
    assert full.returncode != 0  # the values (and the garbled bytes) differ: the full diff reads them
    torch.save({"model": {"w": torch.randn(8, 5), "b": torch.zeros(4)}, "step": 11, "lr": 0.1}, tmp_path / "c.pt")
    changed = run_cli("diff", str(a), str(tmp_path / "c.pt"), "--report", "--quick", "--format", "json")
    assert changed.returncode == 1
    assert '"reason": "shape"' in changed.stdout and '"step": [\n' in changed.stdout


def test_quick_on_dcp_folders_trusts_their_metadata(tmp_path):
    saved = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        folder = tmp_path / f"s{seed}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save({"model": {"w": torch.randn(4, 3)}, "step": 5}, checkpoint_id=str(folder))
        saved.append(folder)
    # B's tensor bytes garbled inside its item (values differ too): --quick never opens the item
    where = next(v for k, v in dcp.FileSystemReader(str(saved[1])).read_metadata().storage_data.items()
                 if k.fqn == "model.w")  # fmt: skip
    data = saved[1] / where.relative_path
    raw = bytearray(data.read_bytes())
    item = raw[where.offset : where.offset + where.length]
    with zipfile.ZipFile(io.BytesIO(bytes(item))) as z:
        info = next(i for i in z.infolist() if "/data/" in i.filename)
    start = where.offset + info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    raw[start : start + info.compress_size] = b"\xa5" * info.compress_size
    data.write_bytes(bytes(raw))
    quick = run_cli("diff", str(saved[0]), str(saved[1]), "--report", "--quick")
    assert quick.returncode == 0 and "same structure: 1 tensors match" in quick.stdout, quick.stdout + quick.stderr
    full = run_cli("diff", str(saved[0]), str(saved[1]), "--report")
    assert full.returncode != 0 and "same structure" not in full.stdout
