"""Sharded sets: `*.safetensors.index.json` / `pytorch_model.bin.index.json` over several shard files.

The index's `weight_map` names the shard of every tensor. We read every shard (headers only for
safetensors) and merge them into ONE Checkpoint, checking the index and the shards agree.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ckinspect.io import folders
from ckinspect.io.contain import OutsideTarget, inside
from ckinspect.io.remote import as_path
from ckinspect.model import Checkpoint

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAX_NAMED = 5  # tensor names quoted per finding before "... and N more"


def read_sharded(index_json_path: str | os.PathLike[str]) -> Checkpoint:
    """Read an index file and all its shards. Never raises for bad content."""
    index_path = as_path(index_json_path)  # a URL's shards are read by range requests (io.remote)
    ckpt = Checkpoint(path=index_path, format="sharded", file_bytes=0)
    weight_map = _read_index(ckpt, index_path)
    if weight_map is None:
        return ckpt

    by_shard: dict[str, list[str]] = {}
    for name, shard in weight_map.items():
        by_shard.setdefault(shard, []).append(name)

    seen: dict[str, str] = {}  # tensor name -> shard it was found in
    tree: dict[str, object] = {}
    for shard in sorted(by_shard):
        part = _shard_part(ckpt, index_path, shard, by_shard[shard])
        if part is None:
            continue
        _add_shard(ckpt, part, shard, tree)
        _check_lacking(ckpt, part, shard, by_shard[shard])
        _check_placed(ckpt, part, shard, weight_map, seen)
    ckpt.tree = tree
    return ckpt


def _shard_part(ckpt: Checkpoint, index_path: Path, shard: str, expected: list[str]) -> Checkpoint | None:
    """One shard the index names, read (its file counted in ckpt); None, with the finding, when it is outside
    the folder or missing."""
    try:
        shard_path = inside(index_path.parent, shard)
    except OutsideTarget as exc:
        ckpt.add("CORRUPT", f"index names shard {shard!r} outside its folder or through a symlink ({exc}); not read")
        return None
    if not folders.is_file(shard_path, ask=True):
        ckpt.add("MISSING_PARTS", f"shard {shard} is missing ({_names(expected)} have no data)")
        return None
    part = _read_shard(shard_path, shard)
    ckpt.files.append(shard_path)
    ckpt.file_bytes += part.file_bytes
    return part


def _check_lacking(ckpt: Checkpoint, part: Checkpoint, shard: str, expected: list[str]) -> None:
    """The tensors the index places in this shard that it does not hold."""
    found = {t.name for t in part.tensors}
    lacking = [name for name in expected if name not in found]
    if lacking and part.tensors:
        ckpt.add("CORRUPT", f"shard {shard} lacks {_names(lacking)} that the index places there")
    elif lacking and not any(f.code == "CORRUPT" for f in part.findings):
        ckpt.add("CORRUPT", f"shard {shard} holds no tensors but the index places {_names(lacking)} there")


def _check_placed(ckpt: Checkpoint, part: Checkpoint, shard: str, weight_map: dict[str, str],
                  seen: dict[str, str]) -> None:  # fmt: skip
    """Each tensor the shard holds: placed there by the index, and in no earlier shard."""
    for tensor in part.tensors:
        if weight_map.get(tensor.name) != shard:
            ckpt.add(
                "CORRUPT", f"shard {shard} holds {tensor.name!r}, which the index does not place there", tensor.name
            )
        if tensor.name in seen:
            ckpt.add("CORRUPT", f"tensor {tensor.name!r} is in both {seen[tensor.name]} and {shard}", tensor.name)
        seen.setdefault(tensor.name, shard)


def _read_index(ckpt: Checkpoint, index_path: Path) -> dict[str, str] | None:
    index = _index_json(ckpt, index_path)
    if index is _UNREAD:
        return None
    if not isinstance(index, dict) or not isinstance(index.get("weight_map"), dict):
        ckpt.add("CORRUPT", "index has no weight_map object (tensor name -> shard file)")
        return None
    weight_map = index["weight_map"]
    bad = [name for name, shard in weight_map.items() if not isinstance(shard, str) or not shard]
    if bad:
        ckpt.add("CORRUPT", f"index weight_map gives no shard file name for {_names(bad)}")
        return None
    metadata = index.get("metadata")
    if isinstance(metadata, dict):
        ckpt.metadata.update(metadata)
    return weight_map


_UNREAD = object()


def _index_json(ckpt: Checkpoint, index_path: Path) -> Any:
    """The index file decoded; _UNREAD, with the finding, when it cannot be read or is not JSON."""
    try:
        raw = folders.read_bytes(index_path)
    except OSError as exc:
        ckpt.add("CORRUPT", f"cannot read index: {exc.strerror or exc}")
        return _UNREAD
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        ckpt.add("CORRUPT", f"index is not valid JSON: {exc}")
        return _UNREAD


# a .bin shard is torch.load-ed: a plain pickle runs too; numpy arrays are no shard
SHARD_FORMATS = ("safetensors", "torch-zip", "torch-legacy", "pickle")


def _read_shard(shard_path: Path, shard: str) -> Checkpoint:
    from ckinspect.formats.files import read_file

    return read_file(shard_path, member=shard, accept=SHARD_FORMATS)


def _add_shard(ckpt: Checkpoint, part: Checkpoint, shard: str, tree: dict[str, object]) -> None:
    """Add one shard: its storages, findings and globals (Checkpoint.absorb, keys prefixed by the shard
    name), its tensors and the metadata no earlier shard gave."""
    ckpt.absorb(part, f"shard {shard}", key_prefix=f"{shard}:", member=shard)
    for tensor in part.tensors:
        named = tensor.replace(storage_key=f"{shard}:{tensor.storage_key}")
        ckpt.tensors.append(named)
        tree.setdefault(named.name, named)
    for key, value in part.metadata.items():
        ckpt.metadata.setdefault(key, value)


def _names(names: list[str]) -> str:
    quoted = ", ".join(repr(n) for n in names[:MAX_NAMED])
    more = f" and {len(names) - MAX_NAMED:,} more" if len(names) > MAX_NAMED else ""
    noun = "tensor" if len(names) == 1 else "tensors"
    return f"{len(names):,} {noun} ({quoted}{more})"
