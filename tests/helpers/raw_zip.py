"""Checkpoints built by hand for the scan/diff/drift tests: raw storages in a stored zip, described by
StorageInfo/TensorInfo exactly as a reader would, so these tests do not depend on the readers."""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ckinspect.model import Checkpoint, StorageInfo, TensorInfo


@dataclass
class View:
    storage: str  # storage key
    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...] | None = None  # None: contiguous
    offset: int = 0  # elements
    group: str = "other"


def contiguous_stride(shape: tuple[int, ...]) -> tuple[int, ...]:
    stride, acc = [], 1
    for n in reversed(shape):
        stride.append(acc)
        acc *= n
    return tuple(reversed(stride))


def zip_checkpoint(
    path: Path, storages: dict[str, np.ndarray], views: dict[str, View], fmt: str = "torch-zip"
) -> Checkpoint:
    """Write each storage as a stored zip member `archive/data/<key>` and describe it like the torch zip reader."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("archive/data.pkl", b"placeholder")
        for key, arr in storages.items():
            zf.writestr(f"archive/data/{key}", np.ascontiguousarray(arr).tobytes())
    infos: dict[str, StorageInfo] = {}
    with zipfile.ZipFile(path) as zf, open(path, "rb") as fh:
        for key in storages:
            zi = zf.getinfo(f"archive/data/{key}")
            fh.seek(zi.header_offset + 26)
            name_len = int.from_bytes(fh.read(2), "little")
            extra_len = int.from_bytes(fh.read(2), "little")
            offset = zi.header_offset + 30 + name_len + extra_len
            dtype = next((v.dtype for v in views.values() if v.storage == key), "uint8")
            infos[key] = StorageInfo(key, dtype, zi.file_size, Path(path), offset, zi.CRC, zi.filename)
    tensors = [
        TensorInfo(name, v.dtype, v.shape, v.stride or contiguous_stride(v.shape), v.storage, v.offset, v.group)
        for name, v in views.items()
    ]
    return Checkpoint(Path(path), fmt, Path(path).stat().st_size, tensors, infos)


def simple_checkpoint(
    path: Path, arrays: dict[str, np.ndarray], group: str = "other", dtypes: dict[str, str] | None = None
) -> Checkpoint:
    """One contiguous tensor per storage, named as given (dtype from numpy unless overridden, e.g. bfloat16)."""
    names = {
        np.dtype("float32"): "float32",
        np.dtype("float16"): "float16",
        np.dtype("float64"): "float64",
        np.dtype("int64"): "int64",
        np.dtype("uint8"): "uint8",
        np.dtype("int32"): "int32",
        np.dtype("bool"): "bool",
    }
    storages, views = {}, {}
    for i, (name, arr) in enumerate(arrays.items()):
        key = str(i)
        storages[key] = arr
        dtype = (dtypes or {}).get(name) or names[arr.dtype]
        views[name] = View(key, dtype, tuple(arr.shape), group=group)
    return zip_checkpoint(path, storages, views)


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (round to nearest even), as torch does."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def saved_checkpoint(path: Path, tensors: dict) -> Checkpoint:
    """torch.save a flat dict of tensors and describe it with the real reader."""
    import torch

    from ckinspect.formats import open_checkpoint

    torch.save(tensors, path)
    return open_checkpoint(Path(path))


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        b = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([b[0] ^ 0x01]))
