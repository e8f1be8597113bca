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
  files, each torch.save'd with the dict layout DeepSpeed 0.19 writes; `zero3_engine_save` adds what the
  engine's files also hold (the module's empty parameter placeholders, DeepSpeed's own records).
- `torch_zip(path, tensors)`: torch.save of a state dict of `tensors` small tensors (real data).
"""

from __future__ import annotations

import functools
import io
import json
import math
import os
import pickle
import struct
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


def zero_tensors(shapes: list[tuple[int, ...]], dtype) -> list:
    """Tensors of zeros for saved_template, each its own storage (torch.save writes one storage a tensor, as for
    real weights) but all over ONE anonymous mapping of the largest one's size, which the kernel fills with zeros.

    Not torch.empty: it hands back whatever the allocator has free, and in a process that already built something
    (bench_scale builds every family in one process) that is a freed heap region holding old bytes, which the _Sink
    rightly keeps as data: make_sparse_run's 1B saves took 34 MB and then 269 MB of real blocks a save instead of
    0.8 MB (bench/README.md, bench_scale, the runs family). One mapping, because reading a page of it (the _Sink's
    zero check) makes it resident on this machine: the largest tensor's size, not the sum of all."""
    import mmap

    import torch

    itemsize = torch.empty((), dtype=dtype).element_size()
    largest = max((math.prod(shape) for shape in shapes), default=0) * itemsize
    pages = mmap.mmap(-1, max(largest, 1))
    return [torch.frombuffer(pages, dtype=dtype, count=math.prod(shape)).view(shape) if math.prod(shape)
            else torch.zeros(shape, dtype=dtype) for shape in shapes]  # fmt: skip


def real_bytes(parts: list[bytes | int]) -> int:
    """How many bytes of a saved_template are written as data (the rest are holes)."""
    return sum(len(p) for p in parts if isinstance(p, bytes))


def template_length(parts: list[bytes | int]) -> int:
    return sum(p if isinstance(p, int) else len(p) for p in parts)


