"""Real checkpoint files for the repair/salvage/convert tests, made with torch.save."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch


def resume_state(step: int, seed: int = 0, width: int = 16) -> dict:
    """A small resume file as a trainer writes it: tied weights, AdamW state, step, RNG."""
    torch.manual_seed(seed)
    emb = torch.nn.Embedding(32, width)
    body = torch.nn.Linear(width, width)
    head = torch.nn.Linear(width, 32, bias=False)
    head.weight = emb.weight  # tied input/output embeddings share one storage
    model = torch.nn.ModuleDict({"emb": emb, "body": body, "head": head})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss = head(body(emb(torch.arange(8)))).square().mean()
    loss.backward()
    opt.step()
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "step": step,
        "epoch": 0,
        "world_size": 1,
        "rng": {"torch": torch.get_rng_state()},
    }


def save_resume(path: Path, step: int, seed: int = 0) -> Path:
    torch.save(resume_state(step, seed), path)
    return path


def many_tensors(n: int = 12, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for i in range(n):
        dtype = (torch.float32, torch.bfloat16, torch.float16, torch.int64)[i % 4]
        t = torch.randn(16 + 4 * i, 8, generator=g) * 10
        out[f"layer{i:02d}.weight"] = t.to(dtype)
    return out


def cut(path: Path, fraction: float, out: Path | None = None) -> Path:
    data = path.read_bytes()
    out = out or path
    out.write_bytes(data[: int(len(data) * fraction)])
    return out


def tree_hashes(folder: Path) -> dict[str, str]:
    """relative path -> sha256 of every file under folder (quarantine included)."""
    out = {}
    for root, _dirs, files in os.walk(folder):
        for name in files:
            p = Path(root) / name
            out[str(p.relative_to(folder))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def sha(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def bit_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))
