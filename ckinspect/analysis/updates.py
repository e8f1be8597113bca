"""What changed between two saves of one run: the relative update ||Δw|| / ||w|| per tensor, summed up per
group and per layer, the step delta, and the optimizer's moment statistics.

    updates = compare_saves(previous, current)      # two Checkpoints opened by the readers (listing only)
    updates.groups["model"].ratio                   # ||w_now - w_before|| / ||w_before|| over the model
    updates.layers["model.layers.0.attn.wq"]        # the same per layer (the module owning the parameters)
    updates.moments["exp_avg_sq"].rms               # AdamW's second moments in the newer save

Tensors are paired the way `ckinspect diff` pairs them (analysis.diff.match_names) and streamed in bounded
blocks through the one value decoder (io.values): memory does not grow with the checkpoint. No torch.

A save's values can come from memory instead of its file: `compared_values(listed, budget)` asks the
value scan to keep them (scan.Kept) as it reads the save once, and `compare_saves(..., previous_values=,
current_values=)` takes them; blocks are cut exactly as from the file, so every figure is the same.
"""

from __future__ import annotations

import contextlib
import math

from ckinspect.analysis.diff import _aligned, kept_blocks, match_names, roles, value_blocks
from ckinspect.analysis.scan import Kept
from ckinspect.io.blobs import Blobs, UnreadableStorage
from ckinspect.io.values import decode
from ckinspect.model import Checkpoint, TensorInfo
from ckinspect.record import Record, field

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")
# Half-precision files round an update smaller than their step away: a layer is judged "not changing"
# only where the file keeps enough bits to see a training step.
FULL_PRECISION = ("float32", "float64")
# Optimizer moments whose statistics are reported (AdamW, Adam, SGD with momentum, Adafactor's factors).
MOMENT_NAMES = ("exp_avg", "exp_avg_sq", "momentum_buffer", "exp_avg_sq_row", "exp_avg_sq_col", "max_exp_avg_sq")
RATIO_GROUPS = ("model", "optimizer")


class Norms(Record):
    """Sums of squares over some tensors: of the older values and of the change."""

    __hash__ = None  # type: ignore[assignment]  # summed into as tensors are read

    delta_sq: float = 0.0
    base_sq: float = 0.0
    tensors: int = 0
    changed: int = 0  # tensors with at least one value that differs
    full_precision: bool = True  # every tensor is fp32/fp64 (a bit-identical one really did not move)
    nonfinite: bool = False  # a NaN or Inf on either side: no ratio

    @property
    def ratio(self) -> float | None:
        if self.nonfinite or self.tensors == 0:
            return None
        if self.base_sq == 0.0:
            return 0.0 if self.delta_sq == 0.0 else math.inf
        return math.sqrt(self.delta_sq) / math.sqrt(self.base_sq)

    def add(self, other: Norms) -> None:
        self.delta_sq += other.delta_sq
        self.base_sq += other.base_sq
        self.tensors += other.tensors
        self.changed += other.changed
        self.full_precision &= other.full_precision
        self.nonfinite |= other.nonfinite

    def to_json(self) -> dict[str, Any]:
        return {"ratio": _num(self.ratio), "tensors": self.tensors, "changed": self.changed}


class MomentStats(Record):
    """One kind of optimizer moment (exp_avg, exp_avg_sq ...) over all parameters of the newer save."""

    __hash__ = None  # type: ignore[assignment]

    count: int = 0
    sum_sq: float = 0.0
    max_abs: float = 0.0
    nonfinite: int = 0

    @property
    def rms(self) -> float | None:
        return math.sqrt(self.sum_sq / self.count) if self.count else None

    def to_json(self) -> dict[str, Any]:
        return {"rms": _num(self.rms), "max_abs": _num(self.max_abs), "count": self.count, "nonfinite": self.nonfinite}


class Updates(Record):
    """Everything `compare_saves` measured."""

    __hash__ = None  # type: ignore[assignment]

    previous_step: int | None = None
    step: int | None = None
    groups: dict[str, Norms] = field(default_factory=dict)
    layers: dict[str, Norms] = field(default_factory=dict)  # model layers
    moments: dict[str, MomentStats] = field(default_factory=dict)
    unpaired: int = 0  # tensors on only one side, or whose shapes differ
    unreadable: list[str] = field(default_factory=list)

    @property
    def step_delta(self) -> int | None:
        if self.step is None or self.previous_step is None:
            return None
        return self.step - self.previous_step

    def ratio(self, group: str) -> float | None:
        norms = self.groups.get(group)
        return norms.ratio if norms is not None else None

    def merge(self, other: Updates) -> None:
        """Add another part's measurements (a checkpoint made of several files)."""
        for mine, theirs in ((self.groups, other.groups), (self.layers, other.layers)):
            for name, norms in theirs.items():
                mine.setdefault(name, Norms()).add(norms)
        for name, stats in other.moments.items():
            into = self.moments.setdefault(name, MomentStats())
            into.count += stats.count
            into.sum_sq += stats.sum_sq
            into.max_abs = max(into.max_abs, stats.max_abs)
            into.nonfinite += stats.nonfinite
        self.unpaired += other.unpaired
        self.unreadable.extend(other.unreadable)
        self.step = self.step if self.step is not None else other.step
        self.previous_step = self.previous_step if self.previous_step is not None else other.previous_step

    def to_json(self) -> dict[str, Any]:
        return {
            "previous_step": self.previous_step,
            "step": self.step,
            "step_delta": self.step_delta,
            "groups": {name: norms.to_json() for name, norms in self.groups.items()},
            "layers": {name: norms.to_json() for name, norms in self.layers.items()},
            "moments": {name: stats.to_json() for name, stats in self.moments.items()},
            "unpaired": self.unpaired,
            "unreadable": list(self.unreadable),
        }


