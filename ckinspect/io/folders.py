"""Folders on disk or under a URL prefix, behind one small interface, so that searching a folder for
checkpoints (formats.discover) and a run's recognisers (analysis.runs) do not care which they read.

    with Listings().in_use():                # the caller owns the listings taken (clear() to look afresh)
        root = open_folder("s3://bucket/run/")   # a URL: one listing of everything under the prefix, kept
        for entry in entries(root): ...          # name, path, is_dir, sorted by name (os.scandir on disk)
        size(path), mtime(path), is_file(path), is_dir(path), exists(path)
        read_bytes(path, limit)                  # a small record (JSON, a pointer file, a file's first bytes)

On disk every call asks the operating system (a run being written changes under us: `watch` relies on
it). Under a URL, `open_folder` lists the prefix once (fsspec `find`: one paginated LIST per thousand
objects on an object store) with each object's size and modification time, and every later question
about a path under it is answered from that listing; only `read_bytes` crosses the network again, by a
ranged read of the bytes asked for. Object stores have no empty folders: a prefix with nothing under it
is "no such folder", as a missing local folder is.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from pathlib import Path

from ckinspect.io.reader import FileReader
from ckinspect.io.remote import (
    KEPT,
    Kept,
    RemoteFile,
    RemotePath,
    as_path,
    filesystem,
    infos,
    is_url,
    shown,
    with_retries,
)
from ckinspect.vocab import CkinspectError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from collections.abc import Set as AbstractSet
    from typing import Any

    from ckinspect.io.reader import PositionedReader

_HTTP_DEPTH = 8  # folders below a prefix listed over plain HTTP (index pages): a link loop ends here
_KEEP = 4  # listings kept at once (a report of several prefixes); each is a few hundred bytes per object


class Entry:
    """One name in a folder: a file or a subfolder."""

    __slots__ = ("is_dir", "name", "path")

    def __init__(self, path: Path, is_dir: bool) -> None:  # a RemotePath under a URL prefix
        self.path = path
        self.name = path.name
        self.is_dir = is_dir

    def __repr__(self) -> str:
        return f"Entry({str(self.path)!r}, is_dir={self.is_dir})"


class _Object:
    __slots__ = ("is_dir", "mtime", "size")

    def __init__(self, is_dir: bool, size: int | None, mtime: float) -> None:
        self.is_dir, self.size, self.mtime = is_dir, size, mtime


class RemoteListing:
    """Everything under one URL prefix, from one listing: key -> object, and folder -> child names."""

    def __init__(self, root: RemotePath) -> None:
        self.root = root
        self.url = str(root)
        self.fs, key = filesystem(self.url)
        self.key = key.rstrip("/")
        try:
            found = self._list_all(str(root.folder()))
        except CkinspectError as exc:
            if str(exc).endswith("not found (no such object)"):  # the bucket (or host path) itself is missing
                raise CkinspectError(f"{shown(str(root.folder()))}: no such folder (no such bucket or prefix)") \
                    from None  # fmt: skip
            raise
        self.objects: dict[str, _Object] = {}
        self.children: dict[str, set[str]] = {}
        for name, info in found.items():
            rel = self._relative(name)
            if rel is None or rel == "":
                continue
            is_dir = info.get("type") == "directory"
            size = info.get("size")
            self._add(rel, _Object(is_dir, None if is_dir or size is None else int(size), _mtime(info)))
        if not self.objects:
            raise CkinspectError(f"{shown(str(root.folder()))}: no such folder (nothing under this prefix)")

    def _list_all(self, url: str) -> dict[str, dict[str, Any]]:
        """name -> info of everything under the prefix: one `find` on an object store (a paginated LIST);
        over plain HTTP, the index page of each folder (links under the prefix only, a bounded depth)."""
        if not url.lower().startswith(("http://", "https://")):
            found: dict[str, dict[str, Any]] = with_retries(
                url, lambda: self.fs.find(self.key, withdirs=True, detail=True)
            )
            return found
        return self._list_http(url)

    def _list_http(self, url: str) -> dict[str, dict[str, Any]]:
        """Each folder's index page, breadth first: links under the prefix only, at most _HTTP_DEPTH deep."""
        out: dict[str, dict[str, Any]] = {}
        todo, seen = [(url, 0)], {url}
        while todo:
            folder, depth = todo.pop(0)
            listed = with_retries(folder, lambda folder=folder: self.fs.ls(folder, detail=True))
            for info in listed:
                name = str(info.get("name", ""))
                if not name.startswith(url) or name.rstrip("/") == folder.rstrip("/"):
                    continue  # a link out of the prefix, or the index page itself
                if name.endswith("/") or info.get("type") == "directory":
                    info = {**info, "type": "directory"}
                    if name not in seen and depth < _HTTP_DEPTH:
                        seen.add(name)
                        todo.append((name if name.endswith("/") else name + "/", depth + 1))
                out[name] = info
        return out

    def _relative(self, name: str) -> str | None:
        name = name.split("://", 1)[-1].rstrip("/")  # http's names are whole URLs, object stores' are keys
        key = self.key.split("://", 1)[-1]
        if name == key:
            return ""
        return name[len(key) + 1 :] if name.startswith(key + "/") else None

    def _add(self, rel: str, obj: _Object) -> None:
        """One listed name. A key that is both an object and the prefix of others is a folder here (a
        local folder cannot be both): what it holds is what a run's search needs."""
        parts = rel.split("/")
        for depth in range(1, len(parts) + 1):  # an object store implies the folders above a key
            name, parent = "/".join(parts[:depth]), "/".join(parts[: depth - 1])
            self.children.setdefault(parent, set()).add(parts[depth - 1])
            if depth < len(parts):
                known = self.objects.get(name)
                if known is None or not known.is_dir:
                    self.objects[name] = _Object(True, None, 0.0)
        known = self.objects.get(rel)
        if known is None or (obj.is_dir and not known.is_dir):
            self.objects[rel] = obj

    def relative(self, path: RemotePath) -> str | None:
        """The key of `path` inside this listing, "" for the root; None when it lies outside."""
        url = str(path).split("?", 1)[0].rstrip("/")
        if url == self.url:
            return ""
        return url[len(self.url) + 1 :] if url.startswith(self.url + "/") else None

    def get(self, rel: str) -> _Object | None:
        return _Object(True, None, 0.0) if rel == "" else self.objects.get(rel)

    def size(self, rel: str, path: RemotePath) -> int:
        obj = self.objects[rel]
        if obj.size is None:  # a listing without sizes (an HTTP index page): one request, then kept
            self.ask_sizes([(rel, path)])
        return obj.size or 0

    def ask_sizes(self, wanted: list[tuple[str, RemotePath]]) -> None:
        """The sizes this listing lacks (an HTTP index page gives none) of these objects: asked side by side."""
        missing = [(rel, path) for rel, path in wanted if self.objects[rel].size is None]
        if not missing:
            return
        keys = [self.fs._strip_protocol(str(path)) for _, path in missing]
        found = with_retries(str(missing[0][1]), lambda: infos(self.fs, keys))
        for (rel, _), info in zip(missing, found, strict=True):
            self.objects[rel].size = int(info.get("size") or 0)


