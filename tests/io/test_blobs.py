"""Bounded reads of storage bytes, and the CRC arithmetic that lets two threads checksum one member."""

import os
import zlib
from pathlib import Path

import pytest

from ckinspect.io.blobs import Blobs, UnreadableStorage, read_chunks
from ckinspect.io.crc import python_crc32_combine as crc32_combine
from ckinspect.model import StorageInfo


def test_read_chunks_yields_the_exact_bytes_in_bounded_pieces(tmp_path):
    data = os.urandom(100_000)
    (tmp_path / "f").write_bytes(b"HEAD" + data + b"TAIL")
    storage = StorageInfo("0", "uint8", len(data), tmp_path / "f", 4)
    pieces = [bytes(p) for p in read_chunks(storage, chunk=4096)]
    assert max(map(len, pieces)) == 4096 and len(pieces) == 25
    assert b"".join(pieces) == data
    assert b"".join(bytes(p) for p in read_chunks(storage, start=10, length=20, chunk=7)) == data[10:30]


def test_storage_without_raw_offset_or_cut_short_is_an_error_the_caller_reports(tmp_path):
    (tmp_path / "f").write_bytes(b"x" * 100)
    with pytest.raises(UnreadableStorage, match="no raw byte offset"):
        list(read_chunks(StorageInfo("3", "float32", 8, tmp_path / "f", None, member="archive/data/3")))
    with pytest.raises(UnreadableStorage, match="cut short"):
        list(read_chunks(StorageInfo("4", "float32", 400, tmp_path / "f", 0)))


def test_crc32_combine_equals_zlib_over_the_concatenation():
    for a, b in [(b"", b"xyz"), (b"abc", b""), (os.urandom(1000), os.urandom(77777))]:
        assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_big_windows_are_mapped_and_unmapped(tmp_path):
    data = os.urandom(3 << 20)
    (tmp_path / "f").write_bytes(data)
    with Blobs() as blobs:
        with blobs.window(Path(tmp_path / "f"), 12345, 1 << 20) as view:
            assert bytes(view) == data[12345 : 12345 + (1 << 20)]
        with pytest.raises(UnreadableStorage), blobs.window(Path(tmp_path / "f"), len(data) - 10, 1 << 20):
            pass
