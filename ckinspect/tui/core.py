"""What the screens ask of the core, in one place: thin calls into ckinspect's own modules, plus the
TUI's name matcher and its per-tensor value statistics (the scan's numbers plus a histogram). Sizes
and shapes are written by ckinspect.fmt, as in the reports.

Core modules are imported inside the functions that use them, so the app draws its first screen
before numpy or the readers load. Nothing here imports textual; it runs inside thread workers.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckinspect.model import Checkpoint, Finding, TensorInfo, worst_severity
from ckinspect.record import Record, field

if TYPE_CHECKING:
    from ckinspect.analysis.anatomy import Anatomy
    from ckinspect.analysis.diff import DeltaHistogram, DiffResult
    from ckinspect.analysis.drift import TensorDrift
    from ckinspect.ops.repair import ApplyResult, RepairPlan, UndoResult

Progress = Callable[[float], object]  # fraction done, 0.0 .. 1.0; what it returns is ignored


def as_fraction(report: Progress | None) -> Callable[[int, int], None] | None:
    """The core reports progress as (done, total) bytes; the screens draw a fraction."""
    if report is None:
        return None

    def fraction(done: int, total: int) -> None:
        report(min(1.0, done / total) if total > 0 else 0.0)

    return fraction


# ---------------------------------------------------------------- loading


def load_checkpoint(target: str | Path) -> Checkpoint:
    """Structure only (quick): the first screen must not wait for a value scan."""
    from ckinspect.analysis.inspect import inspect_path
    from ckinspect.io.remote import as_path

    return inspect_path(as_path(target), quick=True)


class ScanOutcome(Record):
    __hash__ = None  # type: ignore[assignment]  # changed after it is built

    findings: list[Finding]  # only those not already on the checkpoint
    stats: dict[str, ValueStats]  # per tensor, from the scan (no histogram)


def scan_checkpoint(ckpt: Checkpoint, progress: Progress | None = None) -> ScanOutcome:
    """The value scan: findings (NONFINITE, FP16_OVERFLOW, CRC ...) and per-tensor statistics."""
    from ckinspect.analysis.scan import scan_values

    result = scan_values(ckpt, progress=as_fraction(progress))
    known = {(f.code, f.message, f.tensor) for f in ckpt.findings}
    stats = {
        name: ValueStats(s.count, s.min, s.max, s.mean, s.std, s.nonfinite, s.fp16_overflow)
        for name, s in result.stats.items()
    }
    return ScanOutcome([f for f in result.findings if (f.code, f.message, f.tensor) not in known], stats)


def add_findings(ckpt: Checkpoint, findings: list[Finding]) -> None:
    """Add the scan's findings to the checkpoint, each once (the folder view and the file view may both scan it)."""
    known = {(f.code, f.message, f.tensor) for f in ckpt.findings}
    for f in findings:
        if (f.code, f.message, f.tensor) not in known:
            known.add((f.code, f.message, f.tensor))
            ckpt.findings.append(f)


def find_checkpoints(paths: list[Path]) -> list[Path]:
    from ckinspect.formats.discover import find_checkpoints as find

    return [target.path for target in find(paths)]


# ---------------------------------------------------------------- verdicts
def safe_load_verdict(ckpt: Checkpoint) -> tuple[str, str]:
    """(one-line verdict, severity) on whether `torch.load(weights_only=True)` would open it."""
    codes = {f.code for f in ckpt.findings}
    if "UNSAFE_PICKLE" in codes:
        return "UNSAFE: names code-running globals (nothing executed)", "error"
    if ckpt.format == "unknown":
        return "not a checkpoint (see findings)", "error"
    if "CORRUPT" in codes:
        return "corrupt: cannot be read whole", "error"
    if "MISSING_PARTS" in codes:
        return "incomplete: parts its records name are missing", "error"
    if "ALLOWLIST_NEEDED" in codes:
        return "needs an allowlist for weights_only=True", "warning"
    if ckpt.format == "safetensors" or ckpt.format == "sharded":
        return "safe: no code in the format", "ok"
    return "safe: loads with weights_only=True", "ok"


def severity_badges(findings: list[Finding]) -> str:
    """'2E 1W' style badge text for a list of findings ('' when clean)."""
    counts = {"error": 0, "warning": 0, "info": 0}
    for f in findings:
        counts[f.severity] = counts.get(f.severity, 0) + 1
    parts = [f"{counts[s]}{s[0].upper()}" for s in ("error", "warning", "info") if counts.get(s)]
    return " ".join(parts)


def verdict_of(findings: list[Finding]) -> str:
    return worst_severity(findings) or "ok"


# ---------------------------------------------------------------- names