class Listings:
    """The URL prefixes listed so far, newest last, at most `keep` of them (a report of several prefixes).
    Its owner says how long a listing is trusted: the CLI takes one per command and the API one per call
    (`with Listings().in_use():`), a long-running caller (the TUI) keeps its own and `clear()`s it so
    that its next look lists afresh. Every question about a path under a listed prefix is answered from the
    innermost Listings in use."""

    def __init__(self, keep: int = _KEEP, remember: bool = True) -> None:
        self.keep = keep
        self._taken: list[RemoteListing] = []
        # what this owner's reads learnt, for its later readers: URL -> size of objects no listing holds (asked
        # once), and the small objects and tails fetched. Not `remember`: the unscoped one, which no owner clears
        self.remember = remember
        self.sized: dict[str, int] = {}
        self.kept = Kept(KEPT if remember else 0)

    def add(self, listing: RemoteListing) -> None:
        self._taken = [x for x in self._taken if x.url != listing.url][-(self.keep - 1) :] + [listing]

    def known(self, url: str) -> RemotePath | None:
        """The root of the listing of `url` (no trailing slash) taken in this Listings, None if none was."""
        return next((x.root for x in reversed(self._taken) if x.url == url), None)

    def find(self, path: RemotePath) -> tuple[RemoteListing, str]:
        """The listing that holds `path`, and its key there; FileNotFoundError when none does."""
        for listing in reversed(self._taken):
            rel = listing.relative(path)
            if rel is not None:
                return listing, rel
        raise FileNotFoundError(f"{path}: not under a listed folder")

    def clear(self) -> None:
        """Forget every listing, and what the storage client kept of them (fsspec's own listings cache,
        which would answer an object's size as it was when listed)."""
        for listing in self._taken:
            with contextlib.suppress(Exception):  # a client without a cache has nothing to forget
                listing.fs.invalidate_cache(listing.key)
        self._taken = []
        self.sized = {}
        self.kept = Kept(KEPT if self.remember else 0)

    def note_size(self, url: str, size: int) -> None:
        if self.remember:
            self.sized[url] = size

    @contextlib.contextmanager
    def in_use(self) -> Iterator[Listings]:
        """This Listings answers (and keeps what is listed) until the block ends; then the one before does."""
        _in_use.append(self)
        try:
            yield self
        finally:
            _in_use.remove(self)  # by identity: another thread's scope may have opened since


