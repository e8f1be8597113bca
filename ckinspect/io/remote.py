"""Remote checkpoints: any URL fsspec opens (s3://, gs://, hf://, http(s)://, ...), read by range requests.

    is_url("s3://bucket/run/ckpt.pt")      # True; local paths (and file://) are not URLs here
    path = RemotePath(url)                 # a URL where the readers expect a Path: .name works, str() is the URL
    reader = open_remote(path)             # .size, .read_at(offset, length), .small_read(...): what the zip layer uses

Listing a torch zip reads its end record, its central directory, the pickle and a few local headers;
a safetensors file its header; nothing else crosses the network until values are scanned. Small reads
go through a block cache (local headers lie close together), large ones are one ranged GET each.

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


def filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem for `url` (set up with our timeouts and retries) and the key inside it."""
    return _filesystem(url)


def _spans(ranges: list[tuple[int, int]], size: int) -> tuple[list[int], list[int]]:
    """The starts and ends of the requests that fetch `ranges` of an object of `size` bytes: sorted, pieces
    less than a BLOCK apart merged, nothing past the end."""
    starts: list[int] = []
    ends: list[int] = []
    for offset, length in sorted(ranges):
        end = min(size, offset + length)
        if starts and offset <= ends[-1] + BLOCK:
            ends[-1] = max(ends[-1], end)
        elif end > offset:
            starts.append(offset)
            ends.append(end)
    return starts, ends


class RemoteFile:
    """Positioned reads of one remote object, the interface of `zipdir.FileReader` (size, read_at,
    small_read, BLOCK), with bounded retries and a small cache of BLOCK-sized pieces."""

    BLOCK = BLOCK
    fd = None  # each read is a request: nothing to map

    def __init__(self, path: RemotePath, size: int | None = None) -> None:
        self.path = path
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
        self.bytes_read = 0
        self.requests = 0

    def _call(self, fn: Any) -> Any:
        return with_retries(self.url, fn)

    def read_at(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise ReadError(f"negative read at {offset}")
        end = min(self.size, offset + length)
        if end <= offset:
            return b""
        self.requests += 1
        data: bytes = self._call(lambda: self.fs.cat_file(self._key, start=offset, end=end))
        self.bytes_read += len(data)
        return data

    def small_read(self, offset: int, length: int) -> bytes:
        """A few bytes, through the block cache (local headers and pickles lie close together)."""
        first, last = offset // BLOCK, (offset + max(length, 1) - 1) // BLOCK
        if last - first > 1:
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

    def read_ranges(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The bytes of each (offset, length), in order, cut short where the object ends: pieces less than a
        BLOCK apart share one request, and the requests go out side by side (an optimizer's per-parameter
        step counters lie between its moments: one round trip, not one per parameter)."""
        if any(offset < 0 or length < 0 for offset, length in ranges):
            raise ReadError(f"negative read in {ranges[:3]}")
        starts, ends = _spans(ranges, self.size)
        if not starts:
            return [b"" for _ in ranges]
        self.requests += len(starts)
        keys = [self._key] * len(starts)
        pieces: list[bytes] = self._call(lambda: self.fs.cat_ranges(keys, starts, ends, on_error="raise"))
        self.bytes_read += sum(len(p) for p in pieces)
        from bisect import bisect_right  # remote range reads only: not an import of every local listing

        out = []
        for offset, length in ranges:
            index = max(0, bisect_right(starts, offset) - 1)
            rel = offset - starts[index]
            out.append(pieces[index][rel : rel + length] if rel >= 0 else b"")
        return out

    def read_into(self, offset: int, buffer: memoryview) -> int:
        data = self.read_at(offset, len(buffer))
        buffer[: len(data)] = data
        return len(data)
