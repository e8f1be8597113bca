"""The zip layer's writer for torch archives: the stored records of a zip written in place, in bounded
chunks, with every CRC-32 the zip keeps of them made true.

torch.save under `torch.serialization.skip_data()` writes the whole archive (every record's header,
its 64-byte alignment, zip64 records, the central directory) with the storages' bytes left empty and
their CRC-32s unknown. `fill_records` writes each `data/<key>` record from its source, then patches
its CRC-32 where torch's zip writer keeps it (the data descriptor after the data, or the local header;
and the central directory), and rewrites `.data/serialization_id`, which torch derives from the
records' CRCs (c10::hash_combine, in record order). The file is then byte for byte what torch.save
writes from the same tensors in memory (tests/ops/test_streaming.py). Nothing here imports torch.
"""

from __future__ import annotations

import os
import struct

from ckinspect.io.crc import crc32
from ckinspect.io.reader import FileReader
from ckinspect.io.zipdir import (
    CENTRAL_CRC_AT,
    DESCRIPTOR_SIG,
    FLAG_DESCRIPTOR,
    LOCAL_CRC_AT,
    ZipMember,
    data_offset,
    read_directory,
)
from ckinspect.vocab import CkinspectError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Protocol

    class RecordSource(Protocol):
        """Where one record's bytes come from, in order, in bounded pieces."""

        def chunks(self) -> Iterable[bytes | memoryview]: ...


SERIALIZATION_ID = ".data/serialization_id"
_HASH_MASK = (1 << 64) - 1


def hash_combine(seed: int, value: int) -> int:
    """c10::hash_combine on 64-bit size_t: how torch's zip writer folds the records' CRCs into the serialization id."""
    return seed ^ ((value + 0x9E3779B9 + (seed << 6) + (seed >> 2)) & _HASH_MASK)


def fill_records(fd: int, sources: Mapping[str, RecordSource]) -> None:
    """Write each `data/<key>` record of the archive open at `fd` from `sources[key]` and make its CRC-32s
    true; then the serialization id. CkinspectError when a source's size is not the record's."""
    reader = FileReader(fd, os.fstat(fd).st_size)
    entries: list[int] = []
    members, _ = read_directory(reader, entries=entries)  # the directory read once: members and entry positions
    crcs: list[int] = []
    serialization_id: tuple[ZipMember, int] | None = None
    for member, entry in zip(members, entries, strict=True):
        record = member.name.partition("/")[2]
        if record == SERIALIZATION_ID:
            serialization_id = (member, entry)
            continue
        source = sources.get(record[len("data/") :]) if record.startswith("data/") else None
        crc = member.crc32 if source is None else _fill(fd, reader, member, entry, source)
        if member.file_size:  # torch folds the CRC of every non-empty record into the id, in order
            crcs.append(crc)
    if serialization_id is not None:
        _write_serialization_id(fd, reader, *serialization_id, crcs)


def _fill(fd: int, reader: FileReader, member: ZipMember, entry: int, source: RecordSource) -> int:
    start = data_offset(reader, member)
    crc, written = _write_record(fd, source, start)
    if written != member.file_size:
        raise CkinspectError(f"{member.name.partition('/')[2]}: {written} bytes written where torch.save left "
                             f"{member.file_size}")  # fmt: skip
    _patch_crc(fd, reader, member, entry, start, crc)
    return crc


def _write_serialization_id(fd: int, reader: FileReader, member: ZipMember, entry: int, crcs: list[int]) -> None:
    start = data_offset(reader, member)
    old = reader.read_at(start, member.file_size)
    if len(old) != 40 or not old.isdigit():
        raise CkinspectError(f"torch.save wrote a serialization id this tool does not know ({old[:40]!r})")
    combined = 0
    for crc in crcs:
        combined = hash_combine(combined, crc)
    new = old[:20] + f"{combined:020d}".encode()
    os.pwrite(fd, new, start)
    _patch_crc(fd, reader, member, entry, start, crc32(new))


def _write_record(fd: int, source: RecordSource, start: int) -> tuple[int, int]:
    """Write a source's bytes from `start`; (CRC-32, bytes written). A function of its own so the last
    piece's buffer is freed on return, before the next record's is allocated."""
    crc = written = 0
    for chunk in source.chunks():
        os.pwrite(fd, chunk, start + written)
        crc = crc32(chunk, crc)
        written += len(chunk)
    return crc, written


def _patch_crc(fd: int, reader: FileReader, member: ZipMember, entry: int, start: int, crc: int) -> None:
    packed = struct.pack("<L", crc)
    os.pwrite(fd, packed, entry + CENTRAL_CRC_AT)
    if member.flags & FLAG_DESCRIPTOR:
        at = start + member.compressed_size
        if reader.read_at(at, 4) != DESCRIPTOR_SIG:
            raise CkinspectError(f"{member.name}: no data descriptor after its bytes")
        os.pwrite(fd, packed, at + 4)
    else:
        os.pwrite(fd, packed, member.header_offset + LOCAL_CRC_AT)
