"""One-element tensors read straight from their storage bytes (a step counter, a flag), without numpy: what the
layouts and the anatomy both need, in a module of its own so that neither imports the other for it."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from ckinspect.io.folders import opened
from ckinspect.model import Checkpoint, TensorInfo

_STRUCT = {
    "float64": "<d",
    "float32": "<f",
    "float16": "<e",
    "int64": "<q",
    "int32": "<i",
    "int16": "<h",
    "int8": "<b",
    "uint64": "<Q",
    "uint32": "<I",
    "uint16": "<H",
    "uint8": "<B",
    "bool": "<?",
}


def _where(ckpt: Checkpoint, tensor: TensorInfo) -> tuple[Path, int] | None:
    """The file and absolute offset of a one-element tensor's bytes; None where they cannot be addressed."""
    storage = ckpt.storages.get(tensor.storage_key)
    if tensor.numel != 1 or storage is None or storage.offset is None:
        return None
    if tensor.byte_offset + tensor.itemsize > storage.nbytes:
        return None
    return storage.file, storage.offset + tensor.byte_offset


def _scalar_bytes(ckpt: Checkpoint, tensors: list[TensorInfo]) -> list[bytes | None]:
    """Each one-element tensor's bytes, read where its storage lies, wherever the file lives (a local file, an
    object by range requests: the same answer); None where that cannot be done."""
    wanted: dict[str, tuple[Path, list[tuple[int, int, int]]]] = {}  # file -> its path, (index, offset, size)
    for index, tensor in enumerate(tensors):
        where = _where(ckpt, tensor)
        if where is not None:
            wanted.setdefault(os.fspath(where[0]), (where[0], []))[1].append((index, where[1], tensor.itemsize))
    out: list[bytes | None] = [None] * len(tensors)
    for path, reads in wanted.values():
        try:
            with opened(path) as reader:
                pieces = reader.read_ranges([(offset, size) for _, offset, size in reads])
        except OSError:
            continue  # a local file gone or denied since it was listed; a remote failure is one line (exit 2)
        for (index, _, size), raw in zip(reads, pieces, strict=True):
            out[index] = raw if len(raw) == size else None
    return out


def read_scalars(ckpt: Checkpoint, tensors: list[TensorInfo]) -> list[int | float | bool | None]:
    """The value of each one-element tensor, read straight from its storage bytes (in the byte order the file
    records, as torch swaps a big-endian host's save on load), one request per file for all of them where
    the file is remote; None where unreadable or not one element."""
    return [_decoded(ckpt, t, raw) for t, raw in zip(tensors, _scalar_bytes(ckpt, tensors), strict=True)]


def read_scalar(ckpt: Checkpoint, tensor: TensorInfo) -> int | float | bool | None:
    """`read_scalars` of one tensor."""
    return read_scalars(ckpt, [tensor])[0]


def _decoded(ckpt: Checkpoint, tensor: TensorInfo, raw: bytes | None) -> int | float | bool | None:
    if raw is None:
        return None
    if ckpt.storages[tensor.storage_key].big_endian:
        raw = raw[::-1]  # one element: reversing its bytes is torch's byteswap
    if tensor.dtype == "bfloat16":
        return struct.unpack("<f", b"\0\0" + raw)[0]
    fmt = _STRUCT.get(tensor.dtype)
    if fmt is None:
        return None
    value = struct.unpack(fmt, raw)[0]
    if isinstance(value, float) and value.is_integer() and tensor.name.endswith("step"):
        return int(value)
    return value
