"""Real-data DCP saves sharded over several ranks, written in one process: each rank's SavePlan of torch's
own WriteItems (its chunks of every tensor), the global plan made by torch's DefaultSavePlanner, files laid
out by FileSystemWriter's prepare_global_plan and _split_by_size_and_type, each item torch.save'd as
FileSystemWriter writes it, `.metadata` written by FileSystemWriter.finish (as bench/scale_sims.dcp_save,
with real values). `torch.distributed.checkpoint.load` reads them back into full tensors: the oracle."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


def cuts(shape: tuple[int, ...], ranks: int, grid: bool) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Each rank's (offsets, sizes): torch.chunk-sized rows of dim 0 (FSDP's Shard(0)); `grid` also halves dim 1
    (a 2-D mesh: Shard(0) x Shard(1)), so that no chunk holds whole rows."""
    if grid and len(shape) >= 2:
        rows, cols = ranks // 2, 2
    else:
        rows, cols = ranks, 1
    out = []
    per_row, per_col = math.ceil(shape[0] / rows), math.ceil(shape[1] / cols) if cols > 1 else 0
    for r in range(rows):
        r0 = min(r * per_row, shape[0])
        nr = min(per_row, shape[0] - r0)
        for c in range(cols):
            if cols == 1:
                out.append(((r0,) + (0,) * (len(shape) - 1), (nr, *shape[1:])))
                continue
            c0 = min(c * per_col, shape[1])
            nc = min(per_col, shape[1] - c0)
            out.append(((r0, c0, *(0,) * (len(shape) - 2)), (nr, nc, *shape[2:])))
    return out


def sharded_save(folder: Path, state: dict[str, Any], ranks: int, grid: bool = False,
                 whole: tuple[str, ...] = (), layout: Callable[[str, tuple[int, ...]], list[Any]] | None = None,
                 empty_shards: bool = False, views: bool = False) -> None:  # fmt: skip
    """Save `state` (fqn -> plain tensor) as `ranks` ranks would: every tensor of 1+ dimensions sharded (see
    cuts), those named in `whole` (and 0-d ones) held by rank 0 alone. `layout(fqn, shape)`, where given, says
    each rank's boxes instead (a list per rank of (offsets, sizes)). `empty_shards`: a rank whose share is
    empty writes it anyway, as a DTensor's does (offset the dimension's size, size 0: torch's planner keeps
    one of those, as it keeps one of any item several ranks write). `views`: each item holds its chunk as a
    view into the whole tensor's storage (torch.save of the narrowed tensor, which FileSystemWriter clones)."""
    import torch
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
    from torch.distributed.checkpoint.filesystem import FileSystemWriter, _split_by_size_and_type, _StorageInfo
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex, TensorProperties
    from torch.distributed.checkpoint.planner import SavePlan, TensorWriteData, WriteItem, WriteItemType
    from torch.distributed.checkpoint.storage import WriteResult

    folder.mkdir(parents=True, exist_ok=True)
    plans = []
    for rank in range(ranks):
        items = []
        for fqn, t in state.items():
            props = TensorProperties(dtype=t.dtype)
            size = torch.Size(t.shape)
            if t.dim() == 0 or fqn in whole:
                if rank == 0:
                    chunk = ChunkStorageMetadata(torch.Size((0,) * t.dim()), size)
                    data = TensorWriteData(chunk, props, size)
                    items.append(WriteItem(MetadataIndex(fqn, chunk.offsets), WriteItemType.TENSOR, tensor_data=data))
                continue
            if layout is not None:
                boxes = layout(fqn, tuple(t.shape))[rank]
            else:
                mine = cuts(tuple(t.shape), ranks, grid)
                per = len(mine) // ranks
                boxes = mine[rank * per : (rank + 1) * per]
            for offsets, sizes in boxes:
                if not math.prod(sizes) and not empty_shards:
                    continue
                chunk = ChunkStorageMetadata(torch.Size(offsets), torch.Size(sizes))
                data = TensorWriteData(chunk, props, size)
                items.append(WriteItem(MetadataIndex(fqn, chunk.offsets), WriteItemType.SHARD, tensor_data=data))
        plans.append(SavePlan(items, planner_data={fqn: (fqn,) for fqn in state}))
    planner = DefaultSavePlanner()
    global_plan, metadata = planner.create_global_plan(plans)
    writer = FileSystemWriter(str(folder), single_file_per_rank=True, thread_count=1, sync_files=False)
    writer.reset()
    global_plan = writer.prepare_global_plan(global_plan)
    results = []
    for plan in global_plan:
        plan = planner.finish_plan(plan)
        name = f"{plan.storage_data.prefix}0.distcp"
        out = []
        with open(folder / name, "wb") as f:
            for item in _split_by_size_and_type(1, plan.items)[0]:
                chunk = item.tensor_data.chunk
                piece = state[item.index.fqn]
                for d, (o, n) in enumerate(zip(chunk.offsets, chunk.sizes, strict=True)):
                    piece = piece.narrow(d, o, n)
                buf = io.BytesIO()
                torch.save(piece if views else piece.clone(), buf)  # as FileSystemWriter: the chunk's own storage
                offset = f.tell()
                f.write(buf.getvalue())
                out.append(
                    WriteResult(item.index, len(buf.getvalue()), _StorageInfo(name, offset, len(buf.getvalue())))
                )
        results.append(out)
    writer.finish(metadata, results)


def loaded(folder: Path, like: dict[str, Any]) -> dict[str, Any]:
    """The save read back by torch.distributed.checkpoint.load into full tensors shaped as `like`."""
    import torch
    import torch.distributed.checkpoint as dcp

    out = {fqn: torch.empty_like(t) for fqn, t in like.items()}
    dcp.load(out, checkpoint_id=str(folder))
    return out