class SparseWriter:
    """write_template's bytes through os.pwrite: the bytes between two holes in one call (an item's last bytes
    and the next item's first), no seek (a buffered file's seek is a flush and a syscall per part)."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.pos = self.start = 0
        self.pending = bytearray()

    def write(self, parts: list[bytes | int]) -> None:
        for part in parts:
            if isinstance(part, int):
                self.flush()
                self.pos += part
            else:
                if not self.pending:
                    self.start = self.pos
                self.pending += part
                self.pos += len(part)
        if len(self.pending) > 1 << 20:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            os.pwrite(self.fd, self.pending, self.start)
            self.pending.clear()

    def close(self) -> int:
        """Flush, cut the file at the end of what was written (holes included) and close; returns its length."""
        self.flush()
        os.ftruncate(self.fd, self.pos)
        os.close(self.fd)
        return self.pos


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


def _rank_items(rank: int, ranks: int, params, zero_size, shard_size=None):
    """One rank's save plan as FSDP2 makes it: Shard(0) chunks (torch.chunk sizes) of every weight and both
    moments, a replicated 0-d `step` per parameter, the flattened param group; and planner_data as
    flatten_state_dict makes it. Items are (kind, fqn, offsets, sizes, global size); every object is made
    where _dcp_plans' WriteItems would make it, so that the pickle's memo sees the same sharing either way.
    `shard_size`: what makes a shard's offsets and sizes (torch.Size; dcp_save_stream passes tuple where only
    their integers are written)."""
    import torch

    size_of = shard_size or torch.Size
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
            offsets = size_of((start,) + (0,) * (len(shape) - 1))
            sizes = size_of((rows,) + shape[1:])
            items.append(("shard", key, offsets, sizes, size_of(shape)))
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
    sees them), then FileSystemWriter.finish's own pickle.dump. tests/formats/test_dcp_sharded.py proves the
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


def zero3_engine_save(folder: Path, ranks: int, size: str = "70b", step: int = 1000) -> dict[str, int]:
    """zero3_save as DeepSpeed 0.19.8's engine writes it under ZeRO-3 with bf16 (the keys and objects a real
    2-rank run's files hold): each model-states file holds `module`, the rank's parameters as the empty bf16
    placeholders ZeRO-3 leaves in the module (one storage each), beside every key the engine records, and is
    torch.save'd to its own path (its archive named after the file, as the engine's save is); each optimizer
    file names DeepSpeed's ZeroStageEnum and LossScaler, as real ones do (DeepSpeed must be installed)."""
    import collections

    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import torch
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum

    params = llama_params(size)
    part = math.ceil(sum(math.prod(s) for _, s in params) / ranks)
    tag = folder / f"global_step{step}"
    tag.mkdir(parents=True, exist_ok=True)
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
              "zero_optimization": {"stage": 3}}  # fmt: skip
    flat = torch.zeros(part, dtype=torch.float32)
    optim = {"optimizer_state_dict": {
        "zero_stage": ZeroStageEnum.weights, "loss_scaler": LossScaler(1.0), "dynamic_loss_scale": False,
        "overflow": False, "partition_count": ranks,
        "optimizer_state_dict": {"state": {0: {"step": torch.tensor(float(step)), "exp_avg": flat,
                                               "exp_avg_sq": flat.clone()}},
                                 "param_groups": [{**PARAM_GROUP, "params": [0]}]},
        "fp32_flat_groups": [flat.clone()]}, "ds_config": config, "ds_version": "0.19.8"}  # fmt: skip
    optim_parts = saved_template(optim)
    del optim, flat
    model = {"module": collections.OrderedDict((fqn, torch.empty(0, dtype=torch.bfloat16)) for fqn, _ in params),
             "buffer_names": [], "optimizer": None,
             "param_shapes": [collections.OrderedDict((fqn, torch.Size(s)) for fqn, s in params)],
             "frozen_param_shapes": collections.OrderedDict(), "shared_params": {},
             "frozen_param_fragments": collections.OrderedDict(), "lr_scheduler": None, "data_sampler": None,
             "random_ltd": None, "skipped_steps": 0, "global_steps": step, "global_samples": step * 1024,
             "dp_world_size": ranks, "mp_world_size": 1,
             "checkpoint_parallel_dimensions": {"pp_degree": 1, "tp_degree": 1}, "ds_config": config,
             "ds_version": "0.19.8"}  # fmt: skip
    apparent = 0
    for rank in range(ranks):
        with open(tag / f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt", "wb") as f:
            write_template(f, optim_parts)
            f.truncate()
            apparent += f.tell()
        path = tag / f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt"
        torch.save(model, path)
        apparent += path.stat().st_size
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


# ---- the streaming builder: the same save without holding its `.metadata` in memory (the 405B over 2048 ranks)

_MEMO = pickle.MEMOIZE
_TUPLE_CODES = {1: pickle.TUPLE1, 2: pickle.TUPLE2, 3: pickle.TUPLE3}


@functools.lru_cache(maxsize=1 << 16)
def _int_code(value: int) -> bytes:
    """What pickle (protocol 4, C and Python alike) writes for an int."""
    if 0 <= value <= 0xFF:
        return pickle.BININT1 + bytes((value,))
    if 0 <= value <= 0xFFFF:
        return pickle.BININT2 + value.to_bytes(2, "little")
    if -0x80000000 <= value <= 0x7FFFFFFF:
        return pickle.BININT + struct.pack("<i", value)
    encoded = pickle.encode_long(value)
    return pickle.LONG1 + bytes((len(encoded),)) + encoded if len(encoded) < 256 else pickle.LONG4 + struct.pack(
        "<i", len(encoded)) + encoded  # fmt: skip


def _str_code(text: str) -> bytes:
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) <= 0xFF:
        return pickle.SHORT_BINUNICODE + bytes((len(encoded),)) + encoded
    return pickle.BINUNICODE + struct.pack("<I", len(encoded)) + encoded


_NEWOBJ_STATE = pickle.EMPTY_TUPLE + pickle.NEWOBJ + _MEMO + pickle.EMPTY_DICT + _MEMO + pickle.MARK


def _size_end(dims: int) -> bytes:
    """After a Size's integers: its tuple, the reduce's args tuple, the REDUCE, each memoized."""
    return _TUPLE_CODES[dims] + _MEMO + pickle.TUPLE1 + _MEMO + pickle.REDUCE + _MEMO


