"""Readers: bytes on disk -> Checkpoint. Never imports torch, never executes anything from a file."""

from __future__ import annotations

import contextlib
import importlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from ckinspect.io.zipdir import FileReader
from ckinspect.model import Checkpoint
from ckinspect.vocab import CkinspectError

# format -> (module, function); imported only when a file of that format is opened
READERS: dict[str, tuple[str, str]] = {
    "torch-zip": ("ckinspect.formats.torch_zip", "read_torch_zip"),
    "torch-legacy": ("ckinspect.formats.torch_legacy", "read_torch_legacy"),
    "pickle": ("ckinspect.formats.pickle_file", "read_pickle"),
    "numpy": ("ckinspect.formats.numpy_file", "read_numpy"),
    "dcp": ("ckinspect.formats.dcp", "read_dcp"),
    "safetensors": ("ckinspect.formats.safetensors", "read_safetensors"),
    "sharded": ("ckinspect.formats.sharded", "read_sharded"),
}


def open_checkpoint(path: str | os.PathLike[str], structure_only: bool = False) -> Checkpoint:
    """Read any checkpoint file, DCP folder or `*.index.json` sharded set, without executing it.

    `structure_only` (no value will be read from it): a DCP folder is listed from its `.metadata`'s layout,
    its items not opened one by one (formats.dcp's trust_layout).

    Raises CkinspectError only when the path does not exist or cannot be read; bad content always
    comes back as a Checkpoint with a CORRUPT finding. A URL (s3://, http(s)://, ...) is read by range
    requests (`read_remote`).
    """
    from ckinspect.io.remote import is_url

    if is_url(path):
        return read_remote(path, structure_only)
    path = Path(path)
    _check_readable(path)
    from ckinspect.formats.sniff import describe, sniff

    try:
        kind = sniff(path)
        if kind != "unknown":
            return read_as(path, kind, structure_only)
        looks_like = f"not a checkpoint: looks like {describe(path)}"
    except Exception as exc:  # sniffing reads a few KB; even a bug there must not take the report down
        looks_like = f"cannot tell what this is: {_why(exc)}"
    ckpt = _empty(path, "unknown")
    ckpt.add("CORRUPT", looks_like)
    return ckpt


def read_as(path: Path, kind: str, structure_only: bool = False) -> Checkpoint:
    """Run the reader for `kind`; anything it raises becomes a CORRUPT finding, never an exception."""
    module_name, function_name = READERS[kind]
    reader = getattr(importlib.import_module(module_name), function_name)
    try:
        ckpt = reader(path, trust_layout=True) if structure_only and kind == "dcp" else reader(path)
    except Exception as exc:  # a reader bug or hostile input must not take the report down
        ckpt = _empty(path, kind)
        ckpt.add("CORRUPT", f"unreadable {kind} {'folder' if path.is_dir() else 'file'}: {_why(exc)}")
        return ckpt
    if not ckpt.files and path.is_file():
        ckpt.files = [path]
    return ckpt


REMOTE_FORMATS = ("torch-zip", "safetensors")


def read_remote(url: str | os.PathLike[str], structure_only: bool = False) -> Checkpoint:
    """A remote torch zip or safetensors file, listed from the few ranges it needs (ckinspect.io.remote).
    A read that fails (not found, denied, timed out) raises CkinspectError; bad content is CORRUPT."""
    from ckinspect.formats.sniff import HEAD_BYTES, describe_bytes, sniff_bytes
    from ckinspect.io import folders
    from ckinspect.io.remote import RemotePath, open_remote

    remote = RemotePath(os.fspath(url))
    if remote.is_folder_url():  # `diff s3://b/step-2/ ...`: a folder named as one checkpoint (DCP), listed first
        remote = folders.open_folder(remote)  # type: ignore[assignment]  # a RemotePath
    path: Path = remote  # type: ignore[assignment]  # a URL stands where readers expect a Path (pure operations only)
    if remote.name.endswith(".index.json"):  # a sharded set: its index, then each shard by range requests
        from ckinspect.formats.sharded import read_sharded

        return read_sharded(path)
    if folders.is_dir(path):  # a folder of a listed prefix: a DCP checkpoint, read by range requests
        from ckinspect.formats.sniff import sniff

        if sniff(path) == "dcp":
            from ckinspect.formats.dcp import read_dcp

            return read_dcp(path, trust_layout=structure_only)
        ckpt = Checkpoint(path=path, format="unknown", file_bytes=folders.tree_size(path), files=[])
        ckpt.add("CORRUPT", "a remote folder that is not a DCP checkpoint (no .metadata, no .distcp files)")
        return ckpt
    reader = open_remote(remote)
    head = reader.small_read(0, HEAD_BYTES)
    kind = sniff_bytes(head, reader.size)
    if kind == "torch-zip":
        from ckinspect.formats.torch_zip import read_zip_into
        from ckinspect.io.zipdir import ZipError

        ckpt = Checkpoint(path=path, format="torch-zip", file_bytes=reader.size, files=[path])
        try:
            read_zip_into(ckpt, reader, path)  # type: ignore[arg-type]  # RemoteFile: FileReader's interface
        except ZipError as exc:
            ckpt.add("CORRUPT", f"{path.name}: {exc}")
        return ckpt
    if kind == "safetensors" or (
        remote.suffix == ".safetensors" and describe_bytes(head, reader.size) == "binary data"
    ):
        from ckinspect.formats.safetensors import read_safetensors

        return read_safetensors(path, reader=reader)
    ckpt = Checkpoint(path=path, format="unknown", file_bytes=reader.size, files=[path])
    if kind == "unknown":
        ckpt.add("CORRUPT", f"not a checkpoint: looks like {describe_bytes(head, reader.size)}")
    else:
        ckpt.format = kind
        ckpt.add("CORRUPT", f"a remote {kind} file: only {' and '.join(REMOTE_FORMATS)} files and DCP folders "
                            "are read remotely; download it first")  # fmt: skip
    return ckpt


def _why(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _check_readable(path: Path) -> None:
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


def _empty(path: Path, kind: str) -> Checkpoint:
    try:
        size = sum(p.stat().st_size for p in path.iterdir() if p.is_file()) if path.is_dir() else path.stat().st_size
    except OSError:
        size = 0
    return Checkpoint(path=path, format=kind, file_bytes=size, files=[path] if path.is_file() else [])
