"""The one zip layer (`ckinspect.io.zipdir`): zip64 fields, member bytes, and that nothing else parses zips."""

from __future__ import annotations

import os
import re
import struct
import zipfile
import zlib
from pathlib import Path

import pytest

from ckinspect.io.reader import FileReader
from ckinspect.io.zipdir import (
    LOCAL,
    ZIP64_MARK,
    ZipError,
    local_name,
    read_directory,
    read_member,
    zip64_extra,
)

PACKAGE = Path(__file__).resolve().parents[2] / "ckinspect"


def _extra(*values: int) -> bytes:
    return struct.pack("<HH", 0x0001, 8 * len(values)) + struct.pack(f"<{len(values)}Q", *values)


def test_a_central_entry_takes_only_the_marked_fields_from_the_zip64_extra_in_order():
    other = struct.pack("<HH", 0x7075, 3) + b"abc"  # an unrelated field first is skipped
    assert zip64_extra(other + _extra(5 << 32, 7 << 32), ZIP64_MARK, 10, ZIP64_MARK) == (5 << 32, 10, 7 << 32)
    assert zip64_extra(_extra(9 << 32), 1, ZIP64_MARK, 2) == (1, 9 << 32, 2)
    assert zip64_extra(b"", ZIP64_MARK, 3, 4) == (ZIP64_MARK, 3, 4)  # nothing to take it from: left marked


def test_a_local_header_takes_both_sizes_from_the_zip64_extra_when_either_is_marked():
    assert zip64_extra(_extra(6 << 32, 8 << 32), ZIP64_MARK, 0, local=True) == (6 << 32, 8 << 32, 0)
    assert zip64_extra(_extra(6 << 32, 8 << 32), 11, 12, local=True) == (11, 12, 0)  # nothing marked: kept
    assert zip64_extra(_extra(6 << 32), ZIP64_MARK, 12, local=True) == (ZIP64_MARK, 12, 0)  # too short for both


def _zip(path: Path, members: dict[str, bytes], method: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", compression=method) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def _members(path: Path):
    handle = open(path, "rb")  # noqa: SIM115 - the caller closes it (`with handle`)
    reader = FileReader(handle.fileno(), os.fstat(handle.fileno()).st_size)
    members, cd_start = read_directory(reader)
    return handle, reader, {m.name: m for m in members}, cd_start


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_read_member_returns_what_zipfile_reads(tmp_path, method):
    payload = bytes(range(256)) * 4000
    path = _zip(tmp_path / "a.zip", {"arc/data.pkl": b"\x80\x02}q\x00.", "arc/data/0": payload}, method)
    handle, reader, members, cd_start = _members(path)
    with handle, zipfile.ZipFile(path) as z:
        for name, member in members.items():
            assert read_member(reader, member, cd_start, verify=True) == z.read(name)


def test_read_member_with_verify_refuses_a_bad_crc_and_a_local_header_naming_another_member(tmp_path):
    path = _zip(tmp_path / "a.zip", {"arc/data/0": b"x" * 100, "arc/data/1": b"y" * 100})
    data = bytearray(path.read_bytes())
    data[data.index(b"x" * 100) + 50] = ord("z")
    second = data.index(b"arc/data/1")
    data[second + len("arc/data/")] = ord("2")  # the local header now says arc/data/2
    path.write_bytes(bytes(data))
    handle, reader, members, _cd = _members(path)
    with handle:
        assert read_member(reader, members["arc/data/0"]) == b"x" * 50 + b"z" + b"x" * 49  # no verify: bytes as stored
        with pytest.raises(ZipError, match="Bad CRC-32 for arc/data/0"):
            read_member(reader, members["arc/data/0"], verify=True)
        with pytest.raises(ZipError, match="^its local header names another file$"):
            read_member(reader, members["arc/data/1"], verify=True)


def test_read_member_refuses_a_method_torch_cannot_read_and_a_bad_deflate_stream(tmp_path):
    path = _zip(tmp_path / "a.zip", {"m": zlib.compress(b"q" * 1000)}, zipfile.ZIP_DEFLATED)
    handle, reader, members, _cd = _members(path)
    with handle:
        bzip = members["m"]._replace(compress_type=12)
        with pytest.raises(ZipError, match="uses zip compression method 12, which torch never writes"):
            read_member(reader, bzip)
        garbage = tmp_path / "g.zip"
        raw = bytearray(path.read_bytes())
        start = LOCAL.size + 1  # first byte of the deflate stream
        raw[start : start + 4] = b"\xff\xff\xff\xff"
        garbage.write_bytes(bytes(raw))
    handle, reader, members, _cd = _members(garbage)
    with handle, pytest.raises(ZipError, match="bad deflate data"):
        read_member(reader, members["m"])


def test_read_member_stops_a_member_that_inflates_past_the_limit(tmp_path):
    path = _zip(tmp_path / "bomb.zip", {"m": b"\0" * (1 << 20)}, zipfile.ZIP_DEFLATED)
    handle, reader, members, _cd = _members(path)
    with handle, pytest.raises(ZipError, match="inflates past 4096 bytes"):
        read_member(reader, members["m"]._replace(file_size=10), max_bytes=4096)  # the directory understates it


def test_local_name_reads_the_first_members_name():
    head = LOCAL.pack(b"PK\x03\x04", 20, 0, 0, 0, 0, 0, 0, 0, 12, 0) + b"arc/data.pkl"
    assert local_name(head) == b"arc/data.pkl"
    assert local_name(head[:29]) is None and local_name(b"PK\x05\x06" + head[4:]) is None


def test_no_module_outside_the_zip_layer_parses_zip_records_or_uses_zipfile():
    """One zip layer: signatures, record layouts and zipfile live in ckinspect/io/zipdir.py (zipwalk
    walks the same records and imports them from there)."""
    record = re.compile(rb"PK\\x0[1-8]|\bimport zipfile\b|\bzipfile\.")
    offenders = [
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if p.name != "zipdir.py" and record.search(p.read_bytes())
    ]
    assert offenders == []


def test_bulk_local_header_offsets_match_one_by_one(tmp_path):
    import torch

    from ckinspect.io.reader import FileReader
    from ckinspect.io.zipdir import ZipError, ZipMember, data_offset, data_offsets, read_directory

    path = tmp_path / "many.pt"
    torch.save({f"w{i}": torch.full((3,), float(i)) for i in range(400)}, path)  # headers span several read blocks
    with open(path, "rb") as f:
        reader = FileReader(f.fileno(), os.fstat(f.fileno()).st_size)
        members, _ = read_directory(reader)
        assert [tuple(m) for m in members] == [
            (i.filename, i.header_offset, i.compress_type, i.compress_size, i.file_size, i.CRC, i.flag_bits)
            for i in zipfile.ZipFile(path).infolist()
        ]
        assert data_offsets(reader, members) == [data_offset(reader, m) for m in members]
        stray = ZipMember("nowhere", members[-1].header_offset + 1, 0, 0, 0, 0, 0)  # not at a local header
        beyond = ZipMember("beyond", reader.size + 10, 0, 0, 0, 0, 0)
        got = data_offsets(reader, [members[0], stray, beyond, members[1]])
        assert got[0] == data_offset(reader, members[0]) and got[3] == data_offset(reader, members[1])
        assert isinstance(got[1], ZipError) and "local header of nowhere missing" in str(got[1])
        assert isinstance(got[2], ZipError) and "local header of beyond missing" in str(got[2])
