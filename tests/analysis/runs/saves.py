"""Small saves of a pretend run, written the way trainers write them (tmp, then os.replace), for the watch tests."""

from __future__ import annotations

import os
from pathlib import Path

import torch

LAYERS = ("layers.0.wq", "layers.0.wk", "layers.1.wq", "layers.1.wk")


def state(step: int, *, frozen_from: dict[str, int] | None = None, nan: bool = False, jump: float = 1.0) -> dict:
    """Weights that move a little every step (a layer in `frozen_from` stops at that step), AdamW-like moments."""
    frozen_from = frozen_from or {}
    model, opt_state = {}, {}
    for i, layer in enumerate(LAYERS):
        base = torch.Generator().manual_seed(i)
        direction = torch.Generator().manual_seed(100 + i)
        w0 = torch.randn(16, 16, generator=base)
        d = torch.randn(16, 16, generator=direction)
        moved = min(step, frozen_from.get(layer, step))
        w = w0 + 0.01 * moved * d * (jump if step == moved else 1.0)
        if nan and i == 0:
            w[0, 0] = float("nan")
        model[f"{layer}.weight"] = w
        opt_state[i] = {"step": torch.tensor(float(step)), "exp_avg": 1e-3 * d * (1 + step), "exp_avg_sq": 1e-6 * d * d}
    optimizer = {"state": opt_state, "param_groups": [{"lr": 1e-3, "params": list(range(len(LAYERS)))}]}
    rng = {"torch": torch.arange(64, dtype=torch.uint8)}
    return {"model": model, "optimizer": optimizer, "step": step, "epoch": 0, "rng": rng}


def save(path: Path, step: int, **kw) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state(step, **kw), tmp)
    os.replace(tmp, path)
    return path


def half_written(path: Path, step: int) -> Path:
    """A save caught mid-write: the first half of its bytes, under its tmp name."""
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state(step), tmp)
    data = tmp.read_bytes()
    tmp.write_bytes(data[: len(data) // 2])
    return tmp


def age(path: Path, seconds: float) -> None:
    """Set a file's modification time `seconds` into the past (a writer that went quiet long ago)."""
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns - int(seconds * 1e9)))
