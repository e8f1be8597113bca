"""One-element tensors read straight from their storage bytes (a step counter, a flag), without numpy: what the
layouts and the anatomy both need, in a module of its own so that neither imports the other for it."""

from __future__ import annotations

import struct
from pathlib import Path

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


def _scalar_bytes(ckpt: Checkpoint, tensor: TensorInfo) -> bytes | None:
    """The one element's bytes, read where its storage lies in the file; None where that cannot be done."""
    storage = ckpt.storages.get(tensor.storage_key)
    if storage is None or storage.offset is None or tensor.byte_offset + tensor.itemsize > storage.nbytes:
        return None
    try:
        with open(Path(storage.file), "rb") as handle:
            handle.seek(storage.offset + tensor.byte_offset)
            raw = handle.read(tensor.itemsize)
    except OSError:
        return None
    return raw if len(raw) == tensor.itemsize else None


def read_scalar(ckpt: Checkpoint, tensor: TensorInfo) -> int | float | bool | None:
    """The value of a one-element tensor, read straight from its storage bytes (in the byte order the file
    records, as torch swaps a big-endian host's save on load); None where unreadable."""
    raw = _scalar_bytes(ckpt, tensor) if tensor.numel == 1 else None
    if raw is None:
        return None
    storage = ckpt.storages[tensor.storage_key]
    if storage.big_endian:
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
