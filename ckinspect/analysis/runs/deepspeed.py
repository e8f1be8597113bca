"""DeepSpeed: `latest` names a tag folder (`global_stepN/`) holding `mp_rank_XX_model_states.pt` and, under
ZeRO, one `[bf16_]zero_pp_rank_D_mp_rank_XX_optim_states.pt` per data-parallel rank.

The names follow DeepSpeed's engine (`_get_ckpt_name`, `_get_zero_ckpt_name`, `_get_rank_zero_ckpt_name`
in deepspeed/runtime/engine.py) and the keys its model-states file records (`dp_world_size`,
`mp_world_size`, `ds_version`, `global_steps`, `ds_config`); the ZeRO file records `partition_count`
inside `optimizer_state_dict`. The parts a tag should have come from those records, never from a guess.
"""

from __future__ import annotations

import re
from pathlib import Path

from ckinspect.analysis.layouts import top_mapping
from ckinspect.analysis.runs.model import RunCheckpoint, read_text, step_in_name
from ckinspect.io import folders

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from ckinspect.analysis.runs.judge import Reader

LATEST = "latest"  # deepspeed/runtime/engine.py writes the tag's name here after every rank has saved
MODEL_STATES = re.compile(r"^(?:zero_pp_rank_(?P<dp>\d+)_)?mp_rank_(?P<mp>\d+)_model_states\.pt$")
OPTIM_STATES = re.compile(r"^(?P<bf16>bf16_)?zero_pp_rank_(?P<dp>\d+)_mp_rank_(?P<mp>\d+)_optim_states\.pt$")
DEFAULT_TAG = re.compile(r"^global_step(\d+)$")


def is_tag_folder(names: set[str]) -> bool:
    return any(MODEL_STATES.match(n) or OPTIM_STATES.match(n) for n in names)


def model_states_name(mp: int, dp: int | None) -> str:
    return f"mp_rank_{mp:02d}_model_states.pt" if dp is None else f"zero_pp_rank_{dp}_mp_rank_{mp:02d}_model_states.pt"


def optim_states_name(dp: int, mp: int, bf16: bool) -> str:
    return f"{'bf16_' if bf16 else ''}zero_pp_rank_{dp}_mp_rank_{mp:02d}_optim_states.pt"


def tag_checkpoint(folder: Path) -> RunCheckpoint:
    """The checkpoint one tag folder holds; its records are read when it is judged."""
    ckpt = RunCheckpoint(folder, "deepspeed", step_in_name(folder.name))
    ckpt.defer(lambda reader: read_tag(folder, reader, ckpt, enclosed=False))
    return ckpt


