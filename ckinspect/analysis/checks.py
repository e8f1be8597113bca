"""Structural findings: what the checkpoint's shape says, before any value is read.

The readers already raise UNSAFE_PICKLE, ALLOWLIST_NEEDED and CORRUPT. Here, from the tensors, the
layout and the tree (run `anatomy.analyze` first so groups and metadata are set):

- RESUME_INCOMPLETE: it looks like a resume file (optimizer state, a step counter or other
  training state) but lacks the optimizer state, the step counter or the RNG/data position.
- HALF_PRECISION_RESUME: a resume file whose model weights are float16/bfloat16.
- OPTIMIZER_MISMATCH: the optimizer state does not fit the model's parameters (count or shapes).
- STORAGE_BLOAT: more than BLOAT_MIN_BYTES and BLOAT_MIN_FRACTION of the storage bytes are reached
  by no tensor (typically a small slice saved together with its whole base tensor).
- LEFTOVER_TMP: an interrupted save beside the checkpoint (ckinspect.analysis.leftovers, when present).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from ckinspect.analysis.anatomy import Anatomy, summarize
from ckinspect.analysis.layouts import (
    _OPTIMIZER_STATE_NAME,
    OPTIMIZER_STATE_LEAVES,
    Layout,
    has_data_position,
    is_rng_key,
    recognise,
    top_mapping,
)
from ckinspect.analysis.lightning_steps import step_findings
from ckinspect.dtypes import dtype_info
from ckinspect.fmt import human_bytes
from ckinspect.io.crc import zeros_crc32
from ckinspect.model import Checkpoint, Finding, StorageInfo, TensorInfo
from ckinspect.record import Record, field
from ckinspect.vocab import OPTIMIZER_KEYS, SALVAGE_KEY

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Bloat worth a warning: at least 1 MiB and at least a tenth of all storage bytes. Smaller waste is
# alignment padding or a tiny view and not worth anyone's time.
BLOAT_MIN_BYTES = 1 << 20
BLOAT_MIN_FRACTION = 0.10

HALF_DTYPES = ("float16", "bfloat16")
# Per-parameter entries whose shape is the parameter's shape (a scalar `step` is not).
SHAPED_LEAVES = (
    "exp_avg",
    "momentum_buffer",
    "exp_avg_sq",
    "max_exp_avg_sq",
    "square_avg",
    "acc_delta",
    "sum",
    "ax",
    "prev",
)
SCHEDULER_KEYS = (
    "lr_scheduler",
    "lr_schedulers",
    "scheduler",
    "schedulers",
    "scheduler_state_dict",
    "scheduler_state",
    "lr_scheduler_state_dict",
    "lr_scheduler_state",
    "sched",
    "lr_sched",
)
# Config switches by which a saved file says it holds no optimizer state (value that means "none saved").
NO_OPTIMIZER_SWITCHES = {
    "save_optimizer": False,
    "save_optimizer_state": False,
    "save_optim": False,
    "with_optimizer": False,
    "include_optimizer": False,
    "save_weights_only": True,
    "weights_only": True,
}


def structural_findings(ckpt: Checkpoint, layout: Layout | None = None) -> list[Finding]:
    """Role-based findings; pass the `layout` analyze used to skip recognising the shape a second time."""
    layout = layout or recognise(ckpt)
    findings: list[Finding] = []
    findings += resume_findings(ckpt, layout)
    findings += optimizer_findings(ckpt, layout)
    findings += step_findings(ckpt, layout)
    findings += bloat_findings(ckpt, summarize(ckpt))
    findings += leftover_findings(ckpt.path)
    findings += salvage_findings(ckpt)
    return findings


# ---------------------------------------------------------------- what a salvage lost


def salvage_findings(ckpt: Checkpoint) -> list[Finding]:
    """SALVAGED_PARTIAL when the file records that `ckinspect salvage` could not recover all of its source:
    a torch output's top-level SALVAGE_KEY, a safetensors output's `salvage_missing`/`salvage_dropped`."""
    recorded = _salvage_record(ckpt)
    if recorded is None:
        return []
    source, missing, dropped = recorded[0], _strings(recorded[1]), _strings(recorded[2])
    if not missing and not dropped:
        return []
    lost = [f"{len(missing)} tensors ({_first(missing)})" if missing else "",
            f"{len(dropped)} values ({_first(dropped)})" if dropped else ""]  # fmt: skip
    message = (f"salvaged from {source}: {' and '.join(x for x in lost if x)} could not be recovered and are not "
               "in this file, so it is not the whole checkpoint")  # fmt: skip
    return [Finding("SALVAGED_PARTIAL", message, missing[0] if missing else None)]


def _salvage_record(ckpt: Checkpoint) -> tuple[Any, Any, Any] | None:
    """(source, missing, dropped) as salvage recorded them: a torch output's top-level key, or the
    safetensors header's metadata; None when the file records no salvage."""
    top = top_mapping(ckpt)
    record = top.get(SALVAGE_KEY) if top is not None else None
    if isinstance(record, Mapping):
        return record.get("salvaged_from"), record.get("missing"), record.get("dropped")
    if "salvaged_from" in ckpt.metadata:
        meta = ckpt.metadata
        return (
            meta.get("salvaged_from"),
            _json_list(meta.get("salvage_missing")),
            _json_list(meta.get("salvage_dropped")),
        )
    return None


