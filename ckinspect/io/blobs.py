"""Bounded-memory access to the raw bytes of storages: preads into reused buffers and short-lived mmap windows.

Nothing here grows with file size: a read is at most one chunk, a window is unmapped as soon as it is
used (so its pages never pile up in the process's resident set). No torch; numpy only where a caller
asks for an address to hand to memcmp.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from ckinspect.io.remote import Planning, RemoteFile, RemotePath
from ckinspect.model import StorageInfo
from ckinspect.vocab import CkinspectError

DEFAULT_CHUNK = 8 << 20  # 8 MiB: big enough to amortise syscalls, small enough to stay near the CPU caches
_SMALL = 256 << 10  # below this a pread copy is cheaper than setting up a mapping


FileKey = tuple[str, int, int]  # path, inode, mtime_ns


class ReadLog:
    """Every byte range read through `Blobs` while it is active, per file: its path, inode and modification
    time (a file saved again under its name is another file). Tests and benches use it to prove what is
    read how often."""

    def __init__(self) -> None:
        self.ranges: dict[FileKey, list[tuple[int, int]]] = {}  # (path, inode, mtime_ns) -> [(offset, length)]
        self._lock = threading.Lock()

    def note(self, key: FileKey, offset: int, length: int) -> None:
        with self._lock:
            self.ranges.setdefault(key, []).append((offset, length))

    def bytes_read(self) -> dict[FileKey, int]:
        return {key: sum(n for _, n in ranges) for key, ranges in self.ranges.items()}

    def read_again(self) -> dict[FileKey, int]:
        """Per file, the bytes read more than once (each extra read of a byte counts)."""
        out: dict[FileKey, int] = {}
        for key, ranges in self.ranges.items():
            again, reach = 0, -1
            for offset, length in sorted(ranges):
                again += max(0, min(offset + length, reach) - offset)
                reach = max(reach, offset + length)
            out[key] = again
        return out


_log: ReadLog | None = None  # set only while `logging_reads` runs: a read costs one global lookup otherwise


@contextlib.contextmanager
def logging_reads() -> Iterator[ReadLog]:
    """Log every read through `Blobs` (any thread) until the `with` ends."""
    global _log
    log = _log = ReadLog()
    try:
        yield log
    finally:
        _log = None


class UnreadableStorage(CkinspectError):
    """The bytes of a storage cannot be read directly (no raw offset, file gone, file cut short)."""


def storage_range(storage: StorageInfo, start: int = 0, length: int | None = None) -> tuple[int, int]:
    """Absolute (offset, length) in `storage.file` of `length` bytes from `start` within the storage."""
    if storage.offset is None:
        where = f" (member {storage.member})" if storage.member else ""
        raise UnreadableStorage(f"storage {storage.key}{where} has no raw byte offset in {storage.file.name}")
    if length is None:
        length = storage.nbytes - start
    if start < 0 or length < 0 or start + length > storage.nbytes:
        # a view the pickle placed past its storage's end (reported CORRUPT when the file was read)
        raise UnreadableStorage(f"range {start}+{length} outside storage {storage.key} of {storage.nbytes} bytes")
    return storage.offset + start, length


class Blobs:
    """Open files once and hand out reads and mapped windows of their bytes; thread-safe.

    Use as a context manager (or call close()); every descriptor it opened is closed at the end.
    """

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}  # keyed by the path string: hashing a Path re-parses it every time
        self._sizes: dict[str, int] = {}
        self._identity: dict[str, tuple[int, int]] = {}  # inode, mtime_ns: for the read log only
        self._remote: dict[str, RemoteFile] = {}  # URLs: ranged reads (io.remote), never mapped
        self._lock = threading.Lock()

    def __enter__(self) -> Blobs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._fds.clear()

    def fd(self, path: Path) -> int:
        key = os.fspath(path)
        fd = self._fds.get(key)
        if fd is not None:
            return fd
        with self._lock:
            fd = self._fds.get(key)
            if fd is None:
                try:
                    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
                except OSError as exc:
                    raise UnreadableStorage(f"cannot open {path}: {exc.strerror or exc}") from None
                st = os.fstat(fd)
                self._sizes[key], self._identity[key] = st.st_size, (st.st_ino, st.st_mtime_ns)
                self._fds[key] = fd
            return fd

    def size(self, path: Path) -> int:
        key = os.fspath(path)
        size = self._sizes.get(key)
        if size is None:
            if isinstance(path, RemotePath):
                return self.remote(path).size
            self.fd(path)
            size = self._sizes[key]
        return size

    def _logged(self, path: Path, offset: int, length: int) -> None:
        if _log is not None:
            key = os.fspath(path)
            _log.note((key, *self._identity.get(key, (-1, -1))), offset, length)

    def remote(self, path: RemotePath) -> RemoteFile:
        key = str(path)
        with self._lock:
            handle = self._remote.get(key)
            if handle is None:
                from ckinspect.io.folders import open_remote

                handle = self._remote[key] = open_remote(path)
            return handle

    def planned(self, ranges: dict[Path, list[tuple[int, int]]]) -> Planning:
        """A `with` block in which the (offset, length) ranges of each file about to be read (in about that order)
        are fetched ahead where each read is a request (a remote object: few large requests, io.remote's cost
        model); a local file is read as asked."""
        plans = [self.remote(path).planned(wanted) for path, wanted in ranges.items()
                 if isinstance(path, RemotePath) and wanted]  # fmt: skip
        return Planning([plan for planning in plans for plan in planning.plans])

    def check_within(self, storage: StorageInfo, start: int = 0, length: int | None = None) -> tuple[int, int]:
        """Absolute (offset, length) of the range, raising UnreadableStorage if the file ends before it does."""
        offset, length = storage_range(storage, start, length)
        size = self.size(storage.file)
        if offset + length > size:
            raise UnreadableStorage(
                f"storage {storage.key} is cut short: it needs bytes up to {offset + length:,} "
                f"but {storage.file.name} ends at {size:,}"
            )
        return offset, length

    def pread(self, path: Path, offset: int, length: int) -> bytes:
        if isinstance(path, RemotePath):
            self._logged(path, offset, length)
            data = self.remote(path).read_at(offset, length)
            if len(data) < length:
                raise UnreadableStorage(f"{path.name} ends at {offset + len(data):,}, wanted {offset + length:,}")
            return data
        fd = self.fd(path)
        self._logged(path, offset, length)
        data = os.pread(fd, length, offset)
        while len(data) < length:  # pread may return short on some filesystems; stop only at EOF
            more = os.pread(fd, length - len(data), offset + len(data))
            if not more:
                raise UnreadableStorage(f"{Path(path).name} ends at {offset + len(data):,}, wanted {offset + length:,}")
            data += more
        return data

    def pread_into(self, path: Path, offset: int, buffer: bytearray | memoryview) -> int:
        """Fill `buffer` from `offset` (releases the GIL while the kernel copies); returns bytes read."""
        if isinstance(path, RemotePath):
            self._logged(path, offset, len(buffer))
            return self.remote(path).read_into(offset, memoryview(buffer))
        fd = self.fd(path)
        self._logged(path, offset, len(buffer))
        view = memoryview(buffer)
        done = 0
        while done < len(view):
            n = os.preadv(fd, [view[done:]], offset + done)
            if n == 0:
                break
            done += n
        return done

    @contextlib.contextmanager
    def window(self, path: Path, offset: int, length: int) -> Iterator[memoryview]:
        """A read-only view of `length` bytes at `offset`: mapped for big ranges, copied for small ones.

        The view is valid only inside the `with`; the mapping is removed on exit so resident memory
        stays bounded however much of the file is walked.
        """
        if length < _SMALL or isinstance(path, RemotePath):  # a remote range is fetched, not mapped
            yield memoryview(self.pread(path, offset, length))
            return
        fd = self.fd(path)
        aligned = offset - offset % mmap.ALLOCATIONGRANULARITY
        if offset + length > self.size(path):
            raise UnreadableStorage(f"{Path(path).name} ends at {self.size(path):,}, wanted {offset + length:,}")
        self._logged(path, offset, length)
        mapped = mmap.mmap(fd, offset + length - aligned, prot=mmap.PROT_READ, offset=aligned)
        view = memoryview(mapped)[offset - aligned :]
        try:
            yield view
        finally:
            try:
                view.release()
                mapped.close()
            except BufferError:  # a caller still holds an export (e.g. inside a traceback); GC unmaps it later
                pass

    @contextlib.contextmanager
    def address(self, path: Path, offset: int, length: int) -> Iterator[int]:
        """The memory address of `length` mapped bytes at `offset`, for C functions such as memcmp.

        A private (copy-on-write) mapping, so ctypes can take its address without numpy; it is only
        read, so nothing is ever copied. Unmapped on exit.
        """
        import ctypes

        if isinstance(path, RemotePath):
            raise UnreadableStorage(f"{path}: a remote file has no memory address; compare its values instead")
        fd = self.fd(path)
        if offset + length > self.size(path):
            raise UnreadableStorage(f"{Path(path).name} ends at {self.size(path):,}, wanted {offset + length:,}")
        self._logged(path, offset, length)
        aligned = offset - offset % mmap.ALLOCATIONGRANULARITY
        mapped = mmap.mmap(
            fd, offset + length - aligned, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE, offset=aligned
        )
        anchor = ctypes.c_char.from_buffer(mapped)
        try:
            yield ctypes.addressof(anchor) + (offset - aligned)
        finally:
            del anchor
            with contextlib.suppress(BufferError):  # a caller still holds a view: the mapping goes with it
                mapped.close()


def read_chunks(
    storage: StorageInfo, start: int = 0, length: int | None = None, chunk: int = DEFAULT_CHUNK
) -> Iterator[memoryview]:
    """Yield the raw bytes of a storage range in pieces of at most `chunk` bytes, in order.

    Each piece is a view onto one reused buffer: it is valid until the next piece is requested, so
    memory stays at one chunk whatever the storage size. Raises UnreadableStorage when the storage has
    no raw offset (the caller reports it) or the file ends early.
    """
    offset, length = storage_range(storage, start, length)
    chunk = max(1, chunk)
    with Blobs() as blobs:
        blobs.check_within(storage, start, length)
        buffer = bytearray(min(chunk, length) or 1)
        view = memoryview(buffer)
        done = 0
        while done < length:
            n = min(chunk, length - done)
            got = blobs.pread_into(storage.file, offset + done, view[:n])
            if got < n:
                raise UnreadableStorage(f"{storage.file.name} ends inside storage {storage.key}")
            yield view[:n]
            done += n


def files_differ(a: Path, b: Path, chunk: int = 1 << 22) -> bool | None:
    """Do two files differ byte for byte? Sizes first, then bounded chunks; None when either cannot be read.
    Either may be a URL (a RemotePath): its bytes come by range reads, a chunk at a time."""
    if isinstance(a, RemotePath) or isinstance(b, RemotePath):
        return _files_differ_by_reads(a, b, chunk)
    try:
        if a.stat().st_size != b.stat().st_size:
            return True
        with open(a, "rb") as fa, open(b, "rb") as fb:
            while True:
                xa, xb = fa.read(chunk), fb.read(chunk)
                if xa != xb:
                    return True
                if not xa:
                    return False
    except OSError:
        return None


def _files_differ_by_reads(a: Path, b: Path, chunk: int) -> bool | None:
    try:
        with Blobs() as blobs:
            size = blobs.size(a)
            if size != blobs.size(b):
                return True
            for offset in range(0, size, chunk):
                n = min(chunk, size - offset)
                if blobs.pread(a, offset, n) != blobs.pread(b, offset, n):
                    return True
            return False
    except (OSError, UnreadableStorage, CkinspectError):
        return None