_in_use: list[Listings] = []  # innermost last; each is owned by the `with` that put it here
_UNSCOPED = Listings(remember=False)  # what a call outside any `in_use` block lists into (a library call of formats
# or analysis): nothing read is kept there for later calls, which may come after the objects changed


def current() -> Listings:
    """The Listings that answers now: the innermost in use, else the unscoped one."""
    return _in_use[-1] if _in_use else _UNSCOPED


def _mtime(info: dict[str, Any]) -> float:
    """An object's modification time in seconds since the epoch, from whichever field its store reports."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "modified", "created"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, (int, float)):
            return float(value)
        if hasattr(value, "timestamp"):
            return float(value.timestamp())
        try:
            from datetime import datetime

            return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
        except ValueError:
            continue
    return 0.0


def open_folder(path: str | os.PathLike[str]) -> Path:
    """The folder as a Path to search: a local Path, or for a URL a RemotePath (no trailing slash) whose
    prefix has just been listed (CkinspectError, one line, for a missing, empty or denied prefix)."""
    if not is_url(path):
        return Path(path)
    root = RemotePath(str(RemotePath(os.fspath(path)).folder()).rstrip("/"))
    current().add(RemoteListing(root))
    return root  # type: ignore[return-value]  # a URL where a Path is expected (pure operations only)


def listed_folder(path: str | os.PathLike[str]) -> Path:
    """The folder of a URL prefix this command has listed already (else listed now), as `open_folder` gives it."""
    root = RemotePath(str(RemotePath(os.fspath(path)).folder()).rstrip("/"))
    known = current().known(str(root))
    return known if known is not None else open_folder(root)  # type: ignore[return-value]  # a URL as a Path


def names_folder(raw: str | os.PathLike[str]) -> bool:
    """Whether the user names a folder: a URL by its trailing slash (a prefix, listed when opened), a local
    path by being one now."""
    return RemotePath(os.fspath(raw)).is_folder_url() if is_url(raw) else Path(raw).is_dir()


def target(raw: str | os.PathLike[str], listed: bool = False) -> Path:
    """What the user names, as the Path the layers above read: a local Path, a URL naming one object as a
    RemotePath (read by range requests), a URL prefix as its listed folder (`open_folder`; with `listed`, the
    listing this command took already, if it took one)."""
    if not is_url(raw):
        return Path(raw)
    if not RemotePath(os.fspath(raw)).is_folder_url():
        return RemotePath(os.fspath(raw))  # type: ignore[return-value]  # a URL as a Path (pure operations only)
    return listed_folder(raw) if listed else open_folder(raw)


def check_readable(path: str | os.PathLike[str]) -> None:
    """CkinspectError (one line) for a local path that is missing, unreadable or neither a regular file nor
    a folder (a FIFO or a device would block or never end). A URL's absence is found when it is read."""
    if is_url(path):
        return
    path = Path(path)
    try:
        mode = os.stat(path).st_mode  # one stat says which (and that it is there)
        if stat.S_ISDIR(mode):
            os.scandir(path).close()
        elif not stat.S_ISREG(mode):
            raise CkinspectError(f"{path}: not a regular file or folder")
        else:
            with open(path, "rb"):
                pass
    except FileNotFoundError:
        raise CkinspectError(f"{path}: no such file or folder") from None
    except OSError as exc:
        raise CkinspectError(f"{path}: cannot read ({exc.strerror or exc})") from None


