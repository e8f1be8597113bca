"""Remote checkpoints: any URL fsspec opens (s3://, gs://, hf://, http(s)://, ...), read by range requests.

    is_url("s3://bucket/run/ckpt.pt")      # True; local paths (and file://) are not URLs here
    path = RemotePath(url)                 # a URL where the readers expect a Path: .name works, str() is the URL
    reader = open_remote(path)             # .size, .read_at(offset, length), .small_read(...): what the zip layer uses

Listing a torch zip reads its end record, its central directory, the pickle and a few local headers;
a safetensors file its header; nothing else crosses the network until values are scanned. What a request
costs decides how (the cost model, GAP below): an object of at most WHOLE bytes is fetched whole by its first
read, and the last TAIL bytes of a larger one (a zip's end records, often its directory) by the first read
there; small reads go through a block cache (local headers lie close together); ranges a caller plans to read
(`planned`: local headers, many small storages) are fetched in few large requests, side by side, gaps of less
than GAP read through; pieces of many objects at once (`read_together`) go out side by side; anything else is
one ranged GET.

Credentials come from where each backend looks for them (AWS_* variables and ~/.aws for s3, the
gcloud config for gs, HF_TOKEN for hf ...). Every failure becomes one CkinspectError line: a missing
object, a denied request, a timeout, throttling that outlasts the retries. Reads are retried a
bounded number of times (CKINSPECT_REMOTE_RETRIES, default 3) with a per-request timeout
(CKINSPECT_REMOTE_TIMEOUT seconds, default 30), so nothing hangs.

fsspec and its backends (s3fs, aiohttp, ...) are the `remote` extra; a local path never imports them.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path, PurePosixPath

from ckinspect import settings
from ckinspect.io.reader import FetchError, ReadError
from ckinspect.vocab import CkinspectError

TYPE_CHECKING = False
if TYPE_CHECKING:  # `typing` stays out of the report path's imports (tests/test_import_hygiene.py)
    from collections.abc import Callable
    from typing import Any

    Applies = Callable[[list[BaseException], int | None, str], bool]  # the error chain, its HTTP status, first line
    Says = Callable[[int | None, str], str]

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")
# small reads (sniffing, local headers) come in 4 KiB blocks: one local header per block where storages
# are large, dozens where they are tiny, and a listing of a 2 GiB file stays well under a megabyte
BLOCK = 1 << 12
_CACHE_BLOCKS = 256  # 1 MiB of blocks at most

# The cost model of a request. An object store answers a ranged GET after ~10-30 ms to the first byte whatever
# its length, then sends ~50-100 MB/s a connection: in time a request costs what ~1 MB costs to transfer; in
# money (S3: $0.0004 per 1,000 GETs against $0.09 per GB sent out of its region) what ~4.4 KB costs. Between
# the two: a gap of less than GAP bytes between two ranges to read is read through rather than skipped, an
# object of at most WHOLE bytes is fetched whole by its first read (two requests would cost more than the
# rest of it), and so is the last TAIL bytes of a larger one by the first read there (a zip's end record,
# its zip64 records and often its directory: three to five requests otherwise).
GAP = 64 << 10
WHOLE = TAIL = 128 << 10
WINDOW = 8 << 20  # the most one request of planned ranges fetches
AHEAD = 4 * WINDOW  # planned ranges fetched side by side: at most this many bytes held per plan
_AHEAD_REQUESTS = 64  # and at most this many requests at once (windows of one small range each)
PLANNED_MOST = 1 << 20  # a longer range is read as asked: its own request costs it at most GAP / 1 MiB more
KEPT = 32 << 20  # small objects and tails kept for a command's later readers (the value scan, the scalars)


def is_url(path: object) -> bool:
    """A URL fsspec should open (file:// is a local path)."""
    if isinstance(path, RemotePath):
        return True
    match = _URL.match(os.fspath(path) if isinstance(path, os.PathLike) else str(path))
    return match is not None and match.group(1).lower() != "file"


class RemotePath(PurePosixPath):
    """A URL where a Path is expected: `.name`, `.suffix` and `.stem` are those of the object's key, and
    str() gives back the URL. Only pure operations: it is never opened with open()."""

    url: str

    def __new__(cls, url: str | RemotePath) -> RemotePath:
        url = url.url if isinstance(url, RemotePath) else str(url)
        self = super().__new__(cls, "/" + url.split("://", 1)[-1])
        self.url = url
        return self

    def __str__(self) -> str:
        return getattr(self, "url", None) or super().__str__()

    def __repr__(self) -> str:
        return f"RemotePath({str(self)!r})"

    def __fspath__(self) -> str:
        return str(self)

    def __hash__(self) -> int:
        return hash(str(self))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemotePath) and str(self) == str(other)

    # a child or the parent of a URL is a URL (pathlib's own would drop the scheme); a query string,
    # which names one object (a presigned URL), is not carried over to another
    def __truediv__(self, key: str | os.PathLike[str]) -> RemotePath:
        base = str(self).split("?", 1)[0].rstrip("/")
        return RemotePath(f"{base}/{os.fspath(key).lstrip('/')}")

    def joinpath(self, *keys: str | os.PathLike[str]) -> RemotePath:
        out = self
        for key in keys:
            out = out / key
        return out

    @property
    def parent(self) -> RemotePath:
        base = str(self).split("?", 1)[0].rstrip("/")
        scheme, _, rest = base.partition("://")
        return RemotePath(f"{scheme}://{rest.rsplit('/', 1)[0]}") if "/" in rest else RemotePath(base)

    def folder(self) -> RemotePath:
        """The URL as a prefix (a trailing slash): what a folder's listing is asked for."""
        return RemotePath(str(self).split("?", 1)[0].rstrip("/") + "/")

    def is_folder_url(self) -> bool:
        return str(self).split("?", 1)[0].endswith("/")


