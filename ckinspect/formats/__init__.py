"""Readers: bytes on disk -> Checkpoint. Never imports torch, never executes anything from a file."""

from __future__ import annotations

import os
from pathlib import Path

from ckinspect.formats.files import FILE_READERS, read_file, run_reader
from ckinspect.formats.opening import empty, why
from ckinspect.model import Checkpoint

# format -> (module, function); imported only when a checkpoint of that format is opened
READERS: dict[str, tuple[str, str]] = {
    **FILE_READERS,
    "dcp": ("ckinspect.formats.dcp", "read_dcp"),
    "sharded": ("ckinspect.formats.sharded", "read_sharded"),
}


def open_checkpoint(path: str | os.PathLike[str], structure_only: bool = False) -> Checkpoint:
    """Read any checkpoint file, DCP folder or `*.index.json` sharded set, without executing it, wherever
    it lives: a local path, or a URL (s3://, http(s)://, ...) read by range requests (io.folders).

    `structure_only` (no value will be read from it): a DCP folder is listed from its `.metadata`'s layout,
    its items not opened one by one (formats.dcp's trust_layout).

    Raises CkinspectError only when the path does not exist or cannot be read (or fetched); bad content
    always comes back as a Checkpoint with a CORRUPT finding.
    """
    from ckinspect.io import folders

    folders.check_readable(path)
    target = folders.target(path)  # `diff s3://b/step-2/ ...`: a folder named as one checkpoint (DCP), listed first
    if not folders.is_dir(target) and not target.name.endswith(".index.json"):
        return read_file(target)  # one file: opened once, sniffed, read
    from ckinspect.formats.sniff import sniff

    try:
        kind = sniff(target)
    except Exception as exc:  # a folder's files are looked at by name; even a bug there must not take the report down
        kind, looks_like = "unknown", f"cannot tell what this is: {why(exc)}"
    else:
        if kind != "unknown":
            return read_as(target, kind, structure_only)
        from ckinspect.formats.sniff import describe

        looks_like = f"not a checkpoint: looks like {describe(target)}"
    ckpt = empty(target, "unknown")
    ckpt.add("CORRUPT", looks_like)
    return ckpt


def read_as(path: Path, kind: str, structure_only: bool = False) -> Checkpoint:
    """Run the reader for `kind`; anything it raises becomes a CORRUPT finding, never an exception."""
    if kind in FILE_READERS:
        return read_file(path)
    module_name, function_name = READERS[kind]
    options: dict[str, object] = {"trust_layout": True} if structure_only and kind == "dcp" else {}
    return run_reader(path, kind, module_name, function_name, options)