def known_missing(path: str | os.PathLike[str]) -> bool:
    """A local path that is not there (a usage error before anything is read). A URL is never known missing
    here: its absence is found, as one line, when it is read."""
    return not is_url(path) and not Path(path).exists()


def on_disk(path: str | os.PathLike[str]) -> bool:
    """A path the operating system holds: it can be mapped, renamed, written beside and reopened by another
    process. A URL is read by range requests only, so what needs those (repair, an interrupted save's
    leftovers, mmap, a scan split across processes, the weights file beside a resume file) asks this."""
    return not is_url(path)


def names_file(path: str | os.PathLike[str]) -> bool:
    """Whether `path` names one file to read whole: a URL always (one object, or a listed prefix read as
    one checkpoint; its absence is found when it is read), a local path by being a regular file now."""
    return is_url(path) or Path(path).is_file()


def absolute(path: str | os.PathLike[str]) -> str:
    """The path as it pastes into a shell in any folder: a local path made absolute, a URL as it is."""
    return str(path) if is_url(path) else str(Path(path).absolute())


def user_path(typed: str) -> Path:
    """What a user typed, as a target: `~` expanded on disk, a URL kept a URL (read by range requests)."""
    return as_path(typed) if is_url(typed) else Path(typed).expanduser()


def files(folder: Path, suffix: str) -> list[Path]:
    """The folder's entries whose name ends in `suffix`, sorted: on disk what `glob` finds, under a listed
    URL prefix its objects. OSError when it cannot be listed."""
    if not is_url(folder):
        return sorted(folder.glob("*" + suffix))
    return sorted(e.path for e in entries(folder) if not e.is_dir and e.name.endswith(suffix))


def regular_files(folder: Path) -> list[tuple[str, Path]]:
    """(name, path) of the folder's regular files: on disk symlinks are not followed; under a listed URL
    prefix from its listing. OSError when it cannot be listed."""
    if is_url(folder):
        return [(e.path.name, e.path) for e in entries(folder) if not e.is_dir]
    with os.scandir(folder) as scan:
        return [(e.name, folder / e.name) for e in scan if e.is_file(follow_symlinks=False)]


@contextlib.contextmanager
def opened(path: Path) -> Iterator[PositionedReader]:
    """Positioned reads of one file wherever it lives: a local file's handle is closed on exit, a remote
    object (ranged requests, its size from a listing when one was taken) has none."""
    if is_url(path):
        yield open_remote(path)
        return
    with open(path, "rb") as handle:
        yield FileReader(handle.fileno(), os.fstat(handle.fileno()).st_size)


def real(path: Path) -> Path:
    """The path with its links resolved on disk (a loop is seen by it); a URL as it is (a prefix has no links)."""
    return path if is_url(path) else path.resolve()


def _find(path: RemotePath) -> tuple[RemoteListing, str]:
    return current().find(path)


def _listed_file(remote: RemotePath) -> tuple[RemoteListing, str] | None:
    """The listing and key of a file a listing holds; None when no listing covers the URL;
    FileNotFoundError when one covers it and holds no file by that name."""
    try:
        listing, rel = _find(remote)
    except FileNotFoundError:
        return None
    obj = listing.get(rel)
    if obj is None or obj.is_dir:
        raise FileNotFoundError(f"{remote}: no such object")
    return listing, rel


def _remote(path: object) -> RemotePath | None:
    return path if isinstance(path, RemotePath) else None


def entries(folder: Path) -> list[Entry]:
    """The folder's files and subfolders, sorted by name. OSError when it cannot be listed."""
    remote = _remote(folder)
    if remote is None:
        with os.scandir(folder) as scan:
            found = sorted(scan, key=lambda e: e.name)
        out = []
        for entry in found:
            kind = _kind(entry)
            if kind is not None:
                out.append(Entry(Path(entry.path), kind == "dir"))
        return out
    listing, rel = _find(remote)
    obj = listing.get(rel)
    if obj is None or not obj.is_dir:
        raise NotADirectoryError(f"{remote}: not a folder")
    names = sorted(listing.children.get(rel, ()))
    kinds = [listing.objects[f"{rel}/{name}" if rel else name].is_dir for name in names]
    return [Entry(remote / name, is_dir) for name, is_dir in zip(names, kinds, strict=True)]  # type: ignore[arg-type]


