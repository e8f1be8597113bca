"""The local-header walk that salvage stands on: sizes from data descriptors, 32- and 64-bit."""

from __future__ import annotations

import io
import zipfile
import zlib

import pytest

from ckinspect.io.zipwalk import crc32_of, walk_local_headers


class _Unseekable(io.RawIOBase):
    """A pipe-like sink: zipfile then writes sizes in data descriptors, as torch's writer does."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self.buf += b
        return len(b)


@pytest.mark.parametrize("zip64", [False, True])
def test_walk_finds_every_member_from_its_data_descriptor(zip64):
    members = {
        "a/data.pkl": b"\x80\x02}q\x00.",
        "a/data/0": bytes(range(256)) * 3,
        "a/data/1": b"PK\x07\x08" * 10,  # decoy descriptor signatures inside the data
        "a/empty": b"",
    }
    sink = _Unseekable()
    with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_STORED) as z:
        for name, data in members.items():
            with z.open(name, "w", force_zip64=zip64) as f:
                f.write(data)
    data = bytes(sink.buf)
    found = list(walk_local_headers(data))
    assert [m.name for m in found] == list(members)
    for m in found:
        assert m.complete and data[m.data_offset : m.end] == members[m.name]
        assert m.crc32 == zlib.crc32(members[m.name]) == crc32_of(data, m.data_offset, m.size)
    # cut inside the second storage: earlier members whole, that one not delimited
    cut = found[2].data_offset + 7
    again = list(walk_local_headers(data[:cut]))
    assert [m.complete for m in again] == [True, True, False]
