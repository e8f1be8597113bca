"""The torch side of salvage and convert: build real tensors from raw bytes and write files.

Imported only by commands that write torch or safetensors files from tensors; the readers never
import it. Input files are never torch.load-ed here: bytes come from our readers.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ckinspect.io.atomic import atomic_write
from ckinspect.io.safetensors_write import Entry, write_safetensors
from ckinspect.model import TensorInfo
from ckinspect.ops.rawtensors import MISSING, Built, map_tree
from ckinspect.vocab import CkinspectError


def torch_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise CkinspectError(f"torch has no dtype {name}, and converting goes through torch")
    return dtype


def tensor_from_bytes(data: bytes | bytearray, dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    if not len(data):
        return torch.empty(0, dtype=torch_dtype(dtype)).reshape(shape)
    writable = data if isinstance(data, bytearray) else bytearray(data)  # frombuffer shares it, so no copy
    return torch.frombuffer(writable, dtype=torch.uint8).view(torch_dtype(dtype)).reshape(shape)


def rebuild_tree(
    tree: Any,
    storage_bytes: Callable[[TensorInfo], bytes | bytearray | None],
    keep: Callable[[str, TensorInfo], bool] | None = None,
    cast: Callable[[str, torch.Tensor], torch.Tensor] | None = None,
) -> Built:
    """Copy the reader's tree with torch tensors in place of TensorInfo (rawtensors.map_tree).

    One torch storage per storage key, so views and tied weights stay shared as in the original.
    A tensor whose bytes are unavailable is left out (dict entry dropped, list slot None).
    `keep(name, info)` filters tensors (convert --only); `cast` changes dtype (convert --dtype).
    """
    storages: dict[str, torch.UntypedStorage | None] = {}

    def tensor_for(name: str, info: TensorInfo) -> Any:
        if info.storage_key not in storages:
            raw = storage_bytes(info)
            storages[info.storage_key] = None if raw is None else _untyped(raw)
        storage = storages[info.storage_key]
        if storage is None or info.byte_offset + info.span_bytes > storage.nbytes():
            return MISSING
        t = torch.empty(0, dtype=torch_dtype(info.dtype)).set_(storage, info.storage_offset, info.shape, info.stride)
        return cast(name, t) if cast is not None else t

    return map_tree(tree, tensor_for, keep, is_plain=_is_plain_torch)


def _untyped(raw: bytes | bytearray) -> torch.UntypedStorage:
    if not raw:
        return torch.UntypedStorage(0)
    writable = raw if isinstance(raw, bytearray) else bytearray(raw)  # frombuffer wants a writable buffer
    return torch.frombuffer(writable, dtype=torch.uint8).untyped_storage()


def _is_plain_torch(obj: Any) -> bool:
    return isinstance(obj, (torch.dtype, torch.Size, torch.device))


def save_torch(path: str | Path, obj: Any) -> int:
    """torch.save through ckinspect.io.atomic; returns the file size."""
    with atomic_write(path) as handle:
        torch.save(obj, handle)
        handle.flush()
        size = handle.tell()
    return size


def tensors_to_safetensors(
    path: str | Path, tensors: list[tuple[str, torch.Tensor]], metadata: dict[str, str] | None = None
) -> tuple[int, list[str]]:
    """Write named tensors as safetensors: each gets its own bytes (the format forbids sharing).

    Returns the size and notes naming every tensor that shared its storage and was copied.
    """
    seen: dict[tuple[int, int], str] = {}
    notes = []
    entries = []
    for name, t in tensors:
        if t.is_sparse or t.is_quantized:
            raise ValueError(f"{name}: sparse/quantized tensors cannot be written as safetensors")
        ident = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        if t.numel() and ident in seen:
            notes.append(
                f"{name} shared its storage with {seen[ident]}: written as a separate copy "
                "(safetensors forbids shared memory)"
            )
        elif t.numel():
            seen[ident] = name
        flat = t.detach().contiguous().reshape(-1)
        dtype = str(t.dtype).removeprefix("torch.")
        entries.append(Entry(name, dtype, tuple(t.shape), functools.partial(_chunks_of, flat)))
    return write_safetensors(path, entries, metadata), notes


def _chunks_of(flat: torch.Tensor) -> list[memoryview]:
    if flat.numel() == 0:
        return [memoryview(b"")]
    return [flat.view(torch.uint8).numpy().data]