def name_matcher(pattern: str) -> Callable[[str], bool]:
    """Substring match, or a glob when the pattern holds * ? or [ ; case-insensitive either way."""
    pattern = pattern.strip()
    if not pattern:
        return lambda name: True
    if any(ch in pattern for ch in "*?["):
        regex = re.compile(fnmatch.translate(pattern), re.IGNORECASE)
        return lambda name: regex.match(name) is not None
    needle = pattern.lower()
    return lambda name: needle in name.lower()


_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[Any, ...]:
    """Sort key that orders `state.2` before `state.10` (numbers as numbers, the rest as text)."""
    return tuple(int(part) if i % 2 else part.lower() for i, part in enumerate(_DIGITS.split(name)))


# ---------------------------------------------------------------- value statistics


class ValueStats(Record):
    __hash__ = None  # type: ignore[assignment]  # changed after it is built

    count: int
    minimum: float | None = None
    maximum: float | None = None
    mean: float | None = None
    std: float | None = None  # with Bessel's correction, as torch.std and the value scan
    nonfinite: int = 0
    fp16_overflow: int = 0
    histogram: list[int] = field(default_factory=list)
    hist_range: tuple[float, float] = (0.0, 0.0)
    sampled: bool = False  # the histogram is drawn from an evenly strided sample


HISTOGRAM_BINS = 24
_SAMPLE_LIMIT = 1_000_000
_BLOCK_ELEMENTS = 1 << 20  # elements decoded at once (8 MiB of float64)


def tensor_value_stats(ckpt: Checkpoint, tensor: TensorInfo, progress: Progress | None = None) -> ValueStats:
    """min, max, mean, std, non-finite and fp16-overflow counts and a small histogram.

    The values come from the shared block reader (io.values: any layout, strided views included) and
    the statistics from the value scan's own implementation (analysis.stats); what is computed here is
    only what the details pane draws and the scan does not keep: the histogram.
    """
    import numpy as np

    from ckinspect.analysis.stats import OVERFLOW_DTYPES, Moments, block_moments
    from ckinspect.dtypes import dtype_info
    from ckinspect.io.blobs import Blobs, UnreadableStorage
    from ckinspect.io.values import decode, raw_blocks

    info = dtype_info(tensor.dtype)
    if info.kind == "complex":
        raise ValueError(f"value statistics of {tensor.dtype} tensors are not computed")
    storage = ckpt.storages.get(tensor.storage_key)
    if storage is None:
        raise UnreadableStorage(f"storage {tensor.storage_key} of {tensor.name} is not in the checkpoint")
    floating = info.is_floating
    stats = ValueStats(count=tensor.numel)
    if tensor.numel == 0:
        return stats
    step = max(1, tensor.numel // _SAMPLE_LIMIT)
    stats.sampled = step > 1
    samples: list[Any] = []
    moments = Moments()
    count_overflow = tensor.dtype in OVERFLOW_DTYPES
    index = 0
    with Blobs() as blobs:
        for raw in raw_blocks(blobs, storage, tensor, _BLOCK_ELEMENTS):
            values = decode(raw, tensor.dtype)
            moments.merge(block_moments(values, count_overflow))
            picked = values[(-index) % step :: step]
            samples.append(picked[np.isfinite(picked)] if floating else picked)
            index += values.size
            if progress is not None:
                progress(index / tensor.numel)

    summary = moments.stats()
    stats.nonfinite, stats.fp16_overflow = summary.nonfinite, summary.fp16_overflow
    if moments.n:
        lo, hi = moments.mn, moments.mx
        stats.minimum, stats.maximum, stats.mean = lo, hi, summary.mean
        if moments.n > 1:
            stats.std = summary.std
        sample = np.concatenate(samples)
        if sample.size:
            counts, edges = np.histogram(
                sample, bins=HISTOGRAM_BINS, range=(lo, hi) if hi > lo else (lo - 0.5, hi + 0.5)
            )
            stats.histogram = [int(c) for c in counts]
            stats.hist_range = (float(edges[0]), float(edges[-1]))
    return stats


# ---------------------------------------------------------------- export


EXPORT_FIELDS = ("name", "group", "dtype", "shape", "bytes", "param")


def export_tensors(ckpt: Checkpoint, names: list[str], fmt: str, folder: Path) -> Path:
    """The tensors shown (in the order shown) as CSV or JSON, the JSON report's tensor entries; written
    atomically to a new file in `folder` (never over an existing one). Returns its path."""
    import csv
    import io
    import json

    from ckinspect.analysis.params import optimizer_params
    from ckinspect.io.atomic import atomic_write_text
    from ckinspect.report.json_report import tensor_entries

    by_name = {t.name: t for t in ckpt.tensors}
    entries = tensor_entries([by_name[n] for n in names if n in by_name], optimizer_params(ckpt))
    if fmt == "json":
        text = json.dumps({"path": str(ckpt.path), "tensors": entries}, indent=1) + "\n"
    else:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, EXPORT_FIELDS, lineterminator="\n")
        writer.writeheader()
        for entry in entries:
            writer.writerow({**entry, "shape": "x".join(map(str, entry["shape"]))})
        text = buffer.getvalue()
    stem = f"{Path(ckpt.path).name}-tensors"
    target = folder / f"{stem}.{fmt}"
    n = 1
    while target.exists():
        target = folder / f"{stem}-{n}.{fmt}"
        n += 1
    atomic_write_text(target, text)
    return target


