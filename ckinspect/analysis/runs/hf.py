"""Hugging Face Trainer (`checkpoint-N/`) and Accelerate (`save_state`) folders.

HF Trainer (transformers/trainer.py, `_save_checkpoint`): the model (`model.safetensors`, `pytorch_model.bin`,
a sharded set by its `*.index.json`, or `adapter_model.*`), `optimizer.pt`, `scheduler.pt`, `scaler.pt`
under fp16, `rng_state.pth` (one process) or `rng_state_K.pth` (one per process), `trainer_state.json`
(global_step), and `training_args.bin`, which resume never loads. With DeepSpeed the optimizer and
scheduler live in DeepSpeed's own tag folder, named by `latest` inside `checkpoint-N/`.

Accelerate (accelerate/checkpointing.py, `save_accelerator_state`): `model.safetensors` / `pytorch_model.bin`
(`model_K.*` for more), `optimizer.bin` (`optimizer_K.bin`), `scheduler.bin`, `sampler.bin`, `scaler.pt`,
and `random_states_K.pkl` for every process.
"""

from __future__ import annotations

import re
from pathlib import Path

from ckinspect.analysis.layouts import HF_MODEL_FILES
from ckinspect.analysis.runs import deepspeed
from ckinspect.analysis.runs.model import RunCheckpoint, read_json, step_in_name, written_after_commit
from ckinspect.io import folders
from ckinspect.vocab import HF_RNG_STATE, HF_TRAINER_STATE

HF_FOLDER = re.compile(r"^checkpoint-(\d+)$")
HF_STAGING = re.compile(r"^tmp-checkpoint-(\d+)$")  # transformers 4.36-4.38 saved here, then renamed
TRAINER_STATE = HF_TRAINER_STATE
TRAINING_ARGS = "training_args.bin"
HF_RNG = re.compile(HF_RNG_STATE)
SINGLE_RNG, RANK_RNG_0 = "rng_state.pth", "rng_state_0.pth"
SHARD = re.compile(r"-\d+-of-\d+\.(safetensors|bin)$")

ACC_RNG = re.compile(r"^random_states_(\d+)\.pkl$")
ACC_MODEL = re.compile(r"^(model|pytorch_model)(?:_(\d+))?\.(safetensors|bin)$")
ACC_OPTIMIZER = re.compile(r"^optimizer(?:_(\d+))?\.bin$")
ACC_SCHEDULER = re.compile(r"^scheduler(?:_(\d+))?\.bin$")
ACC_SAMPLER = re.compile(r"^sampler(?:_(\d+))?\.bin$")
ACC_FOLDER = re.compile(r"^checkpoint_(\d+)$")  # ProjectConfiguration(automatic_checkpoint_naming=True)


def is_hf_folder(folder: Path, names: set[str]) -> bool:
    if TRAINER_STATE in names or HF_STAGING.match(folder.name):
        return True
    return bool(HF_FOLDER.match(folder.name)) and any(
        HF_MODEL_FILES.match(n) or HF_RNG.match(n) or n in ("optimizer.pt", "scheduler.pt", TRAINING_ARGS)
        for n in names
    )


def is_accelerate_folder(names: set[str]) -> bool:
    return any(ACC_RNG.match(n) or ACC_OPTIMIZER.match(n) for n in names)


def hf_checkpoint(folder: Path, names: set[str], dirs: set[str]) -> RunCheckpoint:
    ckpt = RunCheckpoint(folder, "hf-trainer", step_in_name(folder.name))
    staging = HF_STAGING.match(folder.name)
    if staging:
        ckpt.add("MISSING_PARTS", f"{folder.name} is a staging folder: the save died before its rename to "
                                  f"checkpoint-{staging.group(1)}")  # fmt: skip
    _trainer_state(ckpt, folder, names, HF_FOLDER.match(folder.name) or staging)
    counts = {"model": _model_files(ckpt, folder, names)}
    tags = _deepspeed_tags(folder, dirs)
    if tags or deepspeed.LATEST in names:
        _enclosed_deepspeed(ckpt, folder, names, tags)
        counts["optimizer"] = 1
    else:
        counts.update(_optimizer_files(ckpt, folder, names))
    counts["rng"] = _rng_files(ckpt, folder, names)
    _settings_and_commit(ckpt, folder, names)
    ckpt.set_counts(counts)
    return ckpt


