"""Honest sparse-file simulations of frontier-scale saves, written with the real libraries' own code.

Only tensor data is left out: every byte a reader parses (DCP's `.metadata`, each item's torch.save zip,
safetensors headers, DeepSpeed's rank files, torch.save zips) is what the library writes, and the data
regions are holes (`seek` past them), which read back as zeros, the values the CRCs were computed over.

- `dcp_save(folder, ranks)`: Llama-3-70B + AdamW under FSDP2 (every parameter and both moments sharded
  on dim 0 over `ranks`, a 0-d `step` per parameter replicated, the param group flattened), planned by
  torch's DefaultSavePlanner (dedup, global plan, validation), placed in files by FileSystemWriter's
  own prepare_global_plan and _split_by_size_and_type, its `.metadata` written by FileSystemWriter.finish;
  each item is the torch.save zip torch writes for that chunk.
- `hf_sharded(folder, ...)`: Llama-3.1-405B in bf16 split by huggingface_hub's own
  split_torch_state_dict_into_shards (5 GB shards -> 191 files) with safetensors headers laid out as the
  safetensors serializer lays them out, and the index.json transformers writes.
- `zero3_save(folder, ranks)`: a DeepSpeed ZeRO-3 checkpoint tag with `ranks` optimizer and model rank
  files, each torch.save'd with the dict layout DeepSpeed 0.19 writes.
- `torch_zip(path, tensors)`: torch.save of a state dict of `tensors` small tensors (real data).
"""

from __future__ import annotations

import io
import json
import math
import os
from pathlib import Path

HOLE_MIN = 4096  # torch.save writes a storage in one call: a write this large of zeros is data, left as a hole


class _Sink(io.RawIOBase):
    """A file-like target for torch.save that keeps the structure and remembers only the length of data."""

    def __init__(self) -> None:
        self.parts: list[bytes | int] = []
        self.pos = 0

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # type: ignore[override]
        import numpy as np

        view = memoryview(b).cast("B")
        n = len(view)
        # a hole reads back as zeros: only a write of zeros may be one (a pickle over 4 KiB is kept as bytes)
        hole = n >= HOLE_MIN and not np.frombuffer(view, np.uint8).any()
        self.parts.append(n if hole else bytes(view))
        self.pos += n
        return n

    def tell(self) -> int:
        return self.pos

    def seekable(self) -> bool:
        return False


def saved_template(obj) -> list[bytes | int]:
    """torch.save(obj) as [bytes, hole length, bytes...]: written with `write_template`."""
    import torch

    sink = _Sink()
    torch.save(obj, sink)
    merged: list[bytes | int] = []
    for part in sink.parts:
        if isinstance(part, bytes) and merged and isinstance(merged[-1], bytes):
            merged[-1] += part
        else:
            merged.append(part)
    return merged


def template_length(parts: list[bytes | int]) -> int:
    return sum(p if isinstance(p, int) else len(p) for p in parts)


def write_template(f, parts: list[bytes | int]) -> None:
    for part in parts:
        if isinstance(part, int):
            f.seek(part, os.SEEK_CUR)
        else:
            f.write(part)


# ---- Llama shapes (config.json of meta-llama/Meta-Llama-3-70B and Llama-3.1-405B)
LLAMA = {
    "70b": {"layers": 80, "hidden": 8192, "inter": 28672, "kv": 1024, "vocab": 128256},
    "405b": {"layers": 126, "hidden": 16384, "inter": 53248, "kv": 1024, "vocab": 128256},
    # meta-llama/Llama-3.2-1B: 1.24B parameters, lm_head tied to the embedding (tie_word_embeddings)
    "1b": {"layers": 16, "hidden": 2048, "inter": 8192, "kv": 512, "vocab": 128256, "tied": True},
    "tiny": {"layers": 2, "hidden": 16, "inter": 40, "kv": 8, "vocab": 50},  # the tests' multi-rank saves
}


