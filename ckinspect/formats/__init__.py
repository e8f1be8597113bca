"""Readers: bytes on disk -> Checkpoint. Never imports torch, never executes anything from a file."""

from __future__ import annotations

import os
from pathlib import Path

from ckinspect.formats.files import FILE_READERS, read_remote_file, run_reader
from ckinspect.formats.opening import check_readable, empty, why
from ckinspect.model import Checkpoint

# format -> (module, function); imported only when a checkpoint of that format is opened
READERS: dict[str, tuple[str, str]] = {
    **FILE_READERS,
    "dcp": ("ckinspect.formats.dcp", "read_dcp"),
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
    from ckinspect.io.folders import on_disk

    if not on_disk(path):
        return read_remote(path, structure_only)
    path = Path(path)
    check_readable(path)
    from ckinspect.formats.sniff import describe, sniff

    try:
        kind = sniff(path)
        if kind != "unknown":
            return read_as(path, kind, structure_only)
        looks_like = f"not a checkpoint: looks like {describe(path)}"
    except Exception as exc:  # sniffing reads a few KB; even a bug there must not take the report down
        looks_like = f"cannot tell what this is: {why(exc)}"
    ckpt = empty(path, "unknown")
    ckpt.add("CORRUPT", looks_like)
    return ckpt


def read_as(path: Path, kind: str, structure_only: bool = False) -> Checkpoint:
    """Run the reader for `kind`; anything it raises becomes a CORRUPT finding, never an exception."""
    module_name, function_name = READERS[kind]
    options = {"trust_layout": True} if structure_only and kind == "dcp" else {}
    return run_reader(path, kind, module_name, function_name, **options)


def read_remote(url: str | os.PathLike[str], structure_only: bool = False) -> Checkpoint:
    """A remote torch zip or safetensors file, listed from the few ranges it needs (ckinspect.io.remote).
    A read that fails (not found, denied, timed out) raises CkinspectError; bad content is CORRUPT."""
    from ckinspect.io import folders

    path = folders.target(url)  # `diff s3://b/step-2/ ...`: a folder named as one checkpoint (DCP), listed first
    if path.name.endswith(".index.json"):  # a sharded set: its index, then each shard by range requests
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
    return read_remote_file(path)