def read_tag(folder: Path, reader: Reader, ckpt: RunCheckpoint, enclosed: bool) -> None:
    """Add a tag's parts and what its records say to `ckpt` (the tag's own, or an HF checkpoint around it)."""
    names = {e.name for e in folders.entries(folder) if not e.is_dir}
    where = f"{folder.name}/" if enclosed else ""
    model_files = sorted(n for n in names if MODEL_STATES.match(n))
    optim_files = sorted(n for n in names if OPTIM_STATES.match(n))
    rank0 = next((n for n in (model_states_name(0, None), model_states_name(0, 0)) if n in names), None)
    record: Mapping[str, Any] = {}
    if rank0 is None:
        ckpt.add("MISSING_PARTS", f"{where}{model_states_name(0, None)} is missing: DeepSpeed's record of the "
                                  "world sizes, the step and the model")  # fmt: skip
    else:
        top = top_mapping(reader.inspect(folder / rank0))
        record = top if top is not None else {}
    dp_world = _int(record.get("dp_world_size"))
    mp_world = _int(record.get("mp_world_size")) or 1
    config = _dict(record.get("ds_config"))
    stage = _int(_dict(config.get("zero_optimization")).get("stage"))
    if stage is None:
        stage = 3 if any(MODEL_STATES.match(n).group("dp") for n in model_files) else 1 if optim_files else 0  # type: ignore[union-attr]
    bf16 = any(OPTIM_STATES.match(n).group("bf16") for n in optim_files) or (  # type: ignore[union-attr]
        bool(_dict(config.get("bf16")).get("enabled")) and not optim_files
    )
    if dp_world is None:  # no record: the files present are all there is to go on
        ranks = [int(OPTIM_STATES.match(n).group("dp")) for n in optim_files]  # type: ignore[union-attr]
        dp_world = max(ranks) + 1 if ranks else 1
        why = "the highest rank file present"
    else:
        why = f"dp world size {dp_world} in {rank0}"

    expected_model = [model_states_name(m, d if stage == 3 else None) for m in range(mp_world)
                      for d in (range(dp_world) if stage == 3 else [None])]  # fmt: skip
    expected_optim = [optim_states_name(d, m, bf16) for m in range(mp_world) for d in range(dp_world)] if stage else []
    for name in expected_model:
        if name in names:
            ckpt.part(folder / name, "model")
    for name in expected_optim:
        if name in names:
            ckpt.part(folder / name, "optimizer")
    missing = [n for n in expected_model + expected_optim if n not in names and n != model_states_name(0, None)]
    if missing:
        ckpt.add("MISSING_PARTS", f"{where}{_list(missing)} missing ({why}, ZeRO stage {stage})")
    extra = sorted(set(model_files + optim_files) - set(expected_model + expected_optim))
    if extra and record:
        ckpt.add("PARTS_DISAGREE", f"{where}{_list(extra)} beyond what {rank0} records ({why}, mp world size "
                                   f"{mp_world}, ZeRO stage {stage}): files of another save?")  # fmt: skip

    version = record.get("ds_version")
    steps = _int(record.get("global_steps"))
    for name in expected_optim:
        if name in names and record:
            _agree(ckpt, folder / name, reader, dp_world, version, rank0 or "", where)
    tag_step = DEFAULT_TAG.match(folder.name)
    if steps is not None and tag_step and int(tag_step.group(1)) != steps:
        ckpt.add("PARTS_DISAGREE", f"{where}tag {folder.name} but {rank0} records global_steps {steps}")
    if not enclosed and steps is not None:
        ckpt.step = steps
    if isinstance(version, str):
        ckpt.notes.append(f"DeepSpeed {version}, dp world size {dp_world}, ZeRO stage {stage}")


def _agree(
    ckpt: RunCheckpoint, path: Path, reader: Reader, dp_world: int, version: Any, rank0: str, where: str
) -> None:
    """A ZeRO rank file must have been written by the same save: same DeepSpeed, same partitioning."""
    top = top_mapping(reader.inspect(path))
    if top is None:
        return  # unreadable: its own CORRUPT finding says so
    state = top.get("optimizer_state_dict")
    state = state if isinstance(state, dict) else {}
    counts = state.get("partition_count")
    counts = counts if isinstance(counts, list) else [counts]
    counts = {c for c in counts if isinstance(c, int)}
    if counts and counts != {dp_world}:
        seen = ", ".join(map(str, sorted(counts)))
        ckpt.add("PARTS_DISAGREE", f"{where}{path.name} is partitioned {seen} ways but {rank0} records dp world "
                                   f"size {dp_world}")  # fmt: skip
    theirs = top.get("ds_version", state.get("ds_version"))
    if isinstance(version, str) and isinstance(theirs, str) and theirs != version:
        ckpt.add("PARTS_DISAGREE", f"{where}{path.name} was written by DeepSpeed {theirs}, {rank0} by {version}")


def latest_findings(folder: Path, tags: set[str]) -> tuple[str | None, str | None]:
    """(tag `latest` names, problem) for a folder that holds DeepSpeed tags."""
    if not folders.is_file(folder / LATEST):
        return None, None
    tag = read_text(folder / LATEST)
    if not tag:
        return None, f"{folder.name}/{LATEST} is empty or unreadable"
    if tag not in tags:
        return tag, f"{folder.name}/{LATEST} names tag {tag}, which is not there"
    return tag, None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _list(names: list[str], most: int = 4) -> str:
    shown = ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")
    return f"{shown} {'is' if len(names) == 1 else 'are'}"