def llama_params(size: str) -> list[tuple[str, tuple[int, ...]]]:
    c = LLAMA[size]
    h, i, kv = c["hidden"], c["inter"], c["kv"]
    out = [("model.embed_tokens.weight", (c["vocab"], h))]
    for n in range(c["layers"]):
        p = f"model.layers.{n}."
        out += [
            (p + "self_attn.q_proj.weight", (h, h)),
            (p + "self_attn.k_proj.weight", (kv, h)),
            (p + "self_attn.v_proj.weight", (kv, h)),
            (p + "self_attn.o_proj.weight", (h, h)),
            (p + "mlp.gate_proj.weight", (i, h)),
            (p + "mlp.up_proj.weight", (i, h)),
            (p + "mlp.down_proj.weight", (h, i)),
            (p + "input_layernorm.weight", (h,)),
            (p + "post_attention_layernorm.weight", (h,)),
        ]
    out += [("model.norm.weight", (h,))] + ([] if c.get("tied") else [("lm_head.weight", (c["vocab"], h))])
    return out


PARAM_GROUP = {"lr": 1e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1, "amsgrad": False,
               "foreach": None, "maximize": False, "capturable": False, "differentiable": False,
               "fused": None, "decoupled_weight_decay": True, "initial_lr": 1e-4}  # fmt: skip


def _rank_items(rank: int, ranks: int, params, zero_size):
    """One rank's save plan as FSDP2 makes it: Shard(0) chunks (torch.chunk sizes) of every weight and both
    moments, a replicated 0-d `step` per parameter, the flattened param group; and planner_data as
    flatten_state_dict makes it. Items are (kind, fqn, offsets, sizes, global size); every object is made
    where _dcp_plans' WriteItems would make it, so that the pickle's memo sees the same sharing either way."""
    import torch

    items, mappings = [], {}
    for fqn, shape in params:
        per = math.ceil(shape[0] / ranks)
        start = min(rank * per, shape[0])
        rows = min(per, shape[0] - start)
        for key, path in ((f"model.{fqn}", ("model", fqn)),
                          (f"optim.state.{fqn}.exp_avg", ("optim", "state", fqn, "exp_avg")),
                          (f"optim.state.{fqn}.exp_avg_sq", ("optim", "state", fqn, "exp_avg_sq"))):  # fmt: skip
            mappings[key] = path
            if rows <= 0:
                continue
            offsets = torch.Size((start,) + (0,) * (len(shape) - 1))
            sizes = torch.Size((rows,) + shape[1:])
            items.append(("shard", key, offsets, sizes, torch.Size(shape)))
        key = f"optim.state.{fqn}.step"
        mappings[key] = ("optim", "state", fqn, "step")
        zero = zero_size()
        items.append(("tensor", key, zero, zero, zero))
    for key, path in [*((f"optim.param_groups.0.{n}", ("optim", "param_groups", 0, n)) for n in [*PARAM_GROUP,
                      "params"]), ("step", ("step",))]:  # fmt: skip
        mappings[key] = path
        items.append(("bytes", key, None, None, None))
    return items, mappings


def _dcp_plans(ranks: int, size: str):
    """Each rank's SavePlan of torch's own WriteItems (see _rank_items)."""
    import torch
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex, TensorProperties
    from torch.distributed.checkpoint.planner import (
        BytesIOWriteData,
        SavePlan,
        TensorWriteData,
        WriteItem,
        WriteItemType,
    )

    params = llama_params(size)
    fp32 = TensorProperties(dtype=torch.float32)
    types = {"shard": WriteItemType.SHARD, "tensor": WriteItemType.TENSOR}
    plans = []
    for rank in range(ranks):
        items, mappings = _rank_items(rank, ranks, params, lambda: torch.Size(()))
        written = []
        for kind, key, offsets, sizes, whole in items:
            if kind == "bytes":
                written.append(WriteItem(MetadataIndex(key), WriteItemType.BYTE_IO,
                                         bytes_io_data=BytesIOWriteData(64)))  # fmt: skip
            else:
                data = TensorWriteData(ChunkStorageMetadata(offsets, sizes), fp32, whole)
                written.append(WriteItem(MetadataIndex(key, offsets), types[kind], tensor_data=data))
        plans.append(SavePlan(written, planner_data=mappings))
    return plans, params