def _deepspeed_tags(folder: Path, dirs: set[str]) -> set[str]:
    return {d for d in dirs if deepspeed.is_tag_folder({e.name for e in folders.entries(folder / d) if not e.is_dir})}


def _rng_files(ckpt: RunCheckpoint, folder: Path, names: set[str]) -> int:
    ranks = sorted(int(m.group(1) or 0) for m in map(HF_RNG.match, names) if m)
    for name in sorted(n for n in names if HF_RNG.match(n)):
        ckpt.part(folder / name, "rng")
    _rng_per_rank(ckpt, names, ranks)
    return len(ranks)


def _settings_and_commit(ckpt: RunCheckpoint, folder: Path, names: set[str]) -> None:
    if TRAINING_ARGS in names:
        ckpt.part(folder / TRAINING_ARGS, "settings", loaded=False)
    if TRAINER_STATE in names:  # the Trainer writes it after every other part
        data = [p.path for p in ckpt.parts if p.role not in ("state", "pointer", "settings")]
        written_after_commit(ckpt, folder / TRAINER_STATE, data)


def _trainer_state(ckpt: RunCheckpoint, folder: Path, names: set[str], named: re.Match[str] | None) -> None:
    """trainer_state.json's global_step: the checkpoint's step, held against the folder's name. Read when the
    checkpoint is judged where the name gives a step (a record that says otherwise makes it damaged, so
    ordering by the name cannot pass over an answer): a long run is listed without a read per save."""
    if TRAINER_STATE not in names:
        ckpt.add("MISSING_PARTS", f"{TRAINER_STATE} is missing (the global step and the log; Trainer writes it "
                                  "after the model, optimizer and RNG files)")  # fmt: skip
        return
    ckpt.part(folder / TRAINER_STATE, "state")
    if named:
        ckpt.defer(lambda reader: _global_step(ckpt, folder, named))
    else:
        _global_step(ckpt, folder, named)


def _global_step(ckpt: RunCheckpoint, folder: Path, named: re.Match[str] | None) -> None:
    state = read_json(folder / TRAINER_STATE)
    step = state.get("global_step") if isinstance(state, dict) else None
    if not isinstance(step, int) or isinstance(step, bool):
        ckpt.add("CORRUPT", f"{TRAINER_STATE} is not a Trainer state (no global_step)")
        return
    if named and int(named.group(1)) != step:
        ckpt.add("PARTS_DISAGREE", f"folder {folder.name} but {TRAINER_STATE} records global_step {step}")
    ckpt.step = step


def _model_files(ckpt: RunCheckpoint, folder: Path, names: set[str]) -> int:
    models = sorted(n for n in names if HF_MODEL_FILES.match(n) and not SHARD.search(n))
    indexed = [n for n in models if n.endswith(".index.json")]
    for name in indexed or models:
        ckpt.part(folder / name, "model")
    if not models:
        ckpt.add("MISSING_PARTS", "no model file (model.safetensors, pytorch_model.bin or a sharded index)")
    return len(indexed or models)


def _enclosed_deepspeed(ckpt: RunCheckpoint, folder: Path, names: set[str], tags: set[str]) -> None:
    """With DeepSpeed the optimizer and scheduler live in the tag `latest` names, read when judged."""
    tag, problem = deepspeed.latest_findings(folder, tags)
    if deepspeed.LATEST not in names:
        which = ", ".join(sorted(tags))
        problem = f"{deepspeed.LATEST} is missing: DeepSpeed's resume cannot tell which of {which} to load"
    if problem:
        ckpt.add("MISSING_PARTS", problem)
        return
    ckpt.part(folder / deepspeed.LATEST, "pointer")
    tag_folder = folder / str(tag)
    ckpt.defer(lambda reader: deepspeed.read_tag(tag_folder, reader, ckpt, enclosed=True))


# the Trainer's own optimizer-side files: (name, role, what it holds; None: optional, as scaler.pt under fp16)
TRAINER_FILES = (("optimizer.pt", "optimizer", "optimizer state"), ("scheduler.pt", "scheduler", "scheduler state"),
                 ("scaler.pt", "scaler", None))  # fmt: skip


