"""A single-file reader's start (the Checkpoint it fills, positioned reads on the open file) and the few
helpers every reader and the dispatchers share. Imports no reader, so every reader may import it."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from ckinspect.io.reader import FileReader
from ckinspect.model import Checkpoint
from ckinspect.vocab import CkinspectError


def why(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def check_readable(path: Path) -> None:
    try:
        if path.is_dir():
            os.scandir(path).close()
        elif not stat.S_ISREG(os.stat(path).st_mode):
            raise CkinspectError(f"{path}: not a regular file or folder")  # a FIFO or device would block or never end
        else:
            with open(path, "rb"):
                pass
    except FileNotFoundError:
        raise CkinspectError(f"{path}: no such file or folder") from None
    except OSError as exc:
        raise CkinspectError(f"{path}: cannot read ({exc.strerror or exc})") from None


@contextlib.contextmanager
def local_file(path: Path, kind: str) -> Iterator[tuple[Checkpoint, FileReader]]:
    """A single-file reader's start: the Checkpoint it fills (format, size, the file) and positioned reads
    on the open file, closed when the reader is done. OSError only if it cannot be opened."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        yield Checkpoint(path=path, format=kind, file_bytes=size, files=[path]), FileReader(f.fileno(), size)


def empty(path: Path, kind: str) -> Checkpoint:
    try:
        size = sum(p.stat().st_size for p in path.iterdir() if p.is_file()) if path.is_dir() else path.stat().st_size
    except OSError:
        size = 0
    return Checkpoint(path=path, format=kind, file_bytes=size, files=[path] if path.is_file() else [])