def as_path(path: str | os.PathLike[str]) -> Path:
    """A RemotePath for a URL, else a Path: what a screen or command keeps as its target."""
    if type(path) is _LOCAL_PATH:
        return path  # already one (a Path never holds a URL: it folds `//`)
    return RemotePath(os.fspath(path)) if is_url(path) else Path(path)  # type: ignore[return-value]  # a URL as a Path


_LOCAL_PATH = type(Path())


WATCH_LOCAL_ONLY = "watch follows the saves of a local folder; a remote path cannot be watched"
LOCAL_OUTPUT = "the output must be a local path (it is written to a temporary file, fsynced, then renamed)"


def refuse_remote(path: object, why: str) -> None:
    """CkinspectError (one line: the URL and `why`) when `path` is a URL, for commands that need a local file."""
    if is_url(path):
        raise CkinspectError(f"{shown(os.fspath(path) if isinstance(path, os.PathLike) else str(path))}: {why}")


def _timeout() -> float:
    return settings.remote_timeout()


def _retries() -> int:
    return settings.remote_retries()


def _filesystem(url: str) -> tuple[Any, str]:
    try:
        from fsspec.core import url_to_fs
    except ImportError:
        raise FetchError(f"{url}: reading remote paths needs fsspec: pip install 'ckinspect[remote]'") from None
    protocol = url.split("://", 1)[0].lower()
    timeout = _timeout()
    options: dict[str, Any] = {}
    if protocol in ("http", "https"):
        import aiohttp

        options["client_kwargs"] = {"timeout": aiohttp.ClientTimeout(total=None, connect=timeout, sock_read=timeout)}
    elif protocol in ("s3", "s3a"):
        # one attempt per call in botocore and in s3fs: the retries are ours (RemoteFile._call), so their
        # number is what CKINSPECT_REMOTE_RETRIES says, not its cube; the endpoint may come from AWS_ENDPOINT_URL
        options["config_kwargs"] = {
            "connect_timeout": timeout,
            "read_timeout": timeout,
            "retries": {"total_max_attempts": 1, "mode": "standard"},
        }
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            options["endpoint_url"] = endpoint
    try:
        fs, key = url_to_fs(url, **options)
        if hasattr(fs, "retries"):  # s3fs retries throttled calls on its own: once here, the retries are ours
            fs.retries = 1
        return fs, key
    except ImportError as exc:
        raise FetchError(f"{url}: no fsspec backend for {protocol}:// ({exc}); pip install 'ckinspect[remote]'") \
            from None  # fmt: skip
    except ValueError as exc:
        raise FetchError(f"{url}: {exc}") from None


