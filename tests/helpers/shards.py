"""A small 4-shard `.bin` set (torch zip shards, each storage with its CRC) for the parallel scan's tests:
clean, or with the damage a real set gets (NaN/Inf in tensors of one family spread over the shards,
values beyond float16, a shard cut short, stored bytes that changed on disk)."""

from __future__ import annotations

import json
from pathlib import Path

SHARDS = 4
INDEX = "pytorch_model.bin.index.json"


def shard_name(i: int) -> str:
    return f"pytorch_model-{i + 1:05d}-of-{SHARDS:05d}.bin"


def write_set(folder: Path, damaged: bool = False) -> Path:
    """Two 32x32 fp32 tensors per shard, `layers.{2s}` and `layers.{2s+1}`; damaged: NaN in layers.0
    (shard 1), Inf in layers.7 (shard 4), 1e6 in layers.5 (shard 3), shard 2 cut short and one stored
    byte of layers.4 (shard 3) flipped."""
    import torch

    from tests.helpers.raw_zip import flip_byte
    from tests.helpers.torch_files import cut

    folder.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(0)
    weight_map = {}
    for s in range(SHARDS):
        tensors = {f"layers.{2 * s + i}.weight": torch.randn(32, 32, generator=generator) for i in range(2)}
        if damaged and s == 0:
            tensors["layers.0.weight"][3, 3] = float("nan")
        if damaged and s == 3:
            tensors["layers.7.weight"][0, 1] = float("inf")
        if damaged and s == 2:
            tensors["layers.5.weight"][2, 2] = 1e6
        torch.save(tensors, folder / shard_name(s))
        weight_map.update({name: shard_name(s) for name in tensors})
    (folder / INDEX).write_text(json.dumps({"metadata": {"total_size": 8 * 32 * 32 * 4}, "weight_map": weight_map}))
    if damaged:
        cut(folder / shard_name(1), 0.5, folder / shard_name(1))
        from ckinspect.formats import open_checkpoint

        shard = open_checkpoint(folder / shard_name(2))
        storage = shard.storages[shard.tensor("layers.4.weight").storage_key]
        flip_byte(folder / shard_name(2), storage.offset + 100)
    return folder / INDEX