def _strings(names: Any) -> list[str]:
    return [str(n) for n in names] if isinstance(names, list) else []


def _json_list(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None


def _first(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


# ---------------------------------------------------------------- resume


def resume_findings(ckpt: Checkpoint, layout: Layout) -> list[Finding]:
    if layout.companion:  # one part of a multi-file checkpoint; judged on its model file
        return []
    if layout.is_resume is False:  # weights only: nothing below could apply
        return []
    top = top_mapping(ckpt)
    evidence = _resume_evidence(ckpt, layout, top)
    if evidence is None or not evidence.is_resume:
        return []
    findings = _missing_resume_state(evidence, top)
    half = _half_precision_resume(ckpt)
    return findings + ([half] if half else [])


class ResumeEvidence(Record):
    """What a file holds of the state a resume needs: each from the layout's roles where it names them,
    else from the file's tensors and keys."""

    optimizer: bool
    step: bool
    rng: bool
    is_resume: bool


def _resume_evidence(ckpt: Checkpoint, layout: Layout, top: Mapping[str, Any] | None) -> ResumeEvidence | None:
    """None: a weights file that says it saved no optimizer (a step count there is provenance, not resume state)."""
    groups = {t.group for t in ckpt.tensors}
    has_optimizer = _layout_says(layout, "optimizer", lambda: bool(layout.optimizers) or "optimizer" in groups)
    if not has_optimizer and top is not None and states_no_optimizer(top):
        return None
    has_step = _layout_says(layout, "step", lambda: _has_step(ckpt, layout, top))
    has_rng = _layout_says(layout, "rng", lambda: "rng" in groups or _has_rng_keys(top) or has_data_position(top))
    is_resume = _layout_says_resume(layout, lambda: has_optimizer or has_step or _has_training_keys(top))
    return ResumeEvidence(has_optimizer, has_step, has_rng, is_resume)


def _layout_says_resume(layout: Layout, otherwise: Any) -> bool:
    return bool(otherwise()) if layout.is_resume is None else layout.is_resume


def _layout_says(layout: Layout, part: str, otherwise: Any) -> bool:
    said = layout.resume_parts.get(part)
    return bool(otherwise()) if said is None else said


def _has_step(ckpt: Checkpoint, layout: Layout, top: Mapping[str, Any] | None) -> bool:
    return (
        ckpt.metadata.get("step") is not None
        # an unknown trainer's epoch counter: epoch-wise schedules resume from it (known layouts name their step)
        or (layout.is_resume is None and ckpt.metadata.get("epoch") is not None)
        or (top is not None and any(k in top for k in SCHEDULER_KEYS))  # a scheduler's state carries the step
    )


def _has_rng_keys(top: Mapping[str, Any] | None) -> bool:
    return top is not None and any(isinstance(k, str) and is_rng_key(k) and not _empty(v) for k, v in top.items())


def _missing_resume_state(evidence: ResumeEvidence, top: Mapping[str, Any] | None) -> list[Finding]:
    parts = (
        ("optimizer state", "optimizer state (moments start from zero: the run takes a different path)",
         evidence.optimizer),
        ("a step counter", "the step counter (the LR schedule restarts)", evidence.step),
        ("RNG/data-position state", _rng_missing(top), evidence.rng),
    )  # fmt: skip
    missing = [lacking for _, lacking, present in parts if not present]
    if not missing:
        return []
    have = [held for held, _, present in parts if present]
    why = f"has {' and '.join(have)}" if have else "has training-state keys"
    return [Finding("RESUME_INCOMPLETE", f"looks like a resume file ({why}) but lacks " + "; ".join(missing))]


def _half_precision_resume(ckpt: Checkpoint) -> Finding | None:
    model_dtypes = {t.dtype for t in ckpt.tensors if t.group == "model"}
    if not model_dtypes & set(HALF_DTYPES):
        return None
    floating = [t for t in ckpt.tensors if t.group == "model" and dtype_info(t.dtype).is_floating]
    half = [t for t in floating if t.dtype in HALF_DTYPES]
    kinds = "/".join(sorted({t.dtype for t in half}))
    return Finding(
        "HALF_PRECISION_RESUME",
        f"resume file with {kinds} model weights ({len(half)} of {len(floating)} floating tensors): "
        "a run resumed from it cannot match an uninterrupted one bit for bit; save fp32 master weights",
        half[0].name,
    )


def states_no_optimizer(top: Mapping[str, Any], depth: int = 4) -> bool:
    """The file says it holds no optimizer: an optimizer entry that is None or empty, or a config
    switch (save_optimizer=False, save_weights_only=True ...) at the top or in a config up to three levels
    below it (`config.train.checkpoint.save_optimizer`: released weights whose config is nested)."""
    for key, value in top.items():
        if not isinstance(key, str):
            continue
        low = key.lower()
        if low in _SAYS_KEYS and _says_no_optimizer(low, value):
            return True
        if depth < 2 or type(value) in _NOTHING_BELOW:  # a state dict's 723 tensors: no getattr each
            continue
        fields = value if isinstance(value, Mapping) else getattr(value, "fields", None)
        if isinstance(fields, Mapping) and states_no_optimizer(fields, depth - 1):
            return True
    return False


_SAYS_KEYS = frozenset(NO_OPTIMIZER_SWITCHES) | OPTIMIZER_KEYS  # the keys _says_no_optimizer can say yes for
_NOTHING_BELOW = frozenset((TensorInfo, str, int, float, bool, type(None), bytes, tuple, list))  # no fields


def _says_no_optimizer(key: str, value: Any) -> bool:
    """`save_optimizer: False` and its kin, or an optimizer entry that holds nothing."""
    if key in NO_OPTIMIZER_SWITCHES and value is NO_OPTIMIZER_SWITCHES[key]:
        return True
    return key in OPTIMIZER_KEYS and value in (None, {}, [])


def _rng_missing(top: Mapping[str, Any] | None) -> str:
    empty = [k for k, v in (top or {}).items() if isinstance(k, str) and is_rng_key(k) and _empty(v)]
    held = f" ({', '.join(repr(k) for k in empty)} is there but empty)" if empty else ""
    return f"RNG/data-position state{held} (the resumed run sees different batches and dropout)"


def _empty(value: Any, depth: int = 4) -> bool:
    """Nothing in it: None, or containers holding only empty containers (a salvaged `rng: [{}]`)."""
    if value is None:
        return True
    if isinstance(value, Mapping):
        return depth > 0 and all(_empty(v, depth - 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return depth > 0 and all(_empty(v, depth - 1) for v in value)
    return False


def _has_training_keys(top: Mapping[str, Any] | None) -> bool:
    if top is None:
        return False
    keys = {k.lower() for k in top if isinstance(k, str)}
    return bool(keys & {"epoch", "global_step", "iter_num", "scaler", *SCHEDULER_KEYS}) or has_data_position(top)


# ---------------------------------------------------------------- duplicated storages

DUPLICATE_MIN_BYTES = 64 << 10  # below this (norm weights, biases), sharing saves too little to mention


def duplicate_storages(ckpt: Checkpoint) -> list[Finding]:
    """Equal tensors saved in separate storages (a tied embedding copied by `{k: v.half()}`): an info with
    the bytes sharing would save. Candidates cost nothing at listing (same dtype, size, view shape and the
    CRC-32 the zip directory records); only they are read, and compared byte for byte, so equal is never
    said without comparing. Run with the value scan (not under --quick)."""
    users: dict[str, list[TensorInfo]] = {}
    for tensor in ckpt.tensors:
        users.setdefault(tensor.storage_key, []).append(tensor)
    candidates: dict[tuple[Any, ...], list[str]] = {}
    for key, st in ckpt.storages.items():
        views = users.get(key)
        if st.crc32 is None or st.offset is None or st.nbytes < DUPLICATE_MIN_BYTES or not views:
            continue
        candidates.setdefault((st.dtype, st.nbytes, st.crc32, views[0].shape), []).append(key)
    findings = []
    for keys in candidates.values():
        first = ckpt.storages[keys[0]]
        if len(keys) < 2 or first.crc32 == zeros_crc32(first.nbytes) and _all_zero(first):
            continue  # all-zero storages (fresh moments, zero biases) are equal by no one's choice: not said
        equal = [k for k in keys[1:] if _same_bytes(first, ckpt.storages[k])]
        if not equal:
            continue
        names = [users[k][0].name for k in (keys[0], *equal)]
        saved = first.nbytes * len(equal)
        share = f", {saved / ckpt.file_bytes:.0%} of the file" if ckpt.file_bytes else ""
        findings.append(Finding("DUPLICATE_STORAGE", f"{' and '.join(names)} hold equal bytes in {len(names)} separate "
                                f"storages: saving them as one (tied) would save {human_bytes(saved)}{share}",
                                names[0]))  # fmt: skip
    return findings


def _same_bytes(a: StorageInfo, b: StorageInfo) -> bool:
    """Equal bytes, not all zero; compared a chunk at a time in numpy (memoryview's == and any() walk a
    byte at a time in Python's terms: 0.3 GB/s, which made two zero moments of a 1B model cost minutes)."""
    import numpy as np

    from ckinspect.io.blobs import UnreadableStorage, read_chunks

    try:
        zeros = True
        for x, y in zip(read_chunks(a), read_chunks(b), strict=True):
            xs, ys = _words(np, x), _words(np, y)
            if not np.array_equal(xs, ys):
                return False
            zeros = zeros and not xs.any()
        return not zeros
    except (UnreadableStorage, OSError, ValueError):
        return False  # an unreadable storage is reported by the scan; never "equal" without comparing


def _all_zero(storage: StorageInfo) -> bool:
    import numpy as np

    from ckinspect.io.blobs import UnreadableStorage, read_chunks

    try:
        return not any(_words(np, x).any() for x in read_chunks(storage))
    except (UnreadableStorage, OSError, ValueError):
        return False  # compared (and found unreadable) pair by pair, as any other


def _words(np: Any, chunk: memoryview) -> Any:
    """A chunk as 64-bit words where its length allows (8x fewer elements per numpy pass), else as bytes."""
    return np.frombuffer(chunk, np.uint64 if len(chunk) % 8 == 0 else np.uint8)


# ---------------------------------------------------------------- optimizer vs model


class OptimizerState(Record):
    """One torch optimizer's per-parameter state, keyed by param index (int) or by param name (DCP/FSDP)."""

    __hash__ = None  # type: ignore[assignment]  # filled in as its state dict is read

    prefix: str  # dotted prefix of its tensors: "optimizer.", "optimizer_states.0.", ""
    entries: dict[Any, dict[str, TensorInfo]] = field(default_factory=dict)
    param_ids: list[Any] | None = None  # param_groups' `params`, in order; None when not saved

    def shape_of(self, key: Any) -> tuple[tuple[int, ...], str] | None:
        """The parameter's shape as its state says, and the name of the tensor that says it."""
        entry = self.entries.get(key, {})
        for leaf in SHAPED_LEAVES:
            tensor = entry.get(leaf)
            if isinstance(tensor, TensorInfo):
                return tensor.shape, f"{self.prefix}state.{key}.{leaf}"
        return None


def optimizer_states(ckpt: Checkpoint, layout: Layout) -> list[OptimizerState]:
    """The optimizer states in a checkpoint: from the decoded tree when there is one, else from tensor names."""
    found = [_decoded_state(ckpt, prefix, opt) for prefix, opt in layout.optimizers]
    return found or _states_by_name(ckpt)


def _decoded_state(ckpt: Checkpoint, prefix: str, opt: Mapping[str, Any]) -> OptimizerState:
    """One decoded torch optimizer state dict: its per-parameter tensors and the param ids its groups list."""
    state, groups = opt.get("state"), opt.get("param_groups")
    entries = _state_entries(ckpt, state) if isinstance(state, Mapping) else {}
    param_ids = [p for group in groups for p in _group_params(group)] if isinstance(groups, Sequence) else None
    return OptimizerState(prefix, entries, param_ids)


def _state_entries(ckpt: Checkpoint, state: Mapping[Any, Any]) -> dict[Any, dict[str, TensorInfo]]:
    entries: dict[Any, dict[str, TensorInfo]] = {}
    for key, entry in state.items():
        if ckpt.format == "dcp" and isinstance(key, str) and key.isdigit():
            key = int(key)  # DCP keeps every dict key as a string; param_groups list the int ids
        if isinstance(entry, Mapping):
            entries[key] = {str(k): v for k, v in entry.items() if isinstance(v, TensorInfo)}
    return entries


def _group_params(group: Any) -> list[Any]:
    params = group.get("params") if isinstance(group, Mapping) else None
    return [p for p in params if isinstance(p, (int, str))] if isinstance(params, Sequence) else []


def _states_by_name(ckpt: Checkpoint) -> list[OptimizerState]:
    """No decoded optimizer dict (DCP, safetensors, unknown layouts): the tensor names say it,
    `optim.state.layers.0.weight.exp_avg` or `optimizer.state.3.exp_avg`."""
    by_prefix: dict[str, OptimizerState] = {}
    for tensor in ckpt.tensors:
        match = _OPTIMIZER_STATE_NAME.search(tensor.name) if tensor.group == "optimizer" else None
        if not match or match.group("leaf") not in OPTIMIZER_STATE_LEAVES:
            continue
        prefix = tensor.name[: match.start("param")][: -len("state.")]
        param: Any = match.group("param")
        if param.isdigit():
            param = int(param)
        named = by_prefix.setdefault(prefix, OptimizerState(prefix))
        named.entries.setdefault(param, {})[match.group("leaf")] = tensor
    return list(by_prefix.values())


def model_parameters(ckpt: Checkpoint, layout: Layout) -> list[TensorInfo]:
    """The model's tensors in save order, tied duplicates dropped (as `model.parameters()` would)."""
    if layout.model_prefix is None:
        return []
    seen: set[tuple[str, int, tuple[int, ...]]] = set()
    params: list[TensorInfo] = []
    for tensor in ckpt.tensors:
        if tensor.group != "model" or not tensor.name.startswith(layout.model_prefix):
            continue
        key = (tensor.storage_key, tensor.storage_offset, tensor.shape)
        if key in seen:
            continue
        seen.add(key)
        params.append(tensor)
    return params


def optimizer_findings(ckpt: Checkpoint, layout: Layout) -> list[Finding]:
    findings: list[Finding] = []
    states = optimizer_states(ckpt, layout)
    params = model_parameters(ckpt, layout) if states else []
    beside = _model_beside(layout) if states and not params else []
    findings += [Finding("OPTIMIZER_MISMATCH", m, t) for m, t in _uneven_states(layout)]
    for opt in states:
        problem = _state_problem(ckpt, opt, params, beside, layout)
        if problem:
            message, tensor = problem
            findings.append(Finding("OPTIMIZER_MISMATCH", message, tensor))
    return findings


def _state_problem(ckpt: Checkpoint, opt: OptimizerState, params: list[TensorInfo], beside: list[TensorInfo],
                   layout: Layout) -> tuple[str, str | None] | None:  # fmt: skip
    """What is wrong with one optimizer state: within itself, against the model in the file, or the model beside."""
    problem = _internal_problem(opt)
    if problem is None and params:
        # A DCP .metadata lists tensors in the order its ranks' save plans merged, not the model's:
        # int-keyed state can only be matched by count and shapes there
        by_id = ckpt.format == "dcp" and opt.entries and all(isinstance(k, int) for k in opt.entries)
        problem = _mismatch_unordered(opt, params, None) if by_id else _mismatch(opt, params, layout)
    if problem is None and beside:
        problem = _mismatch_unordered(opt, beside, layout.model_file)
    return problem


def _uneven_states(layout: Layout) -> list[tuple[str, str | None]]:
    """Per-parameter states that lack what the others of the same optimizer hold (a cut or salvaged file
    whose state entries lost their moments): torch keeps the same keys for every parameter it stepped."""
    found = (_uneven(prefix, opt.get("state")) for prefix, opt in layout.optimizers)
    return [problem for problem in found if problem is not None]


def _uneven(prefix: str, state: Any) -> tuple[str, str | None] | None:
    if not isinstance(state, Mapping):
        return None
    entries = {k: set(v) for k, v in state.items() if isinstance(v, Mapping)}  # odd entries: judged elsewhere
    union = set().union(*entries.values()) if entries else set()
    short = {k: union - keys for k, keys in entries.items() if keys != union}
    if not short:  # nothing short also when nothing is held at all
        return None
    shown = "; ".join(f"{k}: {', '.join(sorted(map(str, lacks)))}" for k, lacks in list(short.items())[:4])
    more = f"; and {len(short) - 4} more" if len(short) > 4 else ""
    return (
        f"optimizer state of {len(short)} of {len(entries)} parameters lacks what the others hold "
        f"({shown}{more}): cut short or salvaged; a resume fails at its first step or restarts those moments",
        f"{prefix}state.{next(iter(short))}",
    )


def _model_beside(layout: Layout) -> list[TensorInfo]:
    """The tensors of the model file an optimizer file belongs to (HF folders), listed without their values."""
    if layout.model_file is None:
        return []
    from ckinspect.formats import open_checkpoint  # listing only: a header or a pickle, never the data

    try:
        model = open_checkpoint(layout.model_file)
    except Exception:  # an unreadable model file is reported on its own
        return []
    if any(f.severity == "error" for f in model.findings):
        return []
    return model.tensors


def _mismatch_unordered(
    opt: OptimizerState, model: list[TensorInfo], model_file: Path | None
) -> tuple[str, str | None] | None:
    """An optimizer file against a model file whose tensor order is not the parameter order
    (safetensors lists by name): the counts and the shapes, as multisets, must fit."""
    where = Path(model_file).name if model_file else "the model file"
    count = len(opt.param_ids) if opt.param_ids is not None else len(opt.entries)
    if count > len(model):
        return f"optimizer tracks {count} parameters but {where} holds only {len(model)} tensors", None
    available: dict[tuple[int, ...], int] = {}
    for tensor in model:
        available[tensor.shape] = available.get(tensor.shape, 0) + 1
    for key in opt.param_ids if opt.param_ids is not None else list(opt.entries):
        known = opt.shape_of(key)
        if known is None:
            continue
        if available.get(known[0], 0) == 0:
            return f"{known[1]} has shape {_shape(known[0])}, which no tensor left in {where} has", known[1]
        available[known[0]] -= 1
    return None


def _internal_problem(opt: OptimizerState) -> tuple[str, str | None] | None:
    for key, entry in opt.entries.items():
        shapes = {leaf: t.shape for leaf, t in entry.items() if leaf in SHAPED_LEAVES}
        if len(set(shapes.values())) > 1:
            detail = ", ".join(f"{leaf} {_shape(s)}" for leaf, s in shapes.items())
            return f"optimizer state of parameter {key} disagrees with itself: {detail}", f"{opt.prefix}state.{key}"
    return _orphan_entries(opt)


def _orphan_entries(opt: OptimizerState) -> tuple[str, str | None] | None:
    if opt.param_ids is None:
        return None
    listed = set(opt.param_ids)
    orphans = [k for k in opt.entries if k not in listed]
    if not orphans:
        return None
    shown = ", ".join(map(str, orphans[:5])) + (" ..." if len(orphans) > 5 else "")
    return f"optimizer state has entries for parameters {shown} that no param group lists", None


def _mismatch(opt: OptimizerState, params: list[TensorInfo], layout: Layout) -> tuple[str, str | None] | None:
    prefix = layout.model_prefix or ""
    if opt.entries and not all(isinstance(k, int) for k in opt.entries):
        return _mismatch_by_name(opt, params, prefix)
    order = opt.param_ids if opt.param_ids is not None else sorted(opt.entries)
    if len(order) > len(params):
        return (
            f"optimizer tracks {len(order)} parameters but the model has only {len(params)} tensors "
            f"(a state saved for another model?)",
            None,
        )
    if len(order) == len(params):
        return _mismatch_in_order(opt, order, params)
    return _mismatch_in_subsequence(opt, order, params)


def _mismatch_in_order(
    opt: OptimizerState, order: list[Any], params: list[TensorInfo]
) -> tuple[str, str | None] | None:
    """One optimizer entry per model tensor, in order: state key i belongs to the i-th parameter."""
    for position, key in enumerate(order):
        known = opt.shape_of(key)
        if known and known[0] != params[position].shape:
            return _shape_message(known, params[position]), known[1]
    return None


def _mismatch_in_subsequence(
    opt: OptimizerState, order: list[Any], params: list[TensorInfo]
) -> tuple[str, str | None] | None:
    """Fewer parameters than model tensors (persistent buffers, frozen layers): the parameters are
    a subsequence of the model's tensors; every state's shape must fit the next one in order."""
    cursor = 0
    for key in order:
        known = opt.shape_of(key)
        if known is None:
            continue
        while cursor < len(params) and params[cursor].shape != known[0]:
            cursor += 1
        if cursor == len(params):
            return (
                f"{known[1]} has shape {_shape(known[0])}, which fits no model tensor left in order "
                f"(parameter {key} of {len(order)}; the model has {len(params)} tensors)",
                known[1],
            )
        cursor += 1
    return None


def _mismatch_by_name(opt: OptimizerState, params: list[TensorInfo], prefix: str) -> tuple[str, str | None] | None:
    by_name = {t.name: t for t in params}
    for key in opt.entries:
        known = opt.shape_of(key)
        if known is None:
            continue
        name = str(key)
        param = by_name.get(prefix + name) or by_name.get(name)
        if param is None:
            candidates = [t for t in params if t.name.endswith("." + name)]
            param = candidates[0] if candidates else None
        if param is None:
            return f"optimizer state for parameter {name} which the model does not have", known[1]
        if param.shape != known[0]:
            return _shape_message(known, param), known[1]
    return None


def _shape_message(known: tuple[tuple[int, ...], str], param: TensorInfo) -> str:
    return f"{known[1]} has shape {_shape(known[0])} but its parameter {param.name} is {_shape(param.shape)}"


def _shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(map(str, shape)) + ")"


# ---------------------------------------------------------------- bloat and leftovers


def bloat_findings(ckpt: Checkpoint, anatomy: Anatomy) -> list[Finding]:
    unused = anatomy.unused_bytes
    if anatomy.storage_bytes == 0 or unused <= BLOAT_MIN_BYTES or unused <= BLOAT_MIN_FRACTION * anatomy.storage_bytes:
        return []
    worst = max(anatomy.partly_used, key=lambda s: s.unused_bytes)
    share = unused / anatomy.storage_bytes
    if worst.largest_view is None:
        example = f"storage {worst.key} ({human_bytes(worst.nbytes)}) is referenced by no tensor"
    else:
        example = (
            f"{worst.largest_view} uses {human_bytes(worst.used_bytes)} of a {human_bytes(worst.nbytes)} storage; "
            "save a .clone() of a slice, not a view of its base"
        )
    return [
        Finding(
            "STORAGE_BLOAT",
            f"{human_bytes(unused)} ({unused:,} bytes, {share:.0%} of the storage) is saved but used by no tensor: "
            f"{example}",
            worst.largest_view,
        )
    ]


def leftover_findings(path: Path) -> list[Finding]:
    from ckinspect.analysis import leftovers

    findings = []
    for leftover in leftovers.find_leftovers(path):
        status = leftovers.classify(leftover)
        explained = status.explain()
        name = Path(leftover.tmp).name
        findings.append(Finding("LEFTOVER_TMP", explained if name in explained else f"{name}: {explained}"))
        if status.tmp_danger:  # a tmp is one rename away from being loaded: its pickle is judged too
            findings.append(Finding("UNSAFE_PICKLE", f"leftover {name}: {status.tmp_danger}"))
    return findings
