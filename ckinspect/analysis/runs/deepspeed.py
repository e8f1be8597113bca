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

from ckinspect.analysis.layouts import is_torch_optimizer_state, optimizer_step, top_mapping
from ckinspect.analysis.runs.model import RunCheckpoint, read_text, step_in_name
from ckinspect.io import folders
from ckinspect.record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from ckinspect.analysis.runs.judge import Reader
    from ckinspect.model import Checkpoint

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


class TagRecord(Record):
    """What a tag's rank-0 model-states file records about the save (empty when it is missing or unreadable)."""

    rank0: str  # its file name, "" when missing
    top: Mapping[str, Any]
    dp_world: int
    mp_world: int
    stage: int
    bf16: bool
    why: str  # where dp_world comes from, for messages

    @property
    def recorded(self) -> bool:
        return bool(self.top)


def read_tag(folder: Path, reader: Reader, ckpt: RunCheckpoint, enclosed: bool) -> None:
    """Add a tag's parts and what its records say to `ckpt` (the tag's own, or an HF checkpoint around it)."""
    names = {e.name for e in folders.entries(folder) if not e.is_dir}
    where = f"{folder.name}/" if enclosed else ""
    tag = _tag_record(folder, names, reader, ckpt, where)
    expected_model, expected_optim = _expected_files(tag)
    _add_parts(ckpt, folder, names, expected_model, expected_optim)
    _missing_and_extra(ckpt, names, tag, expected_model, expected_optim, where)
    for name in expected_optim:
        if name in names and tag.recorded:
            _agree(ckpt, folder / name, reader, tag, where)
    _tag_step(ckpt, folder, tag, enclosed, where)
    version = tag.top.get("ds_version")
    if isinstance(version, str):
        ckpt.notes.append(f"DeepSpeed {version}, dp world size {tag.dp_world}, ZeRO stage {tag.stage}")


def _tag_step(ckpt: RunCheckpoint, folder: Path, tag: TagRecord, enclosed: bool, where: str) -> None:
    """global_steps: the checkpoint's step (a tag of its own), held against the tag's default name."""
    steps = _int(tag.top.get("global_steps"))
    if steps is None:
        return
    tag_step = DEFAULT_TAG.match(folder.name)
    if tag_step and int(tag_step.group(1)) != steps:
        ckpt.add("PARTS_DISAGREE", f"{where}tag {folder.name} but {tag.rank0} records global_steps {steps}")
    if not enclosed:
        ckpt.step = steps


def _tag_record(folder: Path, names: set[str], reader: Reader, ckpt: RunCheckpoint, where: str) -> TagRecord:
    model_files = [n for n in names if MODEL_STATES.match(n)]
    optim_files = [n for n in names if OPTIM_STATES.match(n)]
    rank0, top = _rank0_record(folder, names, reader, ckpt, where)
    config = _dict(top.get("ds_config"))
    dp_world, why = _dp_world(top, optim_files, rank0)
    return TagRecord(
        rank0=rank0 or "",
        top=top,
        dp_world=dp_world,
        mp_world=_int(top.get("mp_world_size")) or 1,
        stage=_zero_stage(config, model_files, optim_files),
        bf16=_bf16(config, optim_files),
        why=why,
    )


def _rank0_record(
    folder: Path, names: set[str], reader: Reader, ckpt: RunCheckpoint, where: str
) -> tuple[str | None, Mapping[str, Any]]:
    """(rank 0's model-states file, what it records); MISSING_PARTS when there is none."""
    rank0 = next((n for n in (model_states_name(0, None), model_states_name(0, 0)) if n in names), None)
    if rank0 is None:
        ckpt.add("MISSING_PARTS", f"{where}{model_states_name(0, None)} is missing: DeepSpeed's record of the "
                                  "world sizes, the step and the model")  # fmt: skip
        return None, {}
    return rank0, top_mapping(reader.inspect(folder / rank0)) or {}


def _dp_world(top: Mapping[str, Any], optim_files: list[str], rank0: str | None) -> tuple[int, str]:
    """The data-parallel world size rank 0 records, and where it comes from for messages."""
    dp_world = _int(top.get("dp_world_size"))
    if dp_world is not None:
        return dp_world, f"dp world size {dp_world} in {rank0}"
    # no record: the files present are all there is to go on
    ranks = [int(OPTIM_STATES.match(n).group("dp")) for n in optim_files]  # type: ignore[union-attr]
    return (max(ranks) + 1 if ranks else 1), "the highest rank file present"


def _bf16(config: Mapping[str, Any], optim_files: list[str]) -> bool:
    """ZeRO's bf16 optimizer names its files `bf16_zero_pp_rank_...`; with none present, the config says."""
    if optim_files:
        return any(OPTIM_STATES.match(n).group("bf16") for n in optim_files)  # type: ignore[union-attr]
    return bool(_dict(config.get("bf16")).get("enabled"))