def files_ending(folder: Path, suffix: str) -> list[Path]:
    """The files of `folder` whose name ends with `suffix`, sorted by name: entries() filtered, but a local
    folder's other names never become paths (a check of each of a 1,024-file folder's files for the
    temporaries beside it listed a million paths). OSError when it cannot be listed."""
    if _remote(folder) is not None:
        return [e.path for e in entries(folder) if not e.is_dir and e.name.endswith(suffix)]
    names = _names_ending(folder, suffix)
    if names is None:  # listed now (the folder changed lately, or was not listed before)
        with os.scandir(folder) as scan:
            found = sorted((e for e in scan if e.name.endswith(suffix)), key=lambda e: e.name)
        return [Path(e.path) for e in found if _kind(e) == "file"]
    return [path for path in (folder / name for name in names) if os.path.isfile(path)]


# Folders whose names ending in a suffix were listed, while the folder stays as it was: (folder, suffix) ->
# (its stat stamp, those names). Judging each of a 2,048-file DeepSpeed tag's files for the temporaries beside
# it listed the folder 2,048 times (4 million names: the one cost that grew with the square of the files).
# A folder's mtime and ctime change with every name added, removed or renamed in it, so an equal stamp says the
# names are the same; only a folder settled for _SETTLED_NS is kept, since within a coarse clock tick a second
# change may leave its times as they were (what git calls racy). Each kept entry holds the matching names only.
_ENDINGS: dict[tuple[str, str], tuple[tuple[int, int, int, int], list[str]]] = {}
_ENDINGS_KEEP = 8
_SETTLED_NS = 5_000_000_000


def _names_ending(folder: Path, suffix: str) -> list[str] | None:
    """The names in local `folder` ending with `suffix` (sorted) when it was listed before and has not changed
    since; None when it must be listed now (then it is stamped, and kept if settled, for the next call)."""
    key = (os.fspath(folder), suffix)
    try:
        st = os.stat(folder)
    except OSError:
        _ENDINGS.pop(key, None)
        return None  # scandir says why
    stamp = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    kept = _ENDINGS.get(key)
    if kept is not None and kept[0] == stamp:
        return kept[1]
    _ENDINGS.pop(key, None)
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < _SETTLED_NS:
        return None
    with os.scandir(folder) as scan:
        names = sorted(e.name for e in scan if e.name.endswith(suffix))
    while len(_ENDINGS) >= _ENDINGS_KEEP:
        del _ENDINGS[next(iter(_ENDINGS))]
    _ENDINGS[key] = (stamp, names)
    return names


def _kind(entry: os.DirEntry[str]) -> str | None:
    """file, dir, or None (a broken link, a socket ...), following symlinks as os.path.isfile does."""
    try:
        return "file" if entry.is_file() else "dir" if entry.is_dir() else None
    except OSError:
        return None


def walk(folder: Path, skip: AbstractSet[str] = frozenset()) -> list[tuple[Path, list[str]]]:
    """Every folder under `folder` (itself first, subfolders by name, those named in `skip` left out)
    with its file names, sorted: what os.walk gives, for either kind of folder."""
    if _remote(folder) is None:
        return _walk_disk(folder, skip)
    out: list[tuple[Path, list[str]]] = []
    try:
        found = entries(folder)
    except OSError:
        return out
    out.append((folder, [e.name for e in found if not e.is_dir]))
    for entry in found:
        if entry.is_dir and entry.name not in skip:
            out.extend(walk(entry.path, skip))
    return out


def _walk_disk(folder: Path, skip: AbstractSet[str]) -> list[tuple[Path, list[str]]]:
    out: list[tuple[Path, list[str]]] = []
    for root, dirs, names in os.walk(folder):  # symlinked folders are not followed (no loops)
        dirs[:] = sorted(d for d in dirs if d not in skip)
        out.append((Path(root), sorted(names)))
    return out