def _bytes_value(key: str, params):
    name = key.rsplit(".", 1)[-1]
    if key == "step":
        return 1000
    return [fqn for fqn, _ in params] if name == "params" else PARAM_GROUP[name]


def dcp_save(folder: Path, ranks: int, size: str = "70b", progress=None, save_id: str | None = None) -> dict[str, int]:
    """Write the save with torch's planner and writer; returns counts (entries, chunks, files, apparent bytes).
    `progress(text)` hears each phase; `save_id` replaces the writer's random uuid (to compare two saves)."""
    import torch
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
    from torch.distributed.checkpoint.filesystem import FileSystemWriter, _split_by_size_and_type, _StorageInfo
    from torch.distributed.checkpoint.planner import WriteItemType
    from torch.distributed.checkpoint.storage import WriteResult

    say = progress or (lambda _text: None)
    folder.mkdir(parents=True, exist_ok=True)
    plans, params = _dcp_plans(ranks, size)
    say("local plans made")
    planner = DefaultSavePlanner()
    global_plan, metadata = planner.create_global_plan(plans)
    say("global plan made")
    writer = FileSystemWriter(str(folder), single_file_per_rank=True, thread_count=1, sync_files=False)
    writer.reset()
    writer.save_id = save_id or writer.save_id
    global_plan = writer.prepare_global_plan(global_plan)
    templates: dict[tuple, list[bytes | int]] = {}
    results = []
    chunks = apparent = 0
    for plan in global_plan:
        plan = planner.finish_plan(plan)
        name = f"{plan.storage_data.prefix}0.distcp"
        out = []
        with open(folder / name, "wb") as f:
            for item in _split_by_size_and_type(1, plan.items)[0]:
                if item.type == WriteItemType.BYTE_IO:
                    buf = io.BytesIO()
                    torch.save(_bytes_value(item.index.fqn, params), buf)
                    parts: list[bytes | int] = [buf.getvalue()]
                else:
                    sizes = tuple(item.tensor_data.chunk.sizes)
                    if sizes not in templates:
                        templates[sizes] = saved_template(torch.zeros(sizes, dtype=torch.float32))
                    parts = templates[sizes]
                    chunks += 1
                offset = f.tell()
                write_template(f, parts)
                length = f.tell() - offset
                out.append(WriteResult(item.index, length, _StorageInfo(name, offset, length)))
            f.truncate()
            apparent += f.tell()
        results.append(out)
        if len(results) % 64 == 0:
            say(f"{len(results)} rank files written")
    writer.finish(metadata, results)
    say(".metadata written")
    return {"entries": len(metadata.state_dict_metadata), "chunks": chunks, "files": len(global_plan),
            "apparent_bytes": apparent, "metadata_bytes": (folder / ".metadata").stat().st_size}  # fmt: skip


def _dedup_owners(rank0_items, ranks: int) -> dict[str, int]:
    """Which rank keeps each replicated item: DefaultSavePlanner's dedup_save_plans, which walks the items in
    order of first appearance (all of rank 0's, replicated ones included, before any other rank's shards)
    and gives each to the plan with the least planned storage so far (the lowest rank among equals),
    counting a tensor at its global size and a bytes item as 1."""
    planned = [0] * ranks
    owners = {}
    for kind, key, _offsets, _sizes, whole in rank0_items:
        weight = 4 * math.prod(whole) if whole is not None else 1  # float32
        if kind == "shard":
            planned[0] += weight
            continue
        owner = min(range(ranks), key=planned.__getitem__)
        planned[owner] += weight
        owners[key] = owner
    return owners


