"""Single files, read by the reader of their format wherever they live: the one dispatcher (`read_file`)
opens the file once (io.folders.opened: a local file or a remote object, the same positioned reads),
sniffs it and hands the reader those reads. The sharded reader reads its shards through here, and the
package's dispatcher (ckinspect.formats) adds DCP folders and sharded sets on top."""

from __future__ import annotations

import importlib
from pathlib import Path

from ckinspect.formats.opening import empty, why
from ckinspect.io import folders
from ckinspect.io.reader import FetchError, PositionedReader
from ckinspect.model import Checkpoint

# format -> (module, function); imported only when a file of that format is opened. Each takes
# (path, reader=...): the positioned reads the dispatcher opened, wherever the file lives.
FILE_READERS: dict[str, tuple[str, str]] = {
    "torch-zip": ("ckinspect.formats.torch_zip", "read_torch_zip"),
    "torch-legacy": ("ckinspect.formats.torch_legacy", "read_torch_legacy"),
    "pickle": ("ckinspect.formats.pickle_file", "read_pickle"),
    "numpy": ("ckinspect.formats.numpy_file", "read_numpy"),
    "safetensors": ("ckinspect.formats.safetensors", "read_safetensors"),
}
# Read from a few ranges (a directory, a header); the others read a file whole or walk it, which costs a
# request per read where the reader has no file descriptor (a remote object): download those first.
RANGED_FORMATS = ("torch-zip", "safetensors")


def run_reader(path: Path, kind: str, module_name: str, function_name: str, options: dict[str, object] | None = None,
               size: int | None = None) -> Checkpoint:  # fmt: skip
    """Run a reader (with its `options`: the reader it is given, a shard's member name, DCP's trust_layout);
    anything it raises becomes a CORRUPT finding, never an exception, except a read that could not be
    fetched (FetchError: the network's trouble, not the file's). `size`: the bytes of a file already open."""
    reader = getattr(importlib.import_module(module_name), function_name)
    try:
        ckpt = reader(path, **(options or {}))
    except FetchError:
        raise
    except Exception as exc:  # a reader bug or hostile input must not take the report down
        ckpt = empty(path, kind, size)
        ckpt.add("CORRUPT", f"unreadable {kind} {'folder' if folders.is_dir(path) else 'file'}: {why(exc)}")
        return ckpt
    if not ckpt.files and folders.is_file(path):
        ckpt.files = [path]
    return ckpt


def read_file(path: Path, member: str | None = None, accept: tuple[str, ...] = tuple(FILE_READERS)) -> Checkpoint:
    """One file, local or remote: opened once, sniffed from its bytes, read by the reader of its format
    (`accept`: the formats the caller reads; another is "not a checkpoint"). `member` names a shard in
    storage messages. Bad content is a finding; a failed fetch raises CkinspectError (one line)."""
    with folders.opened(path) as reader:
        kind, looks_like = _sniffed(reader, path)
        if kind in FILE_READERS and reader.fd is None and kind not in RANGED_FORMATS:
            ckpt = empty(path, kind, reader.size)
            ckpt.add("CORRUPT", f"a remote {kind} file: only {' and '.join(RANGED_FORMATS)} files and DCP folders "
                                "are read remotely; download it first")  # fmt: skip
            return ckpt
        if kind not in accept:
            ckpt = empty(path, "unknown", reader.size)
            ckpt.add("CORRUPT", looks_like or f"not a checkpoint: looks like {_looks(reader)}")
            return ckpt
        options: dict[str, object] = {"reader": reader}
        if member is not None and kind == "safetensors":
            options["member"] = member
        return run_reader(path, kind, *FILE_READERS[kind], options, size=reader.size)


def _sniffed(reader: PositionedReader, path: Path) -> tuple[str, str | None]:
    """The file's kind, and when sniffing itself failed, the finding that says so (kind "unknown")."""
    from ckinspect.formats.sniff import sniff  # looked up when called: a test replaces it to fail

    try:
        return sniff(path, reader), None
    except FetchError:
        raise
    except OSError as exc:
        return "unknown", f"not a checkpoint: looks like an unreadable file ({exc.strerror or exc})"
    except Exception as exc:  # sniffing reads a few KB; even a bug there must not take the report down
        return "unknown", f"cannot tell what this is: {why(exc)}"


def _looks(reader: PositionedReader) -> str:
    from ckinspect.formats.sniff import HEAD_BYTES, describe_bytes

    try:
        return describe_bytes(reader.small_read(0, HEAD_BYTES), reader.size)
    except OSError as exc:
        return f"an unreadable file ({exc.strerror or exc})"
