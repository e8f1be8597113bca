"""The torch side of salvage and convert: build real tensors from raw bytes and write files.

Imported only by commands that write torch or safetensors files from tensors; the readers never
import it. Input files are never torch.load-ed here: bytes come from our readers.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ckinspect.io.atomic import atomic_write
from ckinspect.io.safetensors_write import Entry, write_safetensors
from ckinspect.model import TensorInfo
from ckinspect.vocab import CkinspectError

SCALARS = (str, int, float, bool, bytes, type(None), complex)


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


@dataclass
class Built:
    tree: Any
    tensors: list[tuple[str, torch.Tensor]] = field(default_factory=list)
    missing: list[tuple[str, TensorInfo]] = field(default_factory=list)
    dropped: list[tuple[str, str]] = field(default_factory=list)


def rebuild_tree(
    tree: Any,
    storage_bytes: Callable[[TensorInfo], bytes | bytearray | None],
    keep: Callable[[str, TensorInfo], bool] | None = None,
    cast: Callable[[str, torch.Tensor], torch.Tensor] | None = None,
) -> Built:
    """Copy the reader's tree with torch tensors in place of TensorInfo.

    One torch storage per storage key, so views and tied weights stay shared as in the original.
    A tensor whose bytes are unavailable is left out (dict entry dropped, list slot None).
    `keep(name, info)` filters tensors (convert --only); `cast` changes dtype (convert --dtype).
    """
    built = Built(None)
    storages: dict[str, torch.UntypedStorage | None] = {}

    def storage_for(info: TensorInfo):
        if info.storage_key not in storages:
            raw = storage_bytes(info)
            storages[info.storage_key] = None if raw is None else _untyped(raw)
        return storages[info.storage_key]

    def tensor_for(name: str, info: TensorInfo):
        storage = storage_for(info)
        if storage is None or info.byte_offset + info.span_bytes > storage.nbytes():
            built.missing.append((name, info))
            return _MISSING
        t = torch.empty(0, dtype=torch_dtype(info.dtype)).set_(storage, info.storage_offset, info.shape, info.stride)
        if cast is not None:
            t = cast(name, t)
        built.tensors.append((name, t))
        return t

    def walk(obj: Any, path: str) -> Any:
        if isinstance(obj, TensorInfo):
            path = path or "tensor"  # a bare torch.save(tensor): the readers' name for it
            if keep is not None and not keep(path, obj):
                return _SKIP
            return tensor_for(path, obj)
        if isinstance(obj, dict):
            out = collections.OrderedDict() if isinstance(obj, collections.OrderedDict) else {}
            for k, v in obj.items():
                child = walk(v, f"{path}.{k}" if path else str(k))
                if child is not _MISSING and child is not _SKIP:
                    out[k] = child
            return out
        if isinstance(obj, (list, tuple)):
            items = []
            for i, v in enumerate(obj):
                child = walk(v, f"{path}.{i}" if path else str(i))
                items.append(None if child is _MISSING or child is _SKIP else child)
            return type(obj)(items) if type(obj) in (list, tuple) else list(items)
        if isinstance(obj, SCALARS) or _is_plain_torch(obj):
            return obj
        if type(obj).__name__ == "ArrayInfo":  # a numpy array the reader decoded (RNG states)
            array = _numpy_array(obj)
            if array is not None:
                return array
            why = f"numpy array {obj.dtype}{list(obj.shape)} too large for the reader to keep"
            built.dropped.append((path or "<root>", why))
            return _SKIP
        what = getattr(obj, "qualname", None) or f"{type(obj).__module__}.{type(obj).__qualname__}"
        built.dropped.append((path or "<root>", f"a {what} object (not plain data) cannot be carried over"))
        return _SKIP

    result = walk(tree, "")
    built.tree = {} if result is _SKIP or result is _MISSING else result
    return built


_MISSING = object()
_SKIP = object()


def _untyped(raw: bytes | bytearray) -> torch.UntypedStorage:
    if not raw:
        return torch.UntypedStorage(0)
    writable = raw if isinstance(raw, bytearray) else bytearray(raw)  # frombuffer wants a writable buffer
    return torch.frombuffer(writable, dtype=torch.uint8).untyped_storage()


def _is_plain_torch(obj: Any) -> bool:
    return isinstance(obj, (torch.dtype, torch.Size, torch.device))


def _numpy_array(info: Any):
    import numpy as np

    data = getattr(info, "data", None)
    if data is None:
        return None
    try:
        return np.frombuffer(bytearray(data), dtype=np.dtype(str(info.dtype))).reshape(info.shape)
    except (TypeError, ValueError):
        return None


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
