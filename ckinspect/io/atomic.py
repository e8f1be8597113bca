"""Atomic writes: temporary file in the same folder, fsync, os.replace, fsync the folder.

A crash at any point leaves either the old file or the new one under the name, never half of one.
Only a regular file (or a new name) is replaced so: a device, a FIFO or what a symlink points to is
written as it is (write_target), and /dev/null stays /dev/null.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from ckinspect.vocab import TMP_SUFFIX, CkinspectError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import BinaryIO


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """Make a rename in `folder` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _mode_for(target: Path) -> int:
    """The replaced file's mode, or what a plain open() would give a new file."""
    try:
        return target.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_target(path: str | os.PathLike[str]) -> tuple[Path, bool]:
    """Where a write to `path` lands, and whether it goes there atomically (tmp, fsync, rename).

    A regular file, or a name not yet taken: replaced atomically. A symlink is never renamed over: it is
    followed, and its target is then written as if it had been named (a regular file atomically, a device
    or FIFO directly); a symlink to nothing is refused (creating a file wherever it points is no write the
    user named). Anything else that exists and is not a folder (a character device such as /dev/null, a
    FIFO, a socket, /dev/stdout) is opened and written directly, never replaced. A folder is refused."""
    import stat

    target = Path(path)
    if target.is_symlink():
        resolved = Path(os.path.realpath(target))
        if not resolved.exists():
            raise CkinspectError(f"{path}: a symlink to {resolved}, which does not exist; not written through it")
        target = resolved
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        return target, True
    except OSError as exc:
        raise CkinspectError(f"cannot write {path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        raise CkinspectError(f"cannot write {path}: it is a folder")
    return target, stat.S_ISREG(mode)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], tmp_name: str | None = None) -> Iterator[BinaryIO]:
    """Yield a binary file; on a clean exit it replaces `path` atomically, on an error it is removed.

    `tmp_name` fixes the temporary's name (e.g. `<path>.tmp`, the convention checkpoint tools look
    for); by default a unique name in the same folder is used so concurrent writers never collide.
    What `path` is decides how (write_target): a device, FIFO or symlink is never replaced. A failure
    of the write itself (a missing or read-only folder, a full disk) is one CkinspectError naming
    `path`, never the temporary file.
    """
    target, atomic = write_target(path)
    if not atomic:
        with _named_errors(path, str(target)), open(target, "wb") as direct:  # a device or FIFO, as given
            yield direct
        return
    folder = target.parent if str(target.parent) else Path(".")
    with _named_errors(path):
        handle, tmp = _temporary(target, folder, tmp_name)
    try:
        with handle:
            yield handle
            with _named_errors(path):
                handle.flush()
                os.fsync(handle.fileno())
        with _named_errors(path):
            os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename in (None, tmp):
            raise CkinspectError(f"cannot write {path}: {exc.strerror or exc}") from None  # a write of the body
        raise
    fsync_dir(folder)


def _temporary(target: Path, folder: Path, tmp_name: str | None) -> tuple[BinaryIO, str]:
    if tmp_name is None:
        import tempfile  # deferred: ~2.5 ms (random, weakref) that `--report` to stdout never needs

        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TMP_SUFFIX, dir=folder)
        os.fchmod(fd, _mode_for(target))  # mkstemp makes 0600; the result should look like any saved file
        return os.fdopen(fd, "wb"), tmp
    tmp = str(folder / tmp_name)
    return open(tmp, "wb"), tmp  # noqa: SIM115 - the caller enters it


@contextlib.contextmanager
def _named_errors(path: str | os.PathLike[str], *own: str) -> Iterator[None]:
    """An OSError of our own write as the user's one line: the path they named, never a temporary's.
    With `own`, only errors about those files (or about none: a write's ENOSPC) are ours."""
    try:
        yield
    except OSError as exc:
        if own and exc.filename not in (None, *own):
            raise  # the caller's own read, inside the `with`
        raise CkinspectError(f"cannot write {path}: {exc.strerror or exc}") from None


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_write(path) as handle:
        handle.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))