def _zero_stage(config: Mapping[str, Any], model_files: list[str], optim_files: list[str]) -> int:
    """The ZeRO stage the config records; without one, what the file names imply (per-rank model files: 3)."""
    stage = _int(_dict(config.get("zero_optimization")).get("stage"))
    if stage is not None:
        return stage
    if any(MODEL_STATES.match(n).group("dp") for n in model_files):  # type: ignore[union-attr]
        return 3
    return 1 if optim_files else 0


def _expected_files(tag: TagRecord) -> tuple[list[str], list[str]]:
    """The model-states and optim-states files the record promises."""
    per_rank = tag.stage == 3
    dps: list[int | None] = list(range(tag.dp_world)) if per_rank else [None]
    model = [model_states_name(m, d) for m in range(tag.mp_world) for d in dps]
    optim = [optim_states_name(d, m, tag.bf16) for m in range(tag.mp_world) for d in range(tag.dp_world)]
    return model, optim if tag.stage else []


def _add_parts(ckpt: RunCheckpoint, folder: Path, names: set[str], model: list[str], optim: list[str]) -> None:
    for role, expected in (("model", model), ("optimizer", optim)):
        for name in expected:
            if name in names:
                ckpt.part(folder / name, role)


def _missing_and_extra(
    ckpt: RunCheckpoint, names: set[str], tag: TagRecord, model: list[str], optim: list[str], where: str
) -> None:
    missing = [n for n in model + optim if n not in names and n != model_states_name(0, None)]
    if missing:
        ckpt.add("MISSING_PARTS", f"{where}{_list(missing)} missing ({tag.why}, ZeRO stage {tag.stage})")
    present = {n for n in names if MODEL_STATES.match(n) or OPTIM_STATES.match(n)}
    extra = sorted(present - set(model + optim))
    if extra and tag.recorded:
        ckpt.add("PARTS_DISAGREE", f"{where}{_list(extra)} beyond what {tag.rank0} records ({tag.why}, mp world "
                                   f"size {tag.mp_world}, ZeRO stage {tag.stage}): files of another save?")  # fmt: skip


def _agree(ckpt: RunCheckpoint, path: Path, reader: Reader, tag: TagRecord, where: str) -> None:
    """A ZeRO rank file must have been written by the same save: same DeepSpeed, same partitioning, and its
    optimizer stepped as often as the model states record."""
    opened = reader.inspect(path)
    top = top_mapping(opened)
    if top is None:
        return  # unreadable: its own CORRUPT finding says so
    state = _dict(top.get("optimizer_state_dict"))
    counts = state.get("partition_count")
    counts = {c for c in (counts if isinstance(counts, list) else [counts]) if isinstance(c, int)}
    if counts and counts != {tag.dp_world}:
        seen = ", ".join(map(str, sorted(counts)))
        ckpt.add("PARTS_DISAGREE", f"{where}{path.name} is partitioned {seen} ways but {tag.rank0} records dp "
                                   f"world size {tag.dp_world}")  # fmt: skip
    version, theirs = tag.top.get("ds_version"), top.get("ds_version", state.get("ds_version"))
    if isinstance(version, str) and isinstance(theirs, str) and theirs != version:
        ckpt.add("PARTS_DISAGREE", f"{where}{path.name} was written by DeepSpeed {theirs}, {tag.rank0} by {version}")
    _steps_agree(ckpt, opened, state, path.name, tag, where)


# Where a ZeRO file keeps the wrapped torch optimizer's state dict: stages 1 and 2 (zero/stage_1_and_2.py,
# `state_dict`), stage 3 (zero/stage3.py, `_rigid_state_dict`).
BASE_OPTIMIZER_KEYS = ("base_optimizer_state", "optimizer_state_dict")


def _steps_agree(
    ckpt: RunCheckpoint, opened: Checkpoint, state: Mapping[str, Any], name: str, tag: TagRecord, where: str
) -> None:
    """The engine steps the optimizer once per global step it did not skip (fp16 overflow: `skipped_steps`)."""
    steps, skipped = _int(tag.top.get("global_steps")), _int(tag.top.get("skipped_steps")) or 0
    key = next((k for k in BASE_OPTIMIZER_KEYS if is_torch_optimizer_state(state.get(k))), None)
    if steps is None or key is None:
        return
    recorded = optimizer_step(opened, state[key])
    if recorded is None or recorded == steps - skipped:
        return
    shown = int(recorded) if float(recorded).is_integer() else recorded
    ckpt.add("PARTS_DISAGREE", f"{where}{name} records optimizer step {shown} (optimizer_state_dict.{key}.state.*"
                               f".step) but {tag.rank0} records global_steps {steps} ({skipped} skipped): the parts "
                               "come from different saves")  # fmt: skip


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
