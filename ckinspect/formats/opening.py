"""A single-file reader's start (the Checkpoint it fills, positioned reads on the open file) and the few
helpers every reader and the dispatchers share. Imports no reader, so every reader may import it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from ckinspect.io.reader import FileReader, PositionedReader
from ckinspect.model import Checkpoint


def why(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@contextlib.contextmanager
def reading(
    path: Path, kind: str, reader: PositionedReader | None = None
) -> Iterator[tuple[Checkpoint, PositionedReader]]:
    """A single-file reader's start: the Checkpoint it fills (format, size, the file) and the positioned
    reads it is given (the dispatcher's, wherever the file lives), else those of `path` opened here (a
    local file, closed when the reader is done; OSError only if it cannot be opened)."""
    if reader is not None:
        yield Checkpoint(path=path, format=kind, file_bytes=reader.size, files=[path]), reader
        return
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        yield Checkpoint(path=path, format=kind, file_bytes=size, files=[path]), FileReader(f.fileno(), size)


def empty(path: Path, kind: str, size: int | None = None) -> Checkpoint:
    """A Checkpoint of `kind` with nothing read into it (a finding follows): `size` bytes where the caller
    knows them (a file it has open), else the file's, or the files' of a folder (not its subfolders')."""
    from ckinspect.io import folders

    is_file = folders.is_file(path)
    if size is None:
        try:
            if folders.is_dir(path):
                size = sum(folders.sizes([e.path for e in folders.entries(path) if not e.is_dir]))
            else:
                size = folders.size(path)
        except OSError:
            size = 0
    return Checkpoint(path=path, format=kind, file_bytes=size, files=[path] if is_file else [])