_USERINFO = r"^([A-Za-z][A-Za-z0-9+.-]+://)[^/@?#]*@"  # compiled by `re` for the first error line, not at import


def shown(url: str) -> str:
    """The URL as an error line may print it: no `user:password@`, no query (a presigned URL's signature)."""
    url = re.sub(_USERINFO, r"\1", url)
    return url.split("?", 1)[0] + ("?…" if "?" in url else "")


def explain(url: str, exc: BaseException) -> str:
    """One line saying what went wrong with a remote read, in the user's terms (never a credential)."""
    raw, url = url, shown(url)
    chain = _chain(exc)
    status = next((st for st in map(_status, chain) if st is not None), None)
    text = next((str(e).splitlines()[0] for e in reversed(chain) if str(e)), type(exc).__name__)
    text = re.sub(_USERINFO, r"\1", text.replace(raw, url))  # aiohttp's messages carry the URL it was given
    for applies, says in _EXPLANATIONS:  # the first that applies, in this order
        if applies(chain, status, text):
            return f"{url}: {says(status, text)}"
    return f"{url}: cannot read ({type(chain[-1]).__name__}: {text})"


def _denied(chain: list[BaseException], status: int | None, text: str) -> bool:
    return status in (401, 403) or any(isinstance(e, PermissionError) for e in chain) or "AccessDenied" in text


def _throttled(chain: list[BaseException], status: int | None, text: str) -> bool:
    return status in (429, 503) or "SlowDown" in text or "Throttl" in text


def _cut_short(chain: list[BaseException], status: int | None, text: str) -> bool:
    names = " ".join(type(e).__name__ for e in chain)
    return "Payload" in names or "ContentLength" in text or "IncompleteRead" in names


def _timed_out(chain: list[BaseException], status: int | None, text: str) -> bool:
    return any(_is_timeout(e) for e in chain)


def _not_found(chain: list[BaseException], status: int | None, text: str) -> bool:
    return any(isinstance(e, FileNotFoundError) for e in chain)


