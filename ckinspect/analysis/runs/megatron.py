"""Megatron-style: `latest_checkpointed_iteration.txt` names the iteration; `iter_NNNNNNN/` holds one folder per
model-parallel rank, `mp_rank_TT/` (or `mp_rank_TT_PPP/` with pipeline stages), each with `model_optim_rng.pt`
(and `distrib_optim.pt` under the distributed optimizer).

Names follow megatron/training/checkpointing.py (`get_checkpoint_tracker_filename`, `get_checkpoint_name`,
`get_distributed_optimizer_checkpoint_name`). The ranks a folder should have come from the `args` that
rank 0's file records (tensor_model_parallel_size, pipeline_model_parallel_size, use_distributed_optimizer).
"""

from __future__ import annotations

import re
from pathlib import Path

from ckinspect.analysis.layouts import top_mapping
from ckinspect.analysis.runs.model import RunCheckpoint, read_text
from ckinspect.formats.unpickler import Opaque
from ckinspect.io import folders

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ckinspect.analysis.runs.judge import Reader

TRACKER = "latest_checkpointed_iteration.txt"
ITER_FOLDER = re.compile(r"^iter_(\d+)$")
RANK_FOLDER = re.compile(r"^mp_rank_(\d{2})(?:_(\d{3}))?$")
MODEL_FILE = "model_optim_rng.pt"
DIST_OPTIM_FILE = "distrib_optim.pt"


def is_iter_folder(folder: Path, dirs: set[str]) -> bool:
    return bool(ITER_FOLDER.match(folder.name)) and any(RANK_FOLDER.match(d) for d in dirs)


def rank_folder(tp: int, pp: int, pipeline: bool) -> str:
    return f"mp_rank_{tp:02d}_{pp:03d}" if pipeline else f"mp_rank_{tp:02d}"


def iter_checkpoint(folder: Path, dirs: set[str]) -> RunCheckpoint:
    """The checkpoint one iteration folder holds; its records are read when it is judged."""
    iteration = int(ITER_FOLDER.match(folder.name).group(1))  # type: ignore[union-attr]
    ckpt = RunCheckpoint(folder, "megatron", iteration)
    ckpt.defer(lambda reader: read_iteration(folder, dirs, reader, ckpt, iteration))
    return ckpt


def read_iteration(folder: Path, dirs: set[str], reader: Reader, ckpt: RunCheckpoint, iteration: int) -> None:
    present = sorted(d for d in dirs if RANK_FOLDER.match(d))
    pipeline = any(RANK_FOLDER.match(d).group(2) for d in present)  # type: ignore[union-attr]
    rank0 = folder / rank_folder(0, 0, pipeline) / MODEL_FILE
    args = _recorded_args(rank0, reader)
    tp, pp, why = _parallel_sizes(args, present, rank0)
    wanted = [MODEL_FILE] + ([DIST_OPTIM_FILE] if args.get("use_distributed_optimizer") is True else [])
    missing = _rank_parts(ckpt, folder, tp, pp, pipeline or pp > 1, wanted)
    if missing:
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        ckpt.add("MISSING_PARTS", f"{shown} missing ({why})")
    _iterations_agree(ckpt, reader, iteration)


def _recorded_args(rank0: Path, reader: Reader) -> dict[str, Any]:
    """The `args` (an argparse.Namespace) rank 0's file records: the parallel sizes, the optimizer kind."""
    if not folders.is_file(rank0):
        return {}
    raw = (top_mapping(reader.inspect(rank0)) or {}).get("args")
    return raw.fields if isinstance(raw, Opaque) else raw if isinstance(raw, dict) else {}


def _parallel_sizes(args: dict[str, Any], present: list[str], rank0: Path) -> tuple[int, int, str]:
    """(tensor parallel, pipeline parallel, where they come from): the record, else the rank folders present."""
    tp, pp = _int(args.get("tensor_model_parallel_size")), _int(args.get("pipeline_model_parallel_size"))
    if tp is not None:
        pp = pp or 1
        return tp, pp, f"tensor parallel {tp}, pipeline parallel {pp} in {rank0.parent.name}/{MODEL_FILE}"
    if not present:
        return 1, 1, "the highest rank folder present"
    tps = [int(RANK_FOLDER.match(d).group(1)) for d in present]  # type: ignore[union-attr]
    pps = [int(RANK_FOLDER.match(d).group(2) or 0) for d in present]  # type: ignore[union-attr]
    return max(tps) + 1, max(pps) + 1, "the highest rank folder present"


def _rank_parts(ckpt: RunCheckpoint, folder: Path, tp: int, pp: int, pipeline: bool, wanted: list[str]) -> list[str]:
    """Add every rank's files as parts; the names of those missing."""
    missing = []
    for t in range(tp):
        for p in range(pp):
            sub = folder / rank_folder(t, p, pipeline)
            for name in wanted:
                if folders.is_file(sub / name):
                    ckpt.part(sub / name, "model" if name == MODEL_FILE else "optimizer")
                else:
                    missing.append(f"{sub.name}/{name}")
    return missing


def _iterations_agree(ckpt: RunCheckpoint, reader: Reader, iteration: int) -> None:
    for part in ckpt.parts:
        if part.path.name != MODEL_FILE:
            continue
        saved = _int((top_mapping(reader.inspect(part.path)) or {}).get("iteration"))
        if saved is not None and saved != iteration:
            ckpt.add("PARTS_DISAGREE", f"{part.path.parent.name}/{MODEL_FILE} records iteration {saved}, "
                                       f"the folder says {iteration}")  # fmt: skip


def tracker_problem(folder: Path, iterations: set[str]) -> str | None:
    """What is wrong with the tracker file beside `iter_*` folders, if anything."""
    if not folders.is_file(folder / TRACKER):
        return None
    text = read_text(folder / TRACKER)
    if text == "release":
        return None
    if not text or not text.isdigit():
        return f"{TRACKER} does not hold an iteration ({text!r})"
    name = f"iter_{int(text):07d}"
    if name not in iterations:
        return f"{TRACKER} names iteration {int(text)}, but {name}/ is not there"
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