def _kind_of(remote: RemotePath, ask: bool) -> str | None:
    """file, dir or None: from the listing that holds it, else (with `ask`) from one request."""
    try:
        listing, rel = _find(remote)
    except FileNotFoundError:
        if not ask or remote.is_folder_url():
            return None  # a prefix is only known by listing it (open_folder)
        if str(remote) in current().sized:
            return "file"  # sized by a request already
        fs, key = filesystem(str(remote))
        try:
            info = with_retries(str(remote), lambda: fs.info(key))
        except CkinspectError as exc:
            if str(exc).endswith("not found (no such object)"):
                return None
            raise
        if info.get("type") == "directory":
            return "dir"
        current().note_size(str(remote), int(info.get("size") or 0))  # its opening asks no more
        return "file"
    obj = listing.get(rel)
    return None if obj is None else "dir" if obj.is_dir else "file"


def is_file(path: Path, ask: bool = False) -> bool:
    """A file. A URL under no listing is not one unless `ask`: then one request says (a sharded index's
    shards beside a lone URL); a sibling merely looked for (trainer_state.json) costs no request."""
    remote = _remote(path)
    return path.is_file() if remote is None else _kind_of(remote, ask) == "file"


def is_dir(path: Path) -> bool:
    """A folder; for a URL, only under a listed prefix (a lone URL is an object until listed)."""
    remote = _remote(path)
    return path.is_dir() if remote is None else _kind_of(remote, ask=False) == "dir"


def exists(path: Path) -> bool:
    """Is there anything by this name (a broken local link counts, as with os.path.lexists)."""
    return os.path.lexists(path) if _remote(path) is None else is_file(path) or is_dir(path)


def size(path: Path) -> int:
    """Bytes of a file; OSError when it is not there."""
    remote = _remote(path)
    if remote is None:
        return path.stat().st_size
    found = _listed_file(remote)
    if found is None:  # a URL outside any listing: ask for it (once)
        return open_remote(remote).size
    return found[0].size(found[1], remote)


def sizes(paths: list[Path]) -> list[int]:
    """Bytes of each file; OSError when one is not there. Under a listed URL prefix whose listing lacks sizes (a
    web server's index pages), those not yet known are asked side by side, not one request after the other."""
    listed: dict[int, tuple[RemoteListing, list[tuple[str, RemotePath]]]] = {}
    for path in paths:
        remote = _remote(path)
        found = _listed_file(remote) if remote is not None else None
        if found is not None and remote is not None:
            listed.setdefault(id(found[0]), (found[0], []))[1].append((found[1], remote))
    for listing, wanted in listed.values():
        listing.ask_sizes(wanted)
    return [size(path) for path in paths]


def mtime(path: Path) -> float:
    """Last modification, seconds since the epoch (an object store's: when the object was written)."""
    remote = _remote(path)
    if remote is None:
        return path.stat().st_mtime
    listing, rel = _find(remote)
    obj = listing.get(rel)
    if obj is None:
        raise FileNotFoundError(f"{remote}: no such object")
    return obj.mtime


def tree_size(path: Path) -> int:
    """A file's bytes, or every file's under a folder; 0 when it is gone."""
    try:
        if not is_dir(path):
            return size(path)
        if _remote(path) is None:
            return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        return sum(size(folder / name) for folder, names in walk(path) for name in names)
    except OSError:
        return 0


def read_bytes(path: Path, limit: int | None = None) -> bytes:
    """The file's first `limit` bytes (all of it with None); OSError when it cannot be read."""
    remote = _remote(path)
    if remote is None:
        with open(path, "rb") as handle:
            return handle.read() if limit is None else handle.read(limit)
    # a failed request is the network's, not the file's: CkinspectError (one line, exit 2), never "unreadable"
    opened = open_remote(remote)  # its size from the listing, else from one request
    return opened.read_at(0, opened.size if limit is None else min(limit, opened.size))


def open_remote(path: str | os.PathLike[str]) -> RemoteFile:
    """The object at `path`, ready for positioned reads; CkinspectError (one line) when it cannot be read.
    Its size comes from the listing of its folder when one was taken (io.folders), else from one request, once
    in the Listings in use (the value scan and the scalars open an object the listing opened)."""
    remote = path if isinstance(path, RemotePath) else RemotePath(os.fspath(path))
    listings = current()
    try:
        found = _listed_file(remote)
    except FileNotFoundError:
        found = None
    if found is not None:  # its size from the listing, or asked once and kept in it (an index page gives none)
        return RemoteFile(remote, found[0].size(found[1], remote), listings.kept)
    file = RemoteFile(remote, listings.sized.get(str(remote)), listings.kept)
    listings.note_size(str(remote), file.size)
    return file