class _CPickler(pickle._Pickler):  # type: ignore[name-defined]
    """pickle's own pure-Python Pickler at protocol 4, made to write what CPython's C pickler (the `pickle.dump` of
    FileSystemWriter.finish) writes: the same frames (a frame is committed when a save() starts at 64 KiB or more, in
    both), and C's batches of an exact dict or list (a dict's full last batch is followed by an empty MARK SETITEMS, a
    list's last batch of one is MARK x APPENDS, where the Python pickler writes neither). Its memo numbers objects by
    a counter, so that an object no later opcode refers to can take its number (`forget`) without being kept."""

    dispatch = pickle._Pickler.dispatch.copy()  # type: ignore[attr-defined]

    def __init__(self, file) -> None:
        super().__init__(file, protocol=4)
        self.count = 0

    def memoize(self, obj) -> None:
        assert id(obj) not in self.memo
        self.write(_MEMO)
        self.memo[id(obj)] = self.count, obj
        self.count += 1

    def forget(self) -> bytes:
        """MEMOIZE for an object nothing refers to again: numbered as the C pickler numbers it, never kept."""
        self.count += 1
        return _MEMO

    def boundary(self) -> None:
        """Where a save() starts: the frame is committed there once it holds 64 KiB."""
        self.framer.commit_frame()

    def ref(self, obj) -> bytes | None:
        """BINGET/LONG_BINGET of an object already written, else None."""
        hit = self.memo.get(id(obj))
        return None if hit is None else self.get(hit[0])

    def room(self, size: int) -> bool:
        """True when `size` more bytes cannot reach a frame boundary (no save() inside them can commit a frame)."""
        return self.framer.current_frame.tell() + size < self.framer._FRAME_SIZE_TARGET

    def save_exact_dict(self, obj) -> None:
        self.write(pickle.EMPTY_DICT)
        self.memoize(obj)
        if obj:
            self.dict_items(len(obj), obj.items())

    def dict_items(self, count: int, pairs, save_pair=None) -> None:
        """batch_dict_exact over `count` pairs: one pair is SETITEM; else MARK ... SETITEMS per 1000, and after a
        full last batch an empty one. `save_pair(pair)` writes a key and its value (default: save both)."""
        save_pair = save_pair or self._save_pair
        if count == 1:
            (pair,) = pairs
            save_pair(pair)
            self.write(pickle.SETITEM)
            return
        pairs = iter(pairs)
        done = 0
        while True:
            self.write(pickle.MARK)
            n = 0
            for pair in pairs:
                save_pair(pair)
                n += 1
                if n == 1000:
                    break
            self.write(pickle.SETITEMS)
            done += n
            if n < 1000:
                break
        assert done == count, (done, count)

    def _save_pair(self, pair) -> None:
        self.save(pair[0])
        self.save(pair[1])

    def save_exact_list(self, obj) -> None:
        self.write(pickle.EMPTY_LIST)
        self.memoize(obj)
        self.list_items(len(obj), obj, self.save)

    def list_items(self, count: int, items, save) -> None:
        """batch_list_exact: one item is APPEND; else MARK ... APPENDS per 1000 (a last batch of one included)."""
        if count == 0:
            return
        if count == 1:
            (item,) = items
            save(item)
            self.write(pickle.APPEND)
            return
        items = iter(items)
        left = count
        while left:
            self.write(pickle.MARK)
            for _ in range(min(1000, left)):
                save(next(items))
            left -= min(1000, left)
            self.write(pickle.APPENDS)

    dispatch[dict] = save_exact_dict
    dispatch[list] = save_exact_list