def _optimizer_files(ckpt: RunCheckpoint, folder: Path, names: set[str]) -> dict[str, int]:
    counts = {}
    for name, role, _ in TRAINER_FILES:
        if name in names:
            ckpt.part(folder / name, role)
            counts[role] = 1
    absent = [(n, what) for n, _, what in TRAINER_FILES if what and n not in names]
    if absent:
        lacking = " and ".join(what for _, what in absent)
        ckpt.add("RESUME_INCOMPLETE", f"lacks {lacking} (no {', '.join(n for n, _ in absent)})")
    return counts


def _rng_per_rank(ckpt: RunCheckpoint, names: set[str], ranks: list[int]) -> None:
    """Every process's RNG file (Trainer `_save_rng_state`: `rng_state.pth` for one process, else
    `rng_state_K.pth` per process index), as far as the names can promise them."""
    if not ranks:
        ckpt.add("RESUME_INCOMPLETE", "lacks RNG state (no rng_state.pth / rng_state_K.pth): the resumed run "
                                      "sees other dropout and sampling")  # fmt: skip
        return
    gaps = [f"rng_state_{k}.pth" for k in range(max(ranks) + 1) if k not in ranks]
    if gaps:
        ckpt.add("MISSING_PARTS", f"{', '.join(gaps)} missing (rng_state_{max(ranks)}.pth is there)")
    elif ranks == [0] and RANK_RNG_0 in names and SINGLE_RNG not in names:
        why = "which the Trainer writes only for a run of 2 or more processes; rank 1 resumes without its RNG state"
        ckpt.add("MISSING_PARTS", f"rng_state_1.pth missing ({RANK_RNG_0} is there, {why})")


def accelerate_checkpoint(folder: Path, names: set[str]) -> RunCheckpoint:
    named = ACC_FOLDER.match(folder.name)
    ckpt = RunCheckpoint(folder, "accelerate", int(named.group(1)) if named else step_in_name(folder.name))
    counts = {role: _numbered_files(ckpt, folder, names, role, pattern, group) for role, pattern, group in ACC_KINDS}
    if "scaler.pt" in names:
        ckpt.part(folder / "scaler.pt", "scaler")
    for name in sorted(n for n in names if HF_MODEL_FILES.match(n) and n.endswith(".index.json")):
        ckpt.part(folder / name, "model")
        counts["model"] += 1
    _accelerate_resume(ckpt, counts)
    ckpt.set_counts(counts)
    return ckpt


def _accelerate_resume(ckpt: RunCheckpoint, counts: dict[str, int]) -> None:
    if not counts["model"]:
        ckpt.add("MISSING_PARTS", "no model file (model.safetensors or pytorch_model.bin)")
    lacking = [what for role, what in (("optimizer", "optimizer state (optimizer.bin)"),
                                       ("rng", "RNG state (random_states_K.pkl)")) if not counts[role]]  # fmt: skip
    if lacking:
        ckpt.add("RESUME_INCOMPLETE", "lacks " + " and ".join(lacking))


# (role, file name pattern, the group holding its index) of what save_accelerator_state writes
ACC_KINDS = (("model", ACC_MODEL, 2), ("optimizer", ACC_OPTIMIZER, 1), ("scheduler", ACC_SCHEDULER, 1),
             ("sampler", ACC_SAMPLER, 1), ("rng", ACC_RNG, 1))  # fmt: skip


def _numbered_files(ckpt: RunCheckpoint, folder: Path, names: set[str], role: str, pattern: re.Pattern[str],
                    group: int) -> int:  # fmt: skip
    """The files of one kind (`optimizer.bin`, `optimizer_1.bin` ...) as parts; a gap in their numbers is
    a file never written. Returns how many there are."""
    found = sorted((int(m.group(group) or 0), n) for n in names if (m := pattern.match(n)))
    for _, name in found:
        ckpt.part(folder / name, role)
    indices = [i for i, _ in found]
    gaps = [i for i in range(max(indices) + 1) if i not in indices] if found else []
    if gaps:
        ckpt.add("MISSING_PARTS", f"{role} file(s) {', '.join(map(str, gaps))} missing ({found[-1][1]} is there)")
    return len(found)
