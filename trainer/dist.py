"""Distributed set-up for `torchrun`: one process per rank, gloo on CPU, nccl on CUDA."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def setup() -> Dist:
    """Read torchrun's environment; a plain `python -m trainer` is rank 0 of 1."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local_rank}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world_size == 1:
        return Dist(0, 1, device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    return Dist(dist.get_rank(), dist.get_world_size(), device)


def gather(obj: Any, d: Dist) -> list[Any]:
    """Every rank's `obj`, in rank order, on every rank."""
    if not d.enabled:
        return [obj]
    out: list[Any] = [None] * d.world_size
    dist.all_gather_object(out, obj)
    return out


def barrier(d: Dist) -> None:
    if d.enabled:
        dist.barrier()


def teardown(d: Dist) -> None:
    if d.enabled and dist.is_initialized():
        dist.destroy_process_group()