class _MetadataStream:
    """Writes DCP's `.metadata` pickle for dcp_save_stream as FileSystemWriter.finish's pickle.dump writes it for
    dcp_save_direct's Metadata, holding only the objects a later opcode refers to (the classes, the field names, the
    entries' keys and sizes, the step tensors' shapes, the files' names): each chunk of a sharded tensor and each of
    its storage records is written from its integers, its objects numbered (forget) and never made."""

    def __init__(self, file) -> None:
        import torch
        from torch.distributed.checkpoint.filesystem import _StorageInfo
        from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex, TensorStorageMetadata

        self.p = _CPickler(file)
        self.torch = torch
        self.classes = (ChunkStorageMetadata, MetadataIndex, _StorageInfo, TensorStorageMetadata, torch.Size)
        size = torch.Size((1,))
        # the field names as every instance holds them (the same interned strings the pickler memoizes)
        self.chunk_keys = tuple(ChunkStorageMetadata(size, size).__dict__)
        self.index_keys = tuple(MetadataIndex("x", size, 0).__dict__)
        self.info_keys = tuple(_StorageInfo("x", 0, 0).__getstate__())
        self.entry_keys = tuple(TensorStorageMetadata(None, size, []).__dict__)  # type: ignore[arg-type]
        self.chunk_known: list[bytes] | None = None
        self.record_known: list[bytes] | None = None
        self.size_codes: dict[tuple[int, ...], list[bytes]] = {}
        self.chunk_tails: dict[tuple, bytes] = {}
        self.record_tails: dict[tuple, bytes] = {}

    def _known(self, objs) -> list[bytes] | None:
        """The BINGETs of `objs`, or None while one of them has not been written yet."""
        out = []
        for obj in objs:
            code = self.p.ref(obj)
            if code is None:
                return None
            out.append(code)
        return out

    def _size(self, get_size: bytes, dims) -> list[bytes]:
        """save(torch.Size(dims)) for a Size nothing refers to again: REDUCE of (Size, (tuple,)), each save() a
        segment (a possible frame boundary before it)."""
        self.p.count += 3  # the tuple, the args tuple and the Size are memoized
        segs = self.size_codes.get(dims)
        if segs is None:
            segs = [b"", get_size, b"", b""]  # save(Size), save(Size class), save(args), save(tuple)
            segs += [_int_code(d) for d in dims]
            segs[-1] += _TUPLE_CODES[len(dims)] + _MEMO + pickle.TUPLE1 + _MEMO + pickle.REDUCE + _MEMO
            if len(self.size_codes) < 1 << 16:
                self.size_codes[dims] = segs
        return segs

    def _emit(self, segs: list[bytes]) -> None:
        p = self.p
        if p.room(sum(map(len, segs))):
            p.framer.current_frame.write(b"".join(segs))
            return
        for seg in segs:
            p.boundary()
            p.framer.current_frame.write(seg)

    def chunk(self, offsets: tuple[int, ...], sizes: tuple[int, ...]) -> None:
        """save(ChunkStorageMetadata(Size(offsets), Size(sizes))) for a chunk nothing refers to again."""
        chunk_cls, size_cls = self.classes[0], self.classes[4]
        known = self.chunk_known or self._known((chunk_cls, self.chunk_keys[0], self.chunk_keys[1], size_cls))
        self.chunk_known = known
        if known is None:  # the first chunk: its class and field names are written here, and kept
            torch = self.torch
            self.p.save(chunk_cls(torch.Size(offsets), torch.Size(sizes)))
            return
        get_cls, get_offsets, get_sizes, get_size = known
        p = self.p
        # the same bytes in one piece when no frame can end inside them (a chunk's 8 objects are memoized)
        tail = self.chunk_tails.get((offsets[1:], sizes))
        if tail is None:
            tail = self.chunk_tails[(offsets[1:], sizes)] = (
                b"".join(map(_int_code, offsets[1:])) + _size_end(len(offsets)) + get_sizes + get_size
                + b"".join(map(_int_code, sizes)) + _size_end(len(sizes)) + pickle.SETITEMS + pickle.BUILD)  # fmt: skip
        blob = get_cls + _NEWOBJ_STATE + get_offsets + get_size + _int_code(offsets[0]) + tail
        if p.room(len(blob)):
            p.count += 8
            p.framer.current_frame.write(blob)
            return
        segs = [b"", get_cls, pickle.EMPTY_TUPLE + pickle.NEWOBJ + p.forget()]
        segs.append(pickle.EMPTY_DICT + p.forget() + pickle.MARK)
        segs.append(get_offsets)
        segs += self._size(get_size, offsets)
        segs.append(get_sizes)
        segs += self._size(get_size, sizes)
        segs[-1] += pickle.SETITEMS + pickle.BUILD
        self._emit(segs)

    def sharded_entry(self, whole, properties, chunks) -> None:
        """save(TensorStorageMetadata(properties, whole, [chunks])): `whole` (a torch.Size) and `properties` are
        objects, the chunks (offsets, sizes) integers."""
        p = self.p
        p.boundary()
        p.save(self.classes[3])
        p.save(())
        p.write(pickle.NEWOBJ + p.forget())
        p.boundary()
        p.write(pickle.EMPTY_DICT + p.forget() + pickle.MARK)
        keys = self.entry_keys
        p.save(keys[0])
        p.save(properties)
        p.save(keys[1])
        p.save(whole)
        p.save(keys[2])
        p.boundary()
        p.write(pickle.EMPTY_LIST + p.forget())
        p.list_items(len(chunks), chunks, lambda c: self.chunk(*c))
        p.write(pickle.SETITEMS + pickle.BUILD)

    def record(self, fqn: str, index: int, offsets: tuple[int, ...], path: str, offset: int, length: int) -> None:
        """One storage_data pair, MetadataIndex(fqn, Size(offsets), index) -> _StorageInfo(path, offset, length), for
        a chunk of a sharded tensor. `fqn` is the key object (written before, or written here and never again)."""
        _, index_cls, info_cls, _, size_cls = self.classes
        f_fqn, f_index, f_offset = self.index_keys
        f_path, f_at, f_length = self.info_keys
        known = self.record_known or self._known((index_cls, info_cls, size_cls, f_fqn, f_index, f_offset, f_path,
                                                   f_at, f_length))  # fmt: skip
        self.record_known = known
        get_path = self.p.ref(path)
        if known is None or get_path is None:  # a file's first record: its name is written here (and the classes)
            from torch.distributed.checkpoint.filesystem import _StorageInfo
            from torch.distributed.checkpoint.metadata import MetadataIndex

            self.p.save(MetadataIndex(fqn, offsets, index))
            self.p.save(_StorageInfo(path, offset, length))
            return
        get_index, get_info, get_size, g_fqn, g_index, g_offset, g_path, g_at, g_length = known
        p = self.p
        get_fqn = p.ref(fqn)
        fresh = get_fqn is None
        if fresh:
            get_fqn = _str_code(fqn) + _MEMO
        # the same bytes in one piece when no frame can end inside them (7 objects memoized, 8 with a new fqn)
        tail = self.record_tails.get(offsets[1:])
        if tail is None:
            ints = b"".join(map(_int_code, offsets[1:]))
            tail = ints + _size_end(len(offsets)) + pickle.SETITEMS + pickle.BUILD + get_info + _NEWOBJ_STATE + g_path
            self.record_tails[offsets[1:]] = tail
        blob = b"".join((get_index, _NEWOBJ_STATE, g_fqn, get_fqn, g_index, _int_code(index), g_offset, get_size,
                         _int_code(offsets[0]), tail, get_path, g_at, _int_code(offset), g_length, _int_code(length),
                         pickle.SETITEMS + pickle.BUILD))  # fmt: skip
        if p.room(len(blob)):
            p.count += 7 + fresh
            p.framer.current_frame.write(blob)
            return
        if fresh:
            p.count += 1
        segs = [b"", get_index, pickle.EMPTY_TUPLE + pickle.NEWOBJ + p.forget()]
        segs.append(pickle.EMPTY_DICT + p.forget() + pickle.MARK)
        segs += [g_fqn, get_fqn, g_index, _int_code(index), g_offset]
        segs += self._size(get_size, offsets)
        segs[-1] += pickle.SETITEMS + pickle.BUILD
        segs += [b"", get_info, pickle.EMPTY_TUPLE + pickle.NEWOBJ + p.forget()]
        segs.append(pickle.EMPTY_DICT + p.forget() + pickle.MARK)
        segs += [
            g_path,
            get_path,
            g_at,
            _int_code(offset),
            g_length,
            _int_code(length) + pickle.SETITEMS + pickle.BUILD,
        ]
        self._emit(segs)


