"""Walk a zip archive by its local file headers, front to back, without its central directory.

torch.save writes stored (uncompressed) members whose sizes follow the data in a data descriptor
(flag bit 3), so a member's end is found by searching for the descriptor whose size field equals
the distance walked. This is what lets `salvage` read a file whose tail, directory included, is gone.
The record layouts and the zip64 extra field come from `zipdir`, the one zip layer. Nothing here
imports torch.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from pathlib import Path

from ckinspect.io.crc import crc32
from ckinspect.io.zipdir import (
    CENTRAL_SIG,
    DESCRIPTOR32,
    DESCRIPTOR64,
    DESCRIPTOR_SIG,
    FLAG_DESCRIPTOR,
    LOCAL,
    LOCAL_SIG,
    zip64_extra,
)
from ckinspect.record import Record

# a mapped file is read this much at a time, then its pages are let go: salvage's resident set beside torch's
# import stays a few MiB whatever the file's size (8 MiB windows put salvage -> .pth over 256 MB)
_CRC_CHUNK = 1 << 20
_FIND_WINDOW = 1 << 20  # a signature search over a mapped file looks at this much at a time


class LocalMember(Record):
    """One member as its local header and data descriptor describe it."""

    name: str
    header_offset: int
    data_offset: int  # absolute offset of the first data byte
    size: int | None  # None: the member's end was not found (cut short)
    crc32: int | None  # expected CRC-32 (header or descriptor); None when unknown
    method: int  # 0 = stored; anything else we do not salvage

    @property
    def complete(self) -> bool:
        return self.size is not None and self.crc32 is not None

    @property
    def end(self) -> int | None:
        return None if self.size is None else self.data_offset + self.size


def walk_local_headers(buf: bytes | mmap.mmap | memoryview) -> Iterator[LocalMember]:
    """Yield every member whose local header is readable, in file order.

    After a member that cannot be delimited (cut short), or a header that does not parse, the walk
    resynchronises on the next local-header signature, so one damaged member hides no others.
    """
    size = len(buf)
    pos = 0
    while pos + LOCAL.size <= size:
        if bytes(buf[pos : pos + 4]) != LOCAL_SIG:
            nxt = _find(buf, LOCAL_SIG, pos + 1)
            if nxt < 0:
                return
            pos = nxt
            continue
        _sig, _ver, flags, method, _t, _d, crc, csize, usize, nlen, elen = LOCAL.unpack_from(buf, pos)
        name_start = pos + LOCAL.size
        data_offset = name_start + nlen + elen
        if data_offset > size:
            return
        name = bytes(buf[name_start : name_start + nlen]).decode("utf-8", "replace")
        extra = bytes(buf[name_start + nlen : data_offset])
        usize, csize, _ = zip64_extra(extra, usize, csize, local=True)
        if flags & FLAG_DESCRIPTOR:
            found = _find_descriptor(buf, data_offset)
            if found is None:
                yield LocalMember(name, pos, data_offset, None, None, method)
                nxt = _find(buf, LOCAL_SIG, data_offset)
                if nxt < 0:
                    return
                pos = nxt
                continue
            length, crc, desc_len = found
            yield LocalMember(name, pos, data_offset, length, crc, method)
            pos = data_offset + length + desc_len
        else:
            end = data_offset + csize
            if end > size:
                yield LocalMember(name, pos, data_offset, None, crc, method)
                return
            yield LocalMember(name, pos, data_offset, csize, crc, method)
            pos = end


def _find(buf, needle: bytes, start: int) -> int:
    if isinstance(buf, mmap.mmap):
        # window by window, each dropped from the resident set once searched: a search across a 2 GiB
        # storage would otherwise leave all of it mapped in, and salvage's memory would grow with the file
        size = len(buf)
        pos = start
        while pos < size:
            end = min(size, pos + _FIND_WINDOW)
            hit = buf.find(needle, pos, min(size, end + len(needle) - 1))
            release(buf, pos, end)
            if hit >= 0:
                return hit
            pos = end
        return -1
    if isinstance(buf, bytes):
        return buf.find(needle, start)
    return bytes(buf).find(needle, start)


# a fault in a file mapping may map the whole page-cache folio around it (up to 2 MiB on x86-64 with large
# folios), pages before and after the range read included: release that much on either side too, or the
# pages of windows already let go come back and stay (1 MiB windows then left 55 MiB resident on 2 GiB)
_FOLIO = 2 << 20


def release(buf, start: int, end: int) -> None:
    """Drop pages of a read-only file mapping from this process's resident set once read (the page cache
    keeps them; a later read faults them back in). A no-op for bytes."""
    if not isinstance(buf, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED"):
        return
    start = max(0, start - _FOLIO)
    start -= start % mmap.PAGESIZE
    end = min(end + _FOLIO, len(buf))
    if end > start:
        buf.madvise(mmap.MADV_DONTNEED, start, end - start)


def _find_descriptor(buf, data_offset: int) -> tuple[int, int, int] | None:
    """(data length, crc, descriptor length) for the first descriptor whose size field matches."""
    pos = data_offset
    while True:
        hit = _find(buf, DESCRIPTOR_SIG, pos)
        if hit < 0:
            return None
        found = _descriptor_at(buf, hit, hit - data_offset)
        if found is not None:
            return found
        pos = hit + 1


def _descriptor_at(buf, hit: int, length: int) -> tuple[int, int, int] | None:
    """The descriptor at `hit` when its size fields say `length` (32-bit, or zip64's 8-byte sizes)."""
    size = len(buf)
    if hit + DESCRIPTOR32.size <= size:
        _sig, crc, c32, u32 = DESCRIPTOR32.unpack_from(buf, hit)
        if c32 == length & 0xFFFFFFFF and u32 == c32 and (length < 0xFFFFFFFF):
            # a 32-bit descriptor; a zip64 one has 8-byte sizes that also start with these bytes
            if _zip64_descriptor(buf, hit, length, boundary=True):
                return length, crc, DESCRIPTOR64.size
            return length, crc, DESCRIPTOR32.size
    if _zip64_descriptor(buf, hit, length, boundary=False):
        return length, DESCRIPTOR64.unpack_from(buf, hit)[1], DESCRIPTOR64.size
    return None


def _zip64_descriptor(buf, hit: int, length: int, boundary: bool) -> bool:
    """A zip64 descriptor at `hit` gives `length` for both sizes (and, with `boundary`, a record follows it)."""
    if hit + DESCRIPTOR64.size > len(buf):
        return False
    _sig, _crc, c64, u64 = DESCRIPTOR64.unpack_from(buf, hit)
    return c64 == length and u64 == length and (not boundary or _is_boundary(buf, hit + DESCRIPTOR64.size))


def _is_boundary(buf, pos: int) -> bool:
    return pos == len(buf) or bytes(buf[pos : pos + 4]) in (LOCAL_SIG, CENTRAL_SIG)


def crc32_of(buf, start: int, length: int) -> int:
    crc = 0
    view = memoryview(buf)
    for off in range(start, start + length, _CRC_CHUNK):
        end = min(off + _CRC_CHUNK, start + length)
        crc = crc32(view[off:end], crc)
        release(buf, off, end)
    return crc


def map_file(path: Path) -> mmap.mmap | bytes:
    """Read-only map of a file (b"" for an empty one, which mmap refuses)."""
    with open(path, "rb") as handle:
        if handle.seek(0, 2) == 0:
            return b""
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