# ---------------------------------------------------------------- the backend the screens call


class Backend:
    """What the screens ask of the core. Tests pass a subclass that serves hand-built Checkpoints."""

    def load(self, target: Path) -> Checkpoint:
        return load_checkpoint(target)

    def scan(self, ckpt: Checkpoint, progress: Progress | None = None) -> ScanOutcome:
        return scan_checkpoint(ckpt, progress)

    def summarize(self, ckpt: Checkpoint) -> Anatomy:
        from ckinspect.analysis.anatomy import summarize

        return summarize(ckpt)

    def optimizer_params(self, ckpt: Checkpoint) -> dict[str, str]:
        from ckinspect.analysis.params import optimizer_params

        return optimizer_params(ckpt)

    def find(self, paths: list[Path]) -> list[Path]:
        return find_checkpoints(paths)

    def unfinished(self, paths: list[Path], known: list[Path]) -> list[Path]:
        """Checkpoints a save died before writing: only their `.tmp` is on disk (leftovers.unfinished_saves)."""
        from ckinspect.analysis.leftovers import unfinished_saves
        from ckinspect.io.folders import on_disk

        local = [p for p in paths if on_disk(p)]  # their entry quotes a repair plan, which reads local files
        return list(unfinished_saves(local, set(known))) if local else []

    def run(self, paths: list[Path]) -> Any:
        """The run one folder holds, every checkpoint judged (ckinspect.analysis.runs), or None when the
        paths are not one folder holding a run."""
        from ckinspect.io.folders import names_folder

        if len(paths) != 1:
            return None
        if not names_folder(paths[0]):
            return None
        from ckinspect.analysis.runs import is_run, last_good

        run = last_good(paths[0], everything=True)
        return run if is_run(run) else None

    def value_stats(self, ckpt: Checkpoint, tensor: TensorInfo, progress: Progress | None = None) -> ValueStats:
        return tensor_value_stats(ckpt, tensor, progress)

    def diff(
        self, a: Checkpoint, b: Checkpoint, progress: Progress | None = None, *, quick: bool = False
    ) -> DiffResult:
        """`quick`: structure only, as `diff --quick` (no storage byte read)."""
        from ckinspect.analysis.diff import diff_checkpoints

        return diff_checkpoints(a, b, progress=as_fraction(progress), quick=quick)

    def delta_histogram(self, a: Checkpoint, ta: TensorInfo, b: Checkpoint, tb: TensorInfo) -> DeltaHistogram:
        from ckinspect.analysis.diff import delta_histogram

        return delta_histogram(a, ta, b, tb)

    def match_names(self, a: Checkpoint, b: Checkpoint) -> list[tuple[str | None, str | None]]:
        """(A name, B name) pairs as the diff matches them across layouts (model.x vs x)."""
        from ckinspect.analysis.diff import match_names

        return match_names(a, b)

    def weight_drift(self, ckpt: Checkpoint, progress: Progress | None = None) -> list[TensorDrift]:
        from ckinspect.analysis.drift import weight_drift

        return weight_drift(ckpt, progress=as_fraction(progress))

    def logit_drift(self, ckpt: Checkpoint) -> tuple[dict[str, Any] | None, str]:
        """(the logit drift, or None; why not, when None). Imports torch when the model is known."""
        from ckinspect.analysis.drift import logit_drift_or_why

        logits, reason = logit_drift_or_why(ckpt)
        return logits, reason or ""

    def plan_repairs(self, path: Path) -> RepairPlan:
        from ckinspect.ops.repair import plan_repairs

        return plan_repairs(path)

    def apply_plan(self, plan: RepairPlan) -> ApplyResult:
        from ckinspect.ops.repair import apply_plan

        return apply_plan(plan)

    def undo(self, folder: Path) -> UndoResult:
        from ckinspect.ops.repair import undo

        return undo(folder)


def format_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)
