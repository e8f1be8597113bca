"""Saving and loading, the way a resume file should be saved.

Every file goes to `<file>.tmp` in the same folder, is flushed and fsynced, `os.replace`d over the
old one, and the folder is fsynced (ckinspect.io.atomic.atomic_write). A crash at any moment leaves the
previous checkpoint whole. Loading uses `weights_only=True` only: nothing in a checkpoint runs.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, cast

import torch

from ckinspect.io.atomic import atomic_write
from ckinspect.vocab import TMP_SUFFIX


def save(
    obj: Any, path: str | os.PathLike[str], wrap: Callable[[BinaryIO], BinaryIO] | None = None, delay: float = 0.0
) -> Path:
    """torch.save `obj` to `path` atomically via `<path>.tmp`.

    `wrap` lets tests put a failing or stalling writer between torch.save and the file; `delay` stalls the
    write that many seconds half-way (slow storage, for watch demos).
    """
    path = Path(path)
    with atomic_write(path, tmp_name=path.name + TMP_SUFFIX) as handle:
        target = wrap(handle) if wrap else handle
        torch.save(obj, cast(BinaryIO, SlowDisk(target, delay)) if delay > 0 else target)
    return path


def load(path: str | os.PathLike[str]) -> Any:
    """A resume or weights file, or a DCP folder saved by `save_dcp` (the same dict either way)."""
    if Path(path).is_dir():
        return load_dcp(path)
    return torch.load(path, map_location="cpu", weights_only=True)


def save_dcp(state: dict[str, Any], folder: str | os.PathLike[str], delay: float = 0.0) -> Path:
    """A sharded save through torch.distributed.checkpoint: every rank calls it and writes its own
    `__<rank>_0.distcp`; the coordinator writes `.metadata` last (tmp, fsync, rename), so a folder
    without `.metadata` is a save that never finished. The folder is fsynced after, for the rename.
    `delay` waits that many seconds between the rank files and `.metadata` (slow storage, for watch demos)."""
    import torch.distributed.checkpoint as dcp

    folder = Path(folder)
    dcp.save(state, storage_writer=_writer(folder, delay))
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return folder


def _writer(folder: Path, delay: float) -> Any:
    from torch.distributed.checkpoint import FileSystemWriter

    if delay <= 0:
        return FileSystemWriter(folder, sync_files=True)

    class SlowFinish(FileSystemWriter):
        def finish(self, *args: Any, **kwargs: Any) -> Any:
            time.sleep(delay)  # the rank files are written; `.metadata` is not yet
            return super().finish(*args, **kwargs)

    return SlowFinish(folder, sync_files=True)


class SlowDisk(io.RawIOBase):
    """A writer that stalls once for `delay` seconds after its first 64 KiB: a save caught half-written."""

    def __init__(self, handle: BinaryIO, delay: float) -> None:
        super().__init__()
        self.handle, self.delay, self.written = handle, delay, 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        count = self.handle.write(data)
        before, self.written = self.written, self.written + count
        if before < (64 << 10) <= self.written:
            self.handle.flush()
            time.sleep(self.delay)
        return count

    def flush(self) -> None:
        self.handle.flush()


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
