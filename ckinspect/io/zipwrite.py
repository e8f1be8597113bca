"""The zip layer's streaming writer for torch archives: the layout torch.save writes (PyTorchStreamWriter
over miniz), record by record, each record's bytes taken from its source in bounded chunks.

    <archive>/data.pkl, .format_version, .storage_alignment, byteorder, data/0 ..., version,
    .data/serialization_id; then the central directory, the zip64 end record and its locator (torch
    always writes them), and the end record.

Each record is stored (never deflated) with its bytes aligned to 64 (an "FB" extra field of 'Z'
padding), a UTF-8 flag and, when it holds bytes, a data descriptor after them with its CRC-32, so the
local header is written before the bytes are known. A record that is 4 GiB or longer, or starts past
4 GiB, gets a zip64 extra field (in the local header and the directory) and a 64-bit descriptor.
`.data/serialization_id` is the record-name hash torch's writer computes (its hash table's order is
the writer's own: the caller supplies it, `names_hash`) followed by the CRC-32s of the non-empty
records folded with c10::hash_combine. Memory holds one chunk and one directory entry per record; nothing
here imports torch. The bytes are torch.save's, byte for byte (tests/io/test_zipwrite.py).
"""

from __future__ import annotations

import struct

from ckinspect.io.crc import crc32
from ckinspect.io.zipdir import (
    _CENTRAL,
    _EOCD,
    _EOCD64,
    _EOCD64_LOCATOR,
    CENTRAL_SIG,
    DESCRIPTOR32,
    DESCRIPTOR64,
    DESCRIPTOR_SIG,
    EOCD64_LOCATOR_SIG,
    EOCD64_SIG,
    EOCD_SIG,
    FLAG_DESCRIPTOR,
    FLAG_UTF8,
    LOCAL,
    LOCAL_SIG,
    ZIP64_EXTRA_TAG,
    ZIP64_MARK,
)
from ckinspect.vocab import CkinspectError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import BinaryIO

SERIALIZATION_ID = ".data/serialization_id"
VERSION_RECORD = ("version", b"3\n")  # what torch.save's writer adds at the end (its file format version 3)
ALIGNMENT = 64  # torch.serialization._get_storage_alignment()
_HASH_MASK = (1 << 64) - 1
_U32 = 0xFFFFFFFF


def hash_combine(seed: int, value: int) -> int:
    """c10::hash_combine on 64-bit size_t: how torch's zip writer folds the records' CRCs into the serialization id."""
    return seed ^ ((value + 0x9E3779B9 + (seed << 6) + (seed >> 2)) & _HASH_MASK)


def _zip64_extra(fields: tuple[int, ...]) -> bytes:
    return struct.pack(f"<HH{len(fields)}Q", ZIP64_EXTRA_TAG, 8 * len(fields), *fields) if fields else b""


def _padding(cursor: int, name_size: int, size: int) -> bytes:
    """torch's "FB" extra field: 'Z's up to the next 64-byte boundary for the record's first byte, counted
    after the local header, the name, any zip64 extra field and the field's own 4-byte head."""
    start = cursor + LOCAL.size + name_size + 4
    if size >= _U32 or cursor >= _U32:
        start += 4 + (16 if size >= _U32 else 0) + (8 if cursor >= _U32 else 0)
    pad = -start % ALIGNMENT
    return b"FB" + struct.pack("<H", pad) + b"Z" * pad


class TorchArchiveWriter:
    """Writes one torch archive to `handle` (a binary file at its start), record by record."""

    def __init__(self, handle: BinaryIO, archive: str = "archive") -> None:
        self.handle = handle
        self.prefix = archive + "/"
        self.pos = 0
        self.names: list[str] = []
        self._directory: list[bytes] = []
        self._crcs = 0

    def write_record(self, name: str, chunks: Iterable[bytes | memoryview], size: int) -> int:
        """One record of `size` bytes from `chunks`; its CRC-32. CkinspectError when they are not `size` bytes."""
        full = (self.prefix + name).encode()
        offset = self.pos
        big, far = size >= _U32, offset >= _U32
        local_zip64 = _zip64_extra(((size, 0) if big else ()) + ((offset,) if far else ()))  # miniz: no size yet
        extra = local_zip64 + _padding(offset, len(full), size)
        flags = FLAG_UTF8 | (FLAG_DESCRIPTOR if size else 0)
        self._write(LOCAL.pack(LOCAL_SIG, 0, flags, 0, 0, 0, 0, 0, 0, len(full), len(extra)) + full + extra)
        crc = self._write_bytes(name, chunks, size)
        if size:
            zip64 = big or far
            self._write((DESCRIPTOR64 if zip64 else DESCRIPTOR32).pack(DESCRIPTOR_SIG, crc, size, size))
            self._crcs = hash_combine(self._crcs, crc)
        central_zip64 = _zip64_extra(((size, size) if big else ()) + ((offset,) if far else ()))
        self._directory.append(
            _CENTRAL.pack(CENTRAL_SIG, 0, 0, 0, 0, flags, 0, 0, 0, crc, min(size, _U32), min(size, _U32), len(full),
                          len(central_zip64), 0, 0, 0, 0, min(offset, _U32)) + full + central_zip64
        )  # fmt: skip
        self.names.append(name)
        return crc

    def _write_bytes(self, name: str, chunks: Iterable[bytes | memoryview], size: int) -> int:
        """The record's bytes; a function of its own so the last chunk is freed before the next record's."""
        crc = written = 0
        for chunk in chunks:
            self.handle.write(chunk)
            crc = crc32(chunk, crc)
            written += len(chunk)
        self.pos += written
        if written != size:
            raise CkinspectError(f"{name}: {written} bytes written where the archive declares {size}")
        return crc

    def _write(self, data: bytes) -> None:
        self.handle.write(data)
        self.pos += len(data)

    def finish(self, names_hash: Callable[[list[str]], int]) -> None:
        """The records torch's writer adds at the end (`version`, the serialization id from
        `names_hash(record names)` and the CRCs), the central directory and the end records."""
        name, data = VERSION_RECORD
        if name not in self.names:
            self.write_record(name, [data], len(data))
        serialization_id = f"{names_hash(self.names) & _HASH_MASK:020d}{self._crcs:020d}".encode()
        self.write_record(SERIALIZATION_ID, [serialization_id], len(serialization_id))
        cd_start = self.pos
        for entry in self._directory:
            self._write(entry)
        cd_size, count = self.pos - cd_start, len(self._directory)
        eocd64 = self.pos
        self._write(_EOCD64.pack(EOCD64_SIG, _EOCD64.size - 12, 0x031E, 0x2D, 0, 0, count, count, cd_size, cd_start))
        self._write(_EOCD64_LOCATOR.pack(EOCD64_LOCATOR_SIG, 0, eocd64, 1))
        self._write(_EOCD.pack(EOCD_SIG, 0, 0, min(count, 0xFFFF), min(count, 0xFFFF), min(cd_size, ZIP64_MARK),
                               min(cd_start, ZIP64_MARK), 0))  # fmt: skip