def dcp_save_direct(folder: Path, ranks: int, size: str = "70b", progress=None,
                    save_id: str | None = None) -> dict[str, int]:  # fmt: skip
    """The save dcp_save writes, with `.metadata` built directly from torch's own metadata classes instead of
    through the planner (whose WriteItems and global plan take hours and many GB at 1024 ranks): the same
    dedup, the same order of entries, chunks and storage records, the same objects shared (the pickle's memo
    sees them), then FileSystemWriter.finish's own pickle.dump. tests/bench/test_scale_sims.py proves the
    two byte for byte identical; every item is still the torch.save zip torch writes for it."""
    import pickle
    from collections import ChainMap

    import torch
    from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION, FileSystem, _StorageInfo
    from torch.distributed.checkpoint.metadata import (
        BytesStorageMetadata,
        ChunkStorageMetadata,
        Metadata,
        MetadataIndex,
        StorageMeta,
        TensorProperties,
        TensorStorageMetadata,
    )

    say = progress or (lambda _text: None)
    folder.mkdir(parents=True, exist_ok=True)
    params = llama_params(size)
    fp32 = TensorProperties(dtype=torch.float32)
    owners: dict[str, int] = {}
    md: dict = {}
    storage: dict = {}
    maps = []
    templates: dict[tuple, list[bytes | int]] = {}
    chunks = apparent = 0
    for rank in range(ranks):
        items, mappings = _rank_items(rank, ranks, params, lambda: torch.Size(()))
        maps.append(mappings)
        if rank == 0:
            owners = _dedup_owners(items, ranks)
        name = f"__{rank}_0.distcp"
        with open(folder / name, "wb") as f:
            for kind, key, offsets, sizes, whole in items:
                if kind != "shard" and owners[key] != rank:
                    continue  # dedup: another rank writes it
                if kind == "bytes":
                    md[key] = BytesStorageMetadata()
                    index = MetadataIndex(key)
                    buf = io.BytesIO()
                    torch.save(_bytes_value(key, params), buf)
                    parts: list[bytes | int] = [buf.getvalue()]
                else:
                    chunk = ChunkStorageMetadata(offsets, sizes)
                    entry = md.setdefault(key, TensorStorageMetadata(properties=fp32, size=whole, chunks=[]))
                    index = MetadataIndex(key, offsets, index=len(entry.chunks))
                    entry.chunks.append(chunk)
                    if tuple(sizes) not in templates:
                        templates[tuple(sizes)] = saved_template(torch.zeros(sizes, dtype=torch.float32))
                    parts = templates[tuple(sizes)]
                    chunks += 1
                offset = f.tell()
                write_template(f, parts)
                storage[index] = _StorageInfo(name, offset, f.tell() - offset)
            f.truncate()
            apparent += f.tell()
        if (rank + 1) % 64 == 0:
            say(f"{rank + 1} rank files written")
    metadata = Metadata(md, planner_data=dict(ChainMap(*maps)))  # as DefaultSavePlanner merges them
    metadata.version = CURRENT_DCP_VERSION
    metadata.storage_data = storage
    metadata.storage_meta = StorageMeta(checkpoint_id=FileSystem().init_path(str(folder)),
                                        save_id=save_id or str(__import__("uuid").uuid4()))  # fmt: skip
    with open(folder / ".metadata.tmp", "wb") as f:
        pickle.dump(metadata, f)
    os.replace(folder / ".metadata.tmp", folder / ".metadata")
    say(".metadata written")
    return {"entries": len(md), "chunks": chunks, "files": ranks, "apparent_bytes": apparent,
            "metadata_bytes": (folder / ".metadata").stat().st_size}  # fmt: skip