_NOT_FOUND = "not found (no such object)"
# (does it apply to the error chain, its HTTP status and first line; what to say), checked in order
_EXPLANATIONS: tuple[tuple[Applies, Says], ...] = (
    (_denied, lambda status, _: f"access denied (HTTP {status or 403}); check the credentials for this bucket or host"),
    (lambda _, status, __: status == 404, lambda *_: _NOT_FOUND),
    (_throttled, lambda status, _: f"the server kept throttling requests (HTTP {status}) after {_retries()} retries"),
    (_cut_short, lambda *_: "the transfer was cut short (the server sent fewer bytes than it announced)"),
    (_timed_out, lambda *_: f"timed out after {_timeout():g} s waiting for the server (CKINSPECT_REMOTE_TIMEOUT)"),
    (lambda _, status, __: status is not None, lambda status, text: f"the server answered HTTP {status} ({text})"),
    (_not_found, lambda *_: _NOT_FOUND),
)


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and what it was raised from (fsspec wraps a 403 in FileNotFoundError)."""
    out: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in out and len(out) < 8:
        out.append(current)
        current = current.__cause__ or current.__context__
    return out


def _status(exc: BaseException) -> int | None:
    """The HTTP status behind an error: aiohttp's `.status`, botocore's response metadata."""
    status = getattr(exc, "status", None)
    response = getattr(exc, "response", None)
    if status is None and isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return status if isinstance(status, int) else None


MAX_RETRY_AFTER = 30.0  # seconds: a server asking for a longer pause gets the one-line error sooner


def retry_after(exc: BaseException) -> float | None:
    """The pause a throttling server asked for (Retry-After in seconds), from aiohttp's or botocore's error."""
    for e in _chain(exc):
        headers = getattr(e, "headers", None)
        response = getattr(e, "response", None)
        if headers is None and isinstance(response, dict):
            headers = response.get("ResponseMetadata", {}).get("HTTPHeaders")
        value = None
        if headers is not None:
            try:
                value = headers.get("Retry-After") or headers.get("retry-after")
            except AttributeError:
                value = None
        if value is not None:
            try:
                return max(0.0, float(str(value).strip()))
            except ValueError:
                return None  # an HTTP date: fall back to our own backoff
    return None


def backoff(attempt: int, exc: BaseException) -> float:
    """Seconds to wait before retry number `attempt + 1`: what the server asked for (capped), else
    0.1, 0.2, 0.4 ... up to 2 s."""
    asked = retry_after(exc)
    if asked is not None:
        return min(asked, MAX_RETRY_AFTER, _timeout())
    return min(2.0, 0.1 * 2**attempt)


def _is_timeout(exc: BaseException) -> bool:
    import asyncio

    return isinstance(exc, (TimeoutError, asyncio.TimeoutError)) or "Timeout" in type(exc).__name__


def _transient(exc: BaseException) -> bool:
    """Worth another try: timeouts, throttling, server errors, dropped connections (never a 403 or 404)."""
    chain = _chain(exc)
    status = next((st for st in map(_status, chain) if st is not None), None)
    if status is not None:
        return status in (429, 500, 502, 503, 504)
    if any(_is_timeout(e) for e in chain):
        return True
    if any(isinstance(e, (FileNotFoundError, PermissionError, CkinspectError)) for e in chain):
        return False
    return any(isinstance(e, ConnectionError) or "Disconnect" in type(e).__name__ for e in chain)


def with_retries(url: str, fn: Any) -> Any:
    """fn(), retried on what is transient (bounded: CKINSPECT_REMOTE_RETRIES); CkinspectError (one line)
    for what is not, or when the retries run out."""
    attempts = _retries() + 1
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - every backend raises its own kinds; explain() sorts them
            if attempt + 1 >= attempts or not _transient(exc):
                raise FetchError(explain(url, exc)) from None
            time.sleep(backoff(attempt, exc))
    raise AssertionError("unreachable")


def infos(fs: Any, keys: list[str]) -> list[dict[str, Any]]:
    """fs.info of each key; an asynchronous client's (HTTP, S3, GCS) side by side, 128 at a time."""
    if not getattr(fs, "async_impl", False) or len(keys) < 2:
        return [fs.info(key) for key in keys]
    import asyncio

    from fsspec.asyn import sync

    async def each() -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for at in range(0, len(keys), 128):
            out += await asyncio.gather(*(fs._info(key) for key in keys[at : at + 128]))
        return out

    found: list[dict[str, Any]] = sync(fs.loop, each)
    return found


def filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem for `url` (set up with our timeouts and retries) and the key inside it."""
    return _filesystem(url)


def coalesce(ranges: list[tuple[int, int]], size: int, most: int = 1 << 62) -> tuple[list[int], list[int]]:
    """The starts and ends of the requests that fetch `ranges` of an object of `size` bytes: sorted, nothing past
    the end, pieces less than GAP apart in one request; a request that reaches `most` bytes ends there and the
    next one starts where it ended (so that a piece across the cut is read from both)."""
    starts: list[int] = []
    ends: list[int] = []
    for offset, length in sorted(ranges):
        end = min(size, offset + length)
        if end <= offset:
            continue
        if starts and offset <= ends[-1] + GAP:
            if end <= ends[-1]:
                continue
            if end - starts[-1] <= most:
                ends[-1] = end
                continue
            offset = ends[-1]  # the window is full: the next one follows it, the gap read through
        starts.append(offset)
        ends.append(end)
    return starts, ends


class _Plan:
    """Ranges about to be read (RemoteFile.planned), as windows: coalesced, at most WINDOW bytes each, those of
    one run of close ranges following each other. A read inside a window is served from its bytes, fetched on
    the first such read together with the windows after it (AHEAD bytes, side by side); at most AHEAD bytes
    are held, the least recently read dropped first."""

    def __init__(self, file: RemoteFile, ranges: list[tuple[int, int]]) -> None:
        self.file = file
        small = [(offset, length) for offset, length in ranges if 0 < length <= PLANNED_MOST]
        self.starts, self.ends = coalesce(small, file.size, WINDOW)
        self.loaded: dict[int, bytes] = {}  # window index -> its bytes, least recently read first
        self.held = 0

    def window_at(self, pos: int) -> int:
        """The index of the window holding byte `pos`, -1 when none does."""
        from bisect import bisect_right  # remote reads only: not an import of every local listing

        index = bisect_right(self.starts, pos) - 1
        return index if index >= 0 and pos < self.ends[index] else -1

    def read_at(self, pos: int, end: int) -> list[bytes]:
        """The bytes from `pos` to `end` that the windows hold, from `pos` on (stopping at the first byte none
        holds, or where an object turned out shorter than its size)."""
        pieces = []
        while pos < end:
            index = self.window_at(pos)
            if index < 0:
                break
            data = self._window(index)
            piece = data[pos - self.starts[index] : min(end, self.ends[index]) - self.starts[index]]
            if not piece:
                break
            pieces.append(piece)
            pos += len(piece)
        return pieces

    def _window(self, index: int) -> bytes:
        with self.file.lock:  # the value scan's threads share the plan: one fetch at a time
            data = self.loaded.pop(index, None)
            if data is None:
                self._fetch(index)
                data = self.loaded.pop(index)
            self.loaded[index] = data  # the most recently read last
            return data

    def _fetch(self, first: int) -> None:
        """Window `first` and those after it not yet held, side by side, at most AHEAD bytes in all."""
        batch: list[int] = []
        total = 0
        for index in range(first, len(self.starts)):
            length = self.ends[index] - self.starts[index]
            if batch and (total + length > AHEAD or len(batch) >= _AHEAD_REQUESTS):
                break
            if index not in self.loaded:
                batch.append(index)
                total += length
        pieces = self.file.fetch([self.starts[i] for i in batch], [self.ends[i] for i in batch])
        for index, data in zip(batch, pieces, strict=True):
            self.loaded[index] = data
            self.held += len(data)
        for index in list(self.loaded):
            if self.held <= AHEAD or index in batch:
                break
            self.held -= len(self.loaded.pop(index))


class Kept:
    """The small objects and tails fetched in one command, for its later readers of the same object (the value
    scan, the scalars, a second look): URL -> (where the bytes start, the bytes), at most KEPT bytes, the least
    recently used dropped first. io.folders.Listings owns one: what a command lists and reads is trusted until
    it ends (or until the TUI looks afresh)."""

    def __init__(self, budget: int = KEPT) -> None:
        self.budget = budget
        self.held = 0
        self._items: dict[str, tuple[int, bytes]] = {}
        self._lock = threading.Lock()

    def get(self, url: str, start: int) -> bytes | None:
        with self._lock:
            found = self._items.pop(url, None)
            if found is None:
                return None
            self._items[url] = found  # the most recently used last
            return found[1] if found[0] == start else None

    def put(self, url: str, start: int, data: bytes) -> None:
        if len(data) > self.budget:
            return
        with self._lock:
            old = self._items.pop(url, None)
            self.held += len(data) - (len(old[1]) if old else 0)
            self._items[url] = (start, data)
            while self.held > self.budget:
                self.held -= len(self._items.pop(next(iter(self._items)))[1])


class Planning:
    """The `with` block of RemoteFile.planned (and of io.blobs.Blobs.planned, over several objects): each plan in
    force on its object while the block runs. Only the plans' windows are held, never the ranges they were made
    from (a 640,000-tensor zip's local headers)."""

    def __init__(self, plans: list[_Plan]) -> None:
        self.plans = plans

    def __enter__(self) -> None:
        for plan in self.plans:
            plan.file._plans.append(plan)

    def __exit__(self, *exc: object) -> None:
        for plan in self.plans:
            plan.file._plans.remove(plan)


class RemoteFile:
    """Positioned reads of one remote object, the interface of `zipdir.FileReader` (size, read_at,
    small_read, read_ranges, planned, BLOCK), with bounded retries, a small cache of BLOCK-sized pieces, the
    object whole when it is small or its tail, and the windows of the plans in force (see the cost model)."""

    BLOCK = BLOCK
    fd = None  # each read is a request: nothing to map

    def __init__(self, path: RemotePath, size: int | None = None, kept: Kept | None = None) -> None:
        self.path = path
        self.kept = kept
        self.url = str(path)
        self.fs, self._key = _filesystem(self.url)
        if size is None:  # else known from the folder's listing (io.folders): no request for it
            info = self._call(lambda: self.fs.info(self._key))
            if info.get("type") == "directory":
                raise FetchError(f"{shown(self.url)}: a folder (a prefix), not an object; end it with / to "
                                     "search it for checkpoints")  # fmt: skip
            size = info.get("size")
        self.size = int(size or 0)
        self._blocks: dict[int, bytes] = {}
        self._tail_start = max(0, self.size - TAIL) if self.size > WHOLE else 0
        self._tail: bytes | None = None  # the object from _tail_start on, once read
        self._plans: list[_Plan] = []  # innermost last
        self.lock = threading.Lock()
        self.bytes_read = 0
        self.requests = 0

    def _call(self, fn: Any) -> Any:
        return with_retries(self.url, fn)

    def _get(self, offset: int, end: int) -> bytes:
        """One ranged GET."""
        self.requests += 1
        data: bytes = self._call(lambda: self.fs.cat_file(self._key, start=offset, end=end))
        self.bytes_read += len(data)
        return data

    def fetch(self, starts: list[int], ends: list[int]) -> list[bytes]:
        """The bytes of each [start, end), one request each, side by side."""
        if len(starts) == 1:
            return [self._get(starts[0], ends[0])]
        self.requests += len(starts)
        keys = [self._key] * len(starts)
        pieces: list[bytes] = self._call(lambda: self.fs.cat_ranges(keys, starts, ends, on_error="raise"))
        self.bytes_read += sum(len(p) for p in pieces)
        return pieces

    def _tail_bytes(self) -> bytes:
        with self.lock:
            if self._tail is None:
                self._tail = self.kept.get(self.url, self._tail_start) if self.kept is not None else None
            if self._tail is None:
                self._tail = self._get(self._tail_start, self.size)
                if self.kept is not None:
                    self.kept.put(self.url, self._tail_start, self._tail)
            return self._tail

    def read_at(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise ReadError(f"negative read at {offset}")
        end = min(self.size, offset + length)
        if end <= offset:
            return b""
        if end > self._tail_start:  # the object whole when it is small, else its tail: fetched once, kept
            tail = self._tail_bytes()
            if offset >= self._tail_start:
                return tail[offset - self._tail_start : end - self._tail_start]
            return self.read_at(offset, self._tail_start - offset) + tail[: end - self._tail_start]
        block = self._blocks.get(offset // BLOCK)
        if block is not None and end <= (offset // BLOCK) * BLOCK + len(block):  # read already (a first block)
            return block[offset % BLOCK : offset % BLOCK + end - offset]
        for plan in reversed(self._plans):
            pieces = plan.read_at(offset, end)
            if pieces:
                got = sum(len(p) for p in pieces)
                if got < end - offset:  # past what the plan holds: the rest as asked
                    pieces.append(self.read_at(offset + got, end - offset - got))
                return pieces[0] if len(pieces) == 1 else b"".join(pieces)
        return self._get(offset, end)

    def small_read(self, offset: int, length: int) -> bytes:
        """A few bytes, through the block cache (local headers and pickles lie close together), or from the
        tail or a plan where they hold them."""
        first, last = offset // BLOCK, (offset + max(length, 1) - 1) // BLOCK
        if last - first > 1 or offset + length > self._tail_start or self._planned(offset):
            return self.read_at(offset, length)
        pieces = []
        for index in range(first, last + 1):
            block = self._blocks.get(index)
            if block is None:
                if len(self._blocks) >= _CACHE_BLOCKS:
                    self._blocks.pop(next(iter(self._blocks)))
                block = self._blocks[index] = self.read_at(index * BLOCK, BLOCK)
            pieces.append(block)
        joined = b"".join(pieces)
        rel = offset - first * BLOCK
        return joined[rel : rel + length]

    def _planned(self, offset: int) -> bool:
        """Whether a plan in force holds the first byte of this read."""
        return any(plan.window_at(offset) >= 0 for plan in self._plans)

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The bytes of each (offset, length), in order, cut short where the object ends: pieces less than GAP
        apart share one request, and the requests go out side by side (an optimizer's per-parameter step
        counters lie between its moments: one round trip, not one per parameter)."""
        if any(offset < 0 or length < 0 for offset, length in ranges):
            raise ReadError(f"negative read in {ranges[:3]}")
        if self.size <= WHOLE:  # one request for the object, kept
            return [self.read_at(offset, length) for offset, length in ranges]
        starts, ends = coalesce(ranges, self.size)
        if not starts:
            return [b"" for _ in ranges]
        return _cut(ranges, starts, self.fetch(starts, ends))

    def planned(self, ranges: list[tuple[int, int]]) -> Planning:
        """While the block runs, reads inside `ranges` (those of at most PLANNED_MOST bytes) come from few large
        requests: coalesced (gaps of less than GAP read through), at most WINDOW bytes each, fetched AHEAD bytes
        at a time side by side as the reads reach them. Reads elsewhere are as without it."""
        return Planning([_Plan(self, ranges)])

    @staticmethod
    def read_together(pieces: list[tuple[RemoteFile, int, int]]) -> list[bytes]:
        """io.reader.read_across for remote objects: the pieces of every object at once, those of one object
        less than GAP apart in one request (an object of at most WHOLE bytes whole), all side by side, one batch
        of requests per storage client."""
        out: list[bytes] = [b""] * len(pieces)
        by_client: dict[int, list[tuple[RemoteFile, list[int]]]] = {}
        by_file: dict[int, tuple[RemoteFile, list[int]]] = {}
        for index, (file, _, _) in enumerate(pieces):
            by_file.setdefault(id(file), (file, []))[1].append(index)
        for file, indexes in by_file.values():
            by_client.setdefault(id(file.fs), []).append((file, indexes))
        for files in by_client.values():
            _read_side_by_side(files, pieces, out)
        return out

    def read_into(self, offset: int, buffer: memoryview) -> int:
        data = self.read_at(offset, len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _cut(ranges: list[tuple[int, int]], starts: list[int], fetched: list[bytes]) -> list[bytes]:
    """Each range's bytes out of the requests (`starts`, sorted) that fetched them."""
    from bisect import bisect_right  # remote range reads only: not an import of every local listing

    out = []
    for offset, length in ranges:
        index = max(0, bisect_right(starts, offset) - 1)
        rel = offset - starts[index]
        out.append(fetched[index][rel : rel + length] if rel >= 0 else b"")
    return out


def _read_side_by_side(files: list[tuple[RemoteFile, list[int]]], pieces: list[tuple[RemoteFile, int, int]],
                       out: list[bytes]) -> None:  # fmt: skip
    """read_together for the objects of one storage client: one batch of ranged GETs for all of them."""
    keys: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    plans: list[tuple[RemoteFile, list[int], list[tuple[int, int]], list[int] | None, int]] = []
    for file, indexes in files:
        ranges = [(pieces[i][1], pieces[i][2]) for i in indexes]
        if file.size <= WHOLE or not ranges:  # whole (or nothing to read): as read_ranges reads it
            plans.append((file, indexes, ranges, None, 0))
            continue
        spans = coalesce(ranges, file.size)
        plans.append((file, indexes, ranges, spans[0], len(starts)))
        keys += [file._key] * len(spans[0])
        starts += spans[0]
        ends += spans[1]
    fetched: list[bytes] = []
    if starts:
        head = files[0][0]
        try:
            fetched = head._call(lambda: head.fs.cat_ranges(keys, starts, ends, on_error="raise"))
        except FetchError:  # which object failed: each asked on its own, so that the error line names it
            plans = [(file, indexes, ranges, None, 0) for file, indexes, ranges, _, _ in plans]
    for file, indexes, ranges, mine, at in plans:
        if mine is None:
            got = file.read_ranges(ranges)
        else:
            file.requests += len(mine)
            theirs = fetched[at : at + len(mine)]
            file.bytes_read += sum(len(p) for p in theirs)
            got = _cut(ranges, mine, theirs)
        for index, data in zip(indexes, got, strict=True):
            out[index] = data
