"""Positioned reads, wherever the bytes live: the one interface the readers in formats/ are given.

A local file (`FileReader`, over an open file descriptor) and a remote object (`io.remote.RemoteFile`, by
range requests) both answer `size`, `read_at`, `small_read` (through a small block cache: local headers and
pickles lie close together), `read_ranges` (many small pieces at once: one-element step counters) and
`planned(ranges)` (a `with` block in which the ranges a caller is about to read, in about that order, are
fetched ahead: a remote object's in a few large requests, a local file's as asked), and `read_across` reads
pieces of many files at once (a remote object's side by side), so a reader never asks where its bytes come
from. What such a
read refuses (a negative position, a structure that does not add up) is a `ReadError`, the one error root;
the zip layer calls it `ZipError`. A read that could not be fetched at all (the network, the store) is a
`FetchError`: the caller's trouble, never judged as the file's content. `fd` is the one capability a reader
may ask: an OS file descriptor (mapping, a tar walk, reading a zip's directory to sniff cost no request),
None where each read is a request.

Imports nothing from io/ (every other io module may import it).
"""

from __future__ import annotations

import contextlib
import os

from ckinspect.vocab import CkinspectError


class ReadError(CkinspectError):
    """The bytes cannot be read as asked, or do not add up; the message says what and where."""


class FetchError(CkinspectError):
    """The bytes could not be fetched from where they live (not found, denied, timed out): one line, exit 2,
    never a CORRUPT finding about the file."""


TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any, Protocol

    class PositionedReader(Protocol):
        """Random-access reads of one file or object of `size` bytes."""

        BLOCK: int
        size: int

        @property
        def fd(self) -> int | None: ...  # an OS file descriptor (mmap, tarfile); None where each read is a request

        def read_at(self, offset: int, length: int) -> bytes: ...

        def small_read(self, offset: int, length: int) -> bytes: ...

        def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]: ...

        def planned(self, ranges: list[tuple[int, int]]) -> contextlib.AbstractContextManager[None]: ...

else:  # `typing` costs the listing path ~10 ms; at run time the interface is only named in annotations
    PositionedReader = object


class FileReader:
    """Positioned reads from an open file, with a small block cache for walking local headers."""

    BLOCK = 1 << 14

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size
        self._block_start = -1
        self._block = b""

    def read_at(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise ReadError(f"negative read at {offset}")
        chunks = []
        while length > 0:
            chunk = os.pread(self.fd, min(length, 1 << 26), offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
            length -= len(chunk)
        return b"".join(chunks)

    def small_read(self, offset: int, length: int) -> bytes:
        """Read a few bytes through the block cache (local headers lie close together)."""
        start = offset - offset % self.BLOCK
        if start != self._block_start or offset + length > start + len(self._block):
            if offset + length > start + self.BLOCK:
                return self.read_at(offset, length)
            self._block = self.read_at(start, self.BLOCK)
            self._block_start = start
        rel = offset - start
        return self._block[rel : rel + length]

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The bytes of each (offset, length), in order; each is cut short where the file ends."""
        return [self.read_at(offset, length) for offset, length in ranges]

    @contextlib.contextmanager
    def planned(self, ranges: list[tuple[int, int]]) -> Iterator[None]:
        """Reads of `ranges` ahead: a local read costs no request, so each is read as it is asked."""
        yield

    @staticmethod
    def read_together(pieces: list[tuple[FileReader, int, int]]) -> list[bytes]:
        """read_across for local files: each piece read in place."""
        return [reader.read_at(offset, length) for reader, offset, length in pieces]


def read_across(pieces: list[tuple[PositionedReader, int, int]]) -> list[bytes]:
    """The bytes of each (reader, offset, length), in order, cut short where its file ends: of many files at
    once, each kind of reader reading its own together (a remote object's pieces side by side, those close
    together in one request; see io.remote.RemoteFile.read_together)."""
    by_kind: dict[Any, list[int]] = {}  # the reader's class -> its pieces
    for index, (reader, _, _) in enumerate(pieces):
        by_kind.setdefault(type(reader), []).append(index)
    out: list[bytes] = [b""] * len(pieces)
    for kind, indexes in by_kind.items():
        for index, data in zip(indexes, kind.read_together([pieces[i] for i in indexes]), strict=True):
            out[index] = data
    return out


class ReaderFile:
    """A read-only file object over positioned reads (read, seek, tell), for a library that walks a file
    itself (tarfile)."""

    def __init__(self, reader: PositionedReader) -> None:
        self.reader = reader
        self.pos = 0

    def read(self, n: int = -1) -> bytes:
        want = self.reader.size - self.pos if n is None or n < 0 else n
        data = self.reader.read_at(self.pos, max(0, want))
        self.pos += len(data)
        return data

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self.pos, os.SEEK_END: self.reader.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True