def hf_sharded(folder: Path, size: str = "405b", max_shard_size: str = "5GB") -> dict[str, int]:
    """A transformers save_pretrained folder of bf16 safetensors shards with real headers, data as holes."""
    import torch
    from huggingface_hub import split_torch_state_dict_into_shards

    folder.mkdir(parents=True, exist_ok=True)
    state = {fqn: torch.empty(shape, dtype=torch.bfloat16, device="meta") for fqn, shape in llama_params(size)}
    split = split_torch_state_dict_into_shards(state, max_shard_size=max_shard_size)
    apparent = 0
    for filename, names in split.filename_to_tensors.items():
        header, offset = {}, 0
        for fqn in names:  # safetensors orders data by dtype alignment, then name: one dtype here
            nbytes = state[fqn].numel() * 2
            header[fqn] = {"dtype": "BF16", "shape": list(state[fqn].shape), "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
        header = {"__metadata__": {"format": "pt"}, **dict(sorted(header.items()))}
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        with open(folder / filename, "wb") as f:
            f.write(len(raw).to_bytes(8, "little") + raw)
            f.truncate(8 + len(raw) + offset)
        apparent += 8 + len(raw) + offset
    index = {"metadata": {"total_size": sum(t.numel() * 2 for t in state.values())},
             "weight_map": split.tensor_to_filename}  # fmt: skip
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    return {"files": len(split.filename_to_tensors), "tensors": len(state), "apparent_bytes": apparent}


def zero3_save(folder: Path, ranks: int, size: str = "70b", step: int = 1000) -> dict[str, int]:
    """`latest` + `global_step{step}/` with ZeRO-3's per-rank optimizer and model state files."""
    import torch

    params = llama_params(size)
    total = sum(math.prod(s) for _, s in params)
    part = math.ceil(total / ranks)
    tag = folder / f"global_step{step}"
    tag.mkdir(parents=True, exist_ok=True)
    flat = torch.zeros(part, dtype=torch.float32)
    optim = {"optimizer_state_dict": {
        "zero_stage": 3, "loss_scaler": None, "dynamic_loss_scale": False, "overflow": False,
        "partition_count": ranks, "ds_version": "0.19.8",
        "optimizer_state_dict": {"state": {0: {"step": torch.tensor(float(step)), "exp_avg": flat,
                                               "exp_avg_sq": flat.clone()}},
                                 "param_groups": [{**PARAM_GROUP, "params": [0]}]},
        "fp32_flat_groups": [flat.clone()]}, "ds_config": {"zero_optimization": {"stage": 3}},
        "ds_version": "0.19.8"}  # fmt: skip
    optim_parts = saved_template(optim)
    del optim, flat
    shapes = {fqn: torch.Size(s) for fqn, s in params}
    model = {"module": None, "buffer_names": [], "optimizer": None, "param_shapes": [shapes],
             "frozen_param_shapes": None, "frozen_param_fragments": None, "lr_scheduler": None,
             "data_sampler": None, "random_ltd": None, "sparse_tensor_module_names": set(), "skipped_steps": 0,
             "global_steps": step, "global_samples": step * 1024, "dp_world_size": ranks, "mp_world_size": 1,
             "ds_config": {"zero_optimization": {"stage": 3}}, "ds_version": "0.19.8"}  # fmt: skip
    model_raw = io.BytesIO()
    torch.save(model, model_raw)
    apparent = 0
    for rank in range(ranks):
        with open(tag / f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt", "wb") as f:
            write_template(f, optim_parts)
            f.truncate()
            apparent += f.tell()
        (tag / f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt").write_bytes(model_raw.getvalue())
        apparent += len(model_raw.getvalue())
    (folder / "latest").write_text(f"global_step{step}")
    return {"files": 2 * ranks, "apparent_bytes": apparent}


def torch_zip(path: Path, tensors: int) -> dict[str, int]:
    """torch.save of a model + AdamW-shaped state dict with `tensors` small tensors (real data)."""
    import torch

    per = max(1, tensors // 3)
    weights = {f"model.layers.{i // 8}.p{i % 8}.weight": torch.randn(4, 4) for i in range(per)}
    state = {i: {"exp_avg": torch.zeros(4, 4), "exp_avg_sq": torch.zeros(4, 4)} for i in range(per)}
    torch.save({"model": weights, "optimizer": {"state": state, "param_groups": [{**PARAM_GROUP,
                "params": list(range(per))}]}, "step": 1000}, path)  # fmt: skip
    return {"tensors": 3 * per, "apparent_bytes": path.stat().st_size}
