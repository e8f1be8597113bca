"""Single files, read by the reader of their format: by name of format on disk (`read_file_as`), or by their
first bytes for a remote object (`read_remote_file`). The sharded reader reads its shards through here, and
the package's dispatcher (ckinspect.formats) adds DCP folders and sharded sets on top."""

from __future__ import annotations

import importlib
from pathlib import Path

from ckinspect.formats.opening import empty, why
from ckinspect.io.reader import PositionedReader
from ckinspect.model import Checkpoint

# format -> (module, function); imported only when a file of that format is opened
FILE_READERS: dict[str, tuple[str, str]] = {
    "torch-zip": ("ckinspect.formats.torch_zip", "read_torch_zip"),
    "torch-legacy": ("ckinspect.formats.torch_legacy", "read_torch_legacy"),
    "pickle": ("ckinspect.formats.pickle_file", "read_pickle"),
    "numpy": ("ckinspect.formats.numpy_file", "read_numpy"),
    "safetensors": ("ckinspect.formats.safetensors", "read_safetensors"),
}
REMOTE_FORMATS = ("torch-zip", "safetensors")


def run_reader(path: Path, kind: str, module_name: str, function_name: str, **options: bool) -> Checkpoint:
    """Run a reader (with the reader's own `options`, such as DCP's trust_layout); anything it raises becomes
    a CORRUPT finding, never an exception."""
    reader = getattr(importlib.import_module(module_name), function_name)
    try:
        ckpt = reader(path, **options)
    except Exception as exc:  # a reader bug or hostile input must not take the report down
        ckpt = empty(path, kind)
        ckpt.add("CORRUPT", f"unreadable {kind} {'folder' if path.is_dir() else 'file'}: {why(exc)}")
        return ckpt
    if not ckpt.files and path.is_file():
        ckpt.files = [path]
    return ckpt


def read_file_as(path: Path, kind: str) -> Checkpoint:
    return run_reader(path, kind, *FILE_READERS[kind])


def read_remote_file(path: Path) -> Checkpoint:
    """One remote object: a torch zip or a safetensors file listed from the few ranges it needs; anything
    else is CORRUPT (download it first). A read that fails raises CkinspectError."""
    from ckinspect.formats.sniff import HEAD_BYTES, describe_bytes, sniff_bytes
    from ckinspect.io.folders import open_remote

    reader: PositionedReader = open_remote(path)  # `path` a URL (io.folders.target)
    head = reader.small_read(0, HEAD_BYTES)
    kind = sniff_bytes(head, reader.size)
    if kind == "torch-zip":
        from ckinspect.formats.torch_zip import read_zip_into
        from ckinspect.io.zipdir import ZipError

        ckpt = Checkpoint(path=path, format="torch-zip", file_bytes=reader.size, files=[path])
        try:
            read_zip_into(ckpt, reader, path)
        except ZipError as exc:
            ckpt.add("CORRUPT", f"{path.name}: {exc}")
        return ckpt
    if kind == "safetensors" or (path.suffix == ".safetensors" and describe_bytes(head, reader.size) == "binary data"):
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