def layer_of(name: str) -> str:
    """The module that owns a parameter: its name without the last part (`...attn.wq.weight` -> `...attn.wq`)."""
    return name.rsplit(".", 1)[0] if "." in name else name


def moment_of(name: str) -> str | None:
    last = name.rsplit(".", 1)[-1]
    return last if last in MOMENT_NAMES else None


def compared_values(listed: Checkpoint, budget: int) -> Kept:
    """What `compare_saves` reads of this save, for its value scan to keep (up to `budget` bytes): the
    float tensors of the ratio groups, but for the optimizer's per-parameter step counters."""
    groups = roles(listed)
    names = {t.name for t in listed.tensors if _compared(groups.get(t.name, t.group), t)}
    return Kept(names, budget)


def _compared(group: str, t: TensorInfo) -> bool:
    if group not in RATIO_GROUPS or t.dtype not in FLOAT_DTYPES:
        return False
    return not (group == "optimizer" and t.numel <= 1)  # a step counter would swamp the moments' norms


def compare_saves(
    previous: Checkpoint,
    current: Checkpoint,
    previous_files: Blobs | None = None,
    previous_values: dict[str, Any] | None = None,
    current_values: dict[str, Any] | None = None,
) -> Updates:
    """||Δw|| / ||w|| per group and model layer, the step delta and the moment statistics (see module doc).

    `previous_files`: the previous save's files, opened when it was read. A trainer that saves again under
    the same name replaces the file; descriptors opened before still read the older bytes.
    `previous_values`, `current_values`: raw elements kept by each save's value scan (scan.Kept.values);
    a tensor not among them is read from its file.
    """
    out = Updates(previous_step=_step(previous), step=_step(current))
    groups = roles(current)
    mine = {t.name: t for t in current.tensors}
    theirs = {t.name: t for t in previous.tensors}
    with contextlib.ExitStack() as stack:
        blobs_prev = previous_files if previous_files is not None else stack.enter_context(Blobs())
        blobs_cur = stack.enter_context(Blobs())
        for before_name, now_name in match_names(previous, current):
            if before_name is None or now_name is None:
                out.unpaired += 1
                continue
            before, now = theirs[before_name], mine[now_name]
            group = groups.get(now.name, now.group)
            if not _compared(group, now) or before.dtype not in FLOAT_DTYPES:
                continue
            if before.shape != now.shape:
                out.unpaired += 1
                continue
            try:
                norms, moment = _tensor_update(
                    _blocks(previous_values, blobs_prev, previous, before),
                    before,
                    _blocks(current_values, blobs_cur, current, now),
                    now,
                )
            except (UnreadableStorage, KeyError, OSError, ValueError) as exc:
                out.unreadable.append(f"{now.name}: {exc}")
                continue
            out.groups.setdefault(group, Norms()).add(norms)
            if group == "model":
                out.layers.setdefault(layer_of(now.name), Norms()).add(norms)
            kind = moment_of(now.name)
            if kind is not None and group == "optimizer":
                into = out.moments.setdefault(kind, MomentStats())
                into.count += moment.count
                into.sum_sq += moment.sum_sq
                into.max_abs = max(into.max_abs, moment.max_abs)
                into.nonfinite += moment.nonfinite
    return out


def _blocks(values: dict[str, Any] | None, blobs: Blobs, ckpt: Checkpoint, t: TensorInfo) -> Iterator[Any]:
    """The tensor's raw elements in blocks: from the values its scan kept, else from its file."""
    kept = values.get(t.name) if values else None
    if kept is not None and t.is_contiguous and len(kept) == t.numel:
        return kept_blocks(kept)
    return value_blocks(blobs, ckpt, t)


def _tensor_update(
    blocks_before: Iterator[Any], before: TensorInfo, blocks_now: Iterator[Any], now: TensorInfo
) -> tuple[Norms, MomentStats]:
    import numpy as np

    norms = Norms(tensors=1, full_precision=now.dtype in FULL_PRECISION and before.dtype in FULL_PRECISION)
    moment = MomentStats()
    changed = False
    for xa, xb in _aligned(blocks_before, blocks_now):
        fa, fb = decode(xa, before.dtype), decode(xb, now.dtype)
        finite_a, finite_b = np.isfinite(fa), np.isfinite(fb)
        if not (finite_a.all() and finite_b.all()):
            norms.nonfinite = True
            moment.nonfinite += int(fb.size - np.count_nonzero(finite_b))
            fa, fb = np.where(finite_a, fa, 0.0), np.where(finite_b, fb, 0.0)
        delta = fb - fa
        changed = changed or bool(np.any(delta != 0.0) or not np.array_equal(xa, xb))
        norms.delta_sq += float(np.dot(delta, delta))
        norms.base_sq += float(np.dot(fa, fa))
        moment.count += int(np.count_nonzero(finite_b))
        moment.sum_sq += float(np.dot(fb, fb))
        if fb.size:
            moment.max_abs = max(moment.max_abs, float(np.max(np.abs(fb))))
    norms.changed = int(changed)
    return norms, moment


def _step(ckpt: Checkpoint) -> int | None:
    step = ckpt.metadata.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def _num(x: float | None) -> float | str | None:
    if x is None or math.isfinite(x):
        return x
    return "inf" if x > 0 else "nan"