def _extras(items, owners: dict[str, int], rank: int):
    """The replicated items (step tensors, bytes) that dedup gives to `rank`, in item order."""
    return [item for item in items if item[0] != "shard" and owners[item[1]] == rank]


def _chunk_count(rows: int, ranks: int) -> int:
    """How many ranks hold a chunk of a dim 0 of `rows` (torch.chunk: ceil-sized chunks, the last ones empty)."""
    return math.ceil(rows / math.ceil(rows / ranks))


def _chunk_of(shape: tuple[int, ...], rank: int, ranks: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """FSDP2's Shard(0) chunk of `shape` on `rank` (torch.chunk sizes), as _rank_items makes it."""
    per = math.ceil(shape[0] / ranks)
    start = min(rank * per, shape[0])
    rows = min(per, shape[0] - start)
    if rows <= 0:
        return None
    return (start,) + (0,) * (len(shape) - 1), (rows,) + tuple(shape[1:])


def dcp_save_stream(folder: Path, ranks: int, size: str = "405b", progress=None,
                    save_id: str | None = None) -> dict[str, int]:  # fmt: skip
    """The save dcp_save_direct writes (and so dcp_save: torch's planner and FileSystemWriter), byte for byte, in
    memory that does not grow with the chunks: each rank file is written as dcp_save_direct writes it, and the
    `.metadata` pickle is streamed as the files are written by _MetadataStream instead of built whole and
    pickle.dump'ed (at 2048 ranks of the 405B the Metadata's ~7 million chunks and records would need ~16 GB). The
    objects the pickle refers to more than once are made as dcp_save_direct makes them: rank 0's items and mappings,
    the dedup owners' keys, the last rank's keys (which dict(ChainMap(...)) keeps as planner_data's keys).
    prove_same and tests/formats/test_dcp_sharded.py compare the two folders byte for byte."""
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
    groups = (("model.", ""), ("optim.state.", ".exp_avg"), ("optim.state.", ".exp_avg_sq"))
    shapes = {f"{group}{fqn}{tail}": shape for fqn, shape in params for group, tail in groups}
    fp32 = TensorProperties(dtype=torch.float32)

    def zero_size():
        return torch.Size(())

    def items_of(rank: int):  # a shard's offsets and sizes as tuples: only their integers are written
        return _rank_items(rank, ranks, params, zero_size, tuple)

    # the ranks whose objects the pickle refers to again: rank 0's (md's keys and sizes, planner_data's values)
    # and the last rank's (planner_data's keys)
    made = {0: _rank_items(0, ranks, params, zero_size)}
    made.setdefault(ranks - 1, items_of(ranks - 1))
    kept = {(rank, item[1]): item for rank, (items, _) in made.items() for item in items}
    owners = _dedup_owners(made[0][0], ranks)
    # the entries in the order dcp_save_direct's md meets them: rank 0's items, then each owner's replicated ones
    entries = [item for item in made[0][0] if item[0] == "shard" or owners[item[1]] == 0]
    for rank in sorted({o for o in owners.values() if o}):
        extras = [kept.get((rank, item[1]), item) for item in _extras(items_of(rank)[0], owners, rank)]
        kept.update(((rank, item[1]), item) for item in extras)  # the owner's key is its entry's key
        entries += extras
    steps: dict[str, torch.Size] = {}  # a step tensor's 0-d Size: its entry's size, its chunk's and its index's offset

    def entry(item):
        kind, key, offsets, sizes, whole = item
        if kind == "shard":
            shape = shapes[key]
            return key, ("shard", whole, [_chunk_of(shape, r, ranks) for r in range(_chunk_count(shape[0], ranks))])
        if kind == "tensor":
            steps[key] = offsets
            return key, TensorStorageMetadata(
                properties=fp32, size=whole, chunks=[ChunkStorageMetadata(offsets, sizes)]
            )
        return key, BytesStorageMetadata()

    tmp = folder / ".metadata.tmp"
    counts = {"chunks": 0, "apparent_bytes": 0}
    with open(tmp, "wb") as out:
        stream = _MetadataStream(out)
        p = stream.p

        def save_entry(pair) -> None:
            p.save(pair[0])
            if isinstance(pair[1], tuple):
                stream.sharded_entry(pair[1][1], fp32, pair[1][2])
            else:
                p.save(pair[1])

        def records():
            """Each rank file written as dcp_save_direct writes it, and each item's storage record as it goes."""
            templates: dict[tuple, list[bytes | int]] = {}
            for rank in range(ranks):
                name = f"__{rank}_0.distcp"
                f = SparseWriter(folder / name)
                for item in (made[rank] if rank in made else items_of(rank))[0]:
                    kind, key = item[0], item[1]
                    if kind != "shard" and owners[key] != rank:
                        continue  # dedup: another rank writes it
                    kind, key, offsets, sizes, _whole = kept.get((rank, key), item)
                    if kind == "bytes":
                        buf = io.BytesIO()
                        torch.save(_bytes_value(key, params), buf)
                        parts: list[bytes | int] = [buf.getvalue()]
                    else:
                        if tuple(sizes) not in templates:
                            templates[tuple(sizes)] = saved_template(torch.zeros(sizes, dtype=torch.float32))
                        parts = templates[tuple(sizes)]
                        counts["chunks"] += 1
                    offset = f.pos
                    f.write(parts)
                    yield kind, key, rank, offsets, name, offset, f.pos - offset
                counts["apparent_bytes"] += f.close()
                if (rank + 1) % 64 == 0:
                    say(f"{rank + 1} rank files written")

        def save_record(record) -> None:
            kind, key, rank, offsets, name, offset, length = record
            if kind == "shard":
                stream.record(key, rank, tuple(offsets), name, offset, length)
                return
            p.save(MetadataIndex(key, steps[key], index=0) if kind == "tensor" else MetadataIndex(key))
            p.save(_StorageInfo(name, offset, length))

        # pickle.dump(metadata): Metadata's reduce (NEWOBJ, its __dict__ as state), its fields in order
        p.write(pickle.PROTO + bytes((4,)))
        p.framer.start_framing()
        fields = tuple(Metadata({}).__dict__)
        p.boundary()
        p.save(Metadata)
        p.save(())
        p.write(pickle.NEWOBJ + p.forget())
        p.boundary()
        p.write(pickle.EMPTY_DICT + p.forget() + pickle.MARK)
        p.save(fields[0])  # state_dict_metadata
        p.boundary()
        p.write(pickle.EMPTY_DICT + p.forget())
        p.dict_items(len(entries), map(entry, entries), save_entry)
        say("state_dict_metadata written")
        p.save(fields[1])  # planner_data = dict(ChainMap(*maps)): the last rank's keys, rank 0's values
        p.save({key: made[0][1][key] for key in made[ranks - 1][1]})
        p.save(fields[2])  # storage_data, rank by rank as the files are written
        p.boundary()
        p.write(pickle.EMPTY_DICT + p.forget())
        total = sum(_chunk_count(shapes[item[1]][0], ranks) if item[0] == "shard" else 1 for item in entries)
        p.dict_items(total, records(), save_record)
        p.save(fields[3])
        p.save(StorageMeta(checkpoint_id=FileSystem().init_path(str(folder)),
                           save_id=save_id or str(__import__("uuid").uuid4())))  # fmt: skip
        p.save(fields[4])
        p.save(CURRENT_DCP_VERSION)
        p.write(pickle.SETITEMS + pickle.BUILD + pickle.STOP)
        p.framer.end_framing()
    os.replace(tmp, folder / ".metadata")
    say(".metadata written")
    return {"entries": len(entries), **counts, "files": ranks,
            "metadata_bytes": (folder / ".metadata").stat().st_size}  # fmt: skip


def _data_extents(path: Path) -> list[tuple[int, int]]:
    """The file's data extents (SEEK_DATA/SEEK_HOLE): everything outside them reads back as zeros."""
    out = []
    with open(path, "rb") as f:
        end = os.fstat(f.fileno()).st_size
        at = 0
        while at < end:
            try:
                start = os.lseek(f.fileno(), at, os.SEEK_DATA)
            except OSError:  # ENXIO: only a hole is left
                break
            at = os.lseek(f.fileno(), start, os.SEEK_HOLE)
            out.append((start, at))
    return out


def same_bytes(a: Path, b: Path) -> bool:
    """True when two (sparse) files read back byte for byte the same: equal lengths, and equal bytes over the union
    of both files' data extents (outside it both read zeros), read without ever reading their holes."""
    if a.stat().st_size != b.stat().st_size:
        return False
    spans = sorted(_data_extents(a) + _data_extents(b))
    with open(a, "rb") as fa, open(b, "rb") as fb:
        at = 0
        for start, end in spans:
            start = max(start, at)
            while start < end:
                n = min(end - start, 1 << 24)
                fa.seek(start)
                fb.seek(start)
                if fa.read(n) != fb.read(n):
                    return False
                start += n
            at = max(at, end)
    return True


def prove_same(a: Path, b: Path) -> int:
    """Compare two save folders file by file (same names, same bytes); returns the number of files compared and
    raises AssertionError naming the first that differs."""
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir()), "the folders hold different files"
    for name in names:
        assert same_bytes(a / name, b / name), f"{name} differs"
    return len(names)
