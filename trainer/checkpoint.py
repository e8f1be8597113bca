"""Saving and loading, the way a resume file should be saved.

Every file goes to `<file>.tmp` in the same folder, is flushed and fsynced, `os.replace`d over the
old one, and the folder is fsynced (ckinspect.io.atomic.atomic_write). A crash at any moment leaves the
previous checkpoint whole. Loading uses `weights_only=True` only: nothing in a checkpoint runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import torch

from ckinspect.io.atomic import atomic_write
from ckinspect.vocab import TMP_SUFFIX


def save(obj: Any, path: str | os.PathLike[str], wrap: Callable[[BinaryIO], BinaryIO] | None = None) -> Path:
    """torch.save `obj` to `path` atomically via `<path>.tmp`.

    `wrap` lets tests put a failing or stalling writer between torch.save and the file.
    """
    path = Path(path)
    with atomic_write(path, tmp_name=path.name + TMP_SUFFIX) as handle:
        torch.save(obj, wrap(handle) if wrap else handle)
    return path


def load(path: str | os.PathLike[str]) -> Any:
    """A resume or weights file, or a DCP folder saved by `save_dcp` (the same dict either way)."""
    if Path(path).is_dir():
        return load_dcp(path)
    return torch.load(path, map_location="cpu", weights_only=True)


def save_dcp(state: dict[str, Any], folder: str | os.PathLike[str]) -> Path:
    """A sharded save through torch.distributed.checkpoint: every rank calls it and writes its own
    `__<rank>_0.distcp`; the coordinator writes `.metadata` last (tmp, fsync, rename), so a folder
    without `.metadata` is a save that never finished. The folder is fsynced after, for the rename."""
    import torch.distributed.checkpoint as dcp

    folder = Path(folder)
    dcp.save(state, storage_writer=dcp.FileSystemWriter(folder, sync_files=True))
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return folder


def load_dcp(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """Every value of a DCP folder, as the nested dict that was saved (torch's own dcp_to_torch_save path;
    its non-tensor values are read with torch.load(weights_only=True)). DCP keeps every dict key as a
    string, so the optimizer's per-parameter state gets back the int keys torch's optimizers use."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    state: dict[str, Any] = {}
    _load_state_dict(state, storage_reader=FileSystemReader(folder), planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    optimizer = state.get("optimizer")
    if isinstance(optimizer, dict) and isinstance(optimizer.get("state"), dict):
        optimizer["state"] = {int(k): v for k, v in optimizer["state"].items()}
    return state


def half_weights(state_dict: dict[str, torch.Tensor], dtype: torch.dtype = torch.float16) -> dict[str, torch.Tensor]:
    """Cast floating tensors to `dtype`, keeping tied weights as one shared storage (saved once)."""
    cast: dict[tuple[int, tuple[int, ...], tuple[int, ...]], torch.Tensor] = {}  # by (address, shape, stride)
    out = {}
    for name, tensor in state_dict.items():
        key = (tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()))
        if key not in cast:
            target = dtype if tensor.is_floating_point() else tensor.dtype
            cast[key] = tensor.detach().to("cpu", target, copy=True)
        out[name] = cast[key]
    return out


def fp32_weights(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Detached CPU fp32 copies, tied weights still shared."""
    return half_weights(state_dict, torch.float32)
