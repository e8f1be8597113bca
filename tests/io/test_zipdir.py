"""The central-directory zip reader: members and local-header offsets read in bulk agree with zipfile."""

from __future__ import annotations

import zipfile

import torch


def test_bulk_local_header_offsets_match_one_by_one(tmp_path):
    import os

    from ckinspect.io.zipdir import FileReader, ZipError, ZipMember, data_offset, data_offsets, read_directory

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
