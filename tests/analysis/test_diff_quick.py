"""`diff --quick`: names, dtypes, shapes, sizes, layouts and non-tensor values, without reading a storage byte."""

from __future__ import annotations

import io
import mmap
import os
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


def _bytes_read() -> int:
    """This process's bytes through read system calls so far (every read, pread and buffered file read)."""
    with open("/proc/self/io") as f:
        return int(next(line.split()[1] for line in f if line.startswith("rchar:")))


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="counts reads through Linux's /proc/self/io")
def test_quick_reads_almost_nothing_of_large_storages(tmp_path, monkeypatch):
    """Counting the reads themselves: two files of 2 x 8 MiB of storage each, garbled in B; `diff --quick`
    reads their directories and pickles (a few KiB) and maps nothing, where the full diff maps the storages."""
    torch.manual_seed(0)
    state = {"model": {"w": torch.randn(2048, 1024), "b": torch.zeros(4)}, "exp_avg": torch.randn(2048, 1024)}
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.save(state, a)
    torch.save(state, b)
    _garbled(b)
    storage_bytes = 2 * 2 * 2048 * 1024 * 4
    mapped: list[int] = []
    real_mmap = mmap.mmap

    class Recording(real_mmap):  # type: ignore[misc,valid-type]
        def __new__(cls, fileno: int, length: int, *args: object, **kwargs: object):
            if os.path.realpath(f"/proc/self/fd/{fileno}") in (str(a.resolve()), str(b.resolve())):
                mapped.append(length or os.fstat(fileno).st_size)
            return real_mmap.__new__(cls, fileno, length, *args, **kwargs)

    monkeypatch.setattr(mmap, "mmap", Recording)
    assert run_cli("diff", a, b, "--report", "--quick").returncode == 0  # imports done: only the files remain
    before = _bytes_read()
    quick = run_cli("diff", a, b, "--report", "--quick")
    read = _bytes_read() - before
    assert quick.returncode == 0 and "same structure: 3 tensors match" in quick.stdout, quick.stdout + quick.stderr
    assert read < 256 << 10 and not mapped, (read, mapped)  # storage: 32 MiB; a block read near a header at most
    full = run_cli("diff", a, b, "--report")
    assert full.returncode == 1 and sum(mapped) + _bytes_read() - before - read >= storage_bytes


def test_a_name_given_twice_pairs_once_as_before(tmp_path):
    """Sides listed alike in order pair position by position, but only when each name is given once: keys 1 and
    "1" both name a tensor "1", and such a diff pairs by name as it always did (one pair), quick and full."""
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    for path in (a, b):
        torch.save({1: torch.zeros(2), "1": torch.zeros(3)}, path)
    quick = compare(open_checked(a, structure_only=True), open_checked(b, structure_only=True), quick=True)
    assert [t.name for t in open_checked(a, structure_only=True).tensors] == ["1", "1"]
    assert quick.same_structure == ["1"] and quick.changed == [] and quick.verdict == SAME_STRUCTURE
    full = compare(open_checked(a), open_checked(b))
    assert full.same == ["1"] and full.changed == [] and full.verdict == "identical"
