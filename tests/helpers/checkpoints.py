"""Checkpoints built by hand, the way a reader would fill them, so anatomy and checks can be tested
without depending on a reader (or torch) and with exact, readable numbers."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckinspect.dtypes import dtype_info
from ckinspect.model import Checkpoint, StorageInfo, TensorInfo


@dataclass
class T:
    """A tensor placeholder in a tree: shape, dtype, and optionally a shared storage / offset / size."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    storage: str | None = None  # share a storage by giving two tensors the same key
    offset: int = 0  # storage offset in elements
    storage_numel: int | None = None  # storage bigger than the view (a saved slice)


def contiguous_stride(shape: tuple[int, ...]) -> tuple[int, ...]:
    stride, acc = [], 1
    for size in reversed(shape):
        stride.append(acc)
        acc *= size
    return tuple(reversed(stride))


def build(
    tree: Any, path: str | Path = "ckpt.pth", fmt: str = "torch-zip", file_bytes: int | None = None
) -> Checkpoint:
    """Replace every T in `tree` by a TensorInfo named by its dotted path, with storages to match."""
    tensors: list[TensorInfo] = []
    storages: dict[str, StorageInfo] = {}

    def convert(node: Any, prefix: str) -> Any:
        if isinstance(node, T):
            key = node.storage or str(len(storages))
            itemsize = dtype_info(node.dtype).itemsize
            need = (node.offset + math.prod(node.shape)) * itemsize
            size = max(need, (node.storage_numel or 0) * itemsize)
            old = storages.get(key)
            if old is None or old.nbytes < size:
                storages[key] = StorageInfo(key, node.dtype, size, Path(path), None)
            info = TensorInfo(prefix, node.dtype, node.shape, contiguous_stride(node.shape), key, node.offset)
            tensors.append(info)
            return info
        if isinstance(node, Mapping):
            return {k: convert(v, f"{prefix}.{k}" if prefix else str(k)) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            items = [convert(v, f"{prefix}.{i}" if prefix else str(i)) for i, v in enumerate(node)]
            return items if isinstance(node, list) else tuple(items)
        return node

    decoded = convert(tree, "")
    total = sum(s.nbytes for s in storages.values())
    return Checkpoint(
        path=Path(path),
        format=fmt,
        file_bytes=file_bytes if file_bytes is not None else total + 1000,
        tensors=tensors,
        storages=storages,
        tree=decoded,
    )


def names_only(ckpt: Checkpoint) -> Checkpoint:
    """The same checkpoint as a name-only reader (DCP, safetensors) would give it: no tree."""
    ckpt.tree = None
    return ckpt


# A tiny transformer-ish model: 4 parameters, one of them tied (lm_head = embedding).
def model_sd(dtype: str = "float32", prefix_tied: bool = True) -> dict[str, Any]:
    sd: dict[str, Any] = {
        "emb.weight": T((16, 8), dtype, storage="emb"),
        "layers.0.w1.weight": T((32, 8), dtype),
        "layers.0.w2.weight": T((8, 32), dtype),
        "norm.weight": T((8,), dtype),
    }
    if prefix_tied:
        sd["lm_head.weight"] = T((16, 8), dtype, storage="emb")
    return sd


PARAM_SHAPES = [(16, 8), (32, 8), (8, 32), (8,)]


def adamw_state(shapes: list[tuple[int, ...]] = PARAM_SHAPES, groups: int = 1) -> dict[str, Any]:
    state = {i: {"step": T((), "float32"), "exp_avg": T(s), "exp_avg_sq": T(s)} for i, s in enumerate(shapes)}
    ids = list(range(len(shapes)))
    cut = len(ids) // groups
    param_groups = [
        {"lr": 1e-3, "weight_decay": 0.1, "params": ids[i * cut : (i + 1) * cut if i < groups - 1 else None]}
        for i in range(groups)
    ]
    return {"state": state, "param_groups": param_groups}


def trainer_resume(**overrides: Any) -> dict[str, Any]:
    tree: dict[str, Any] = {
        "format": "ckinspect-trainer/1",
        "model": model_sd(),
        "optimizer": adamw_state(),
        "step": 30,
        "epoch": 1,
        "world_size": 1,
        "rng": {"torch": T((5056,), "uint8"), "python": (3, (1, 2, 3), None), "cuda": []},
        "config": {"dim": 8, "n_layers": 1, "vocab_size": 16},
    }
    tree.update(overrides)
    return {k: v for k, v in tree.items() if v is not None}
