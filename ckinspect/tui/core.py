"""What the screens ask of the core, in one place: thin calls into ckinspect's own modules, plus the
TUI's name matcher. Per-tensor value statistics (the scan's numbers plus a histogram) are
ckinspect.analysis.value_stats's, the tensor export ckinspect.ops.export's. Sizes
and shapes are written by ckinspect.fmt, as in the reports.

Core modules are imported inside the functions that use them, so the app draws its first screen
before numpy or the readers load. Nothing here imports textual; it runs inside thread workers.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ckinspect.analysis.value_stats import ValueStats, tensor_value_stats
from ckinspect.model import Checkpoint, Finding, TensorInfo, worst_severity
from ckinspect.record import Record

if TYPE_CHECKING:
    from ckinspect.analysis.anatomy import Anatomy
    from ckinspect.analysis.diff import DeltaHistogram, DiffResult
    from ckinspect.analysis.drift import TensorDrift
    from ckinspect.io.folders import Listings
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


def export_tensors(ckpt: Checkpoint, names: list[str], fmt: str, folder: Path) -> Path:
    """The tensors shown (in the order shown) as CSV or JSON (report.tensor_table), written to a new file
    in `folder` (ops.export: atomic, never over an existing one). Returns its path."""
    from ckinspect.ops.export import write_new
    from ckinspect.report.tensor_table import tensor_table

    return write_new(folder, f"{Path(ckpt.path).name}-tensors", fmt, tensor_table(ckpt, names, fmt))


# ---------------------------------------------------------------- the backend the screens call


_F = TypeVar("_F", bound=Callable[..., Any])


def _listed(method: _F) -> _F:
    """The call answers questions about URL prefixes from the backend's own listings (io.folders.Listings)."""

    @functools.wraps(method)
    def call(self: Backend, *args: Any, **kwargs: Any) -> Any:
        with self.listings.in_use():
            return method(self, *args, **kwargs)

    return cast("_F", call)


class Backend:
    """What the screens ask of the core. Tests pass a subclass that serves hand-built Checkpoints.

    The app lives long: the URL prefixes it lists are kept in its own `listings` (sizes, kinds) until a
    screen reads again (`forget_listings`: a reload, a new search of the folders), never for its lifetime."""

    _listings: Listings | None = None

    @property
    def listings(self) -> Listings:
        if self._listings is None:
            from ckinspect.io.folders import Listings

            self._listings = Listings()
        return self._listings

    def forget_listings(self) -> None:
        """The next question about a URL lists its prefix afresh (objects written since are seen)."""
        self.listings.clear()

    @_listed
    def load(self, target: Path) -> Checkpoint:
        return load_checkpoint(target)

    @_listed
    def scan(self, ckpt: Checkpoint, progress: Progress | None = None) -> ScanOutcome:
        return scan_checkpoint(ckpt, progress)

    def summarize(self, ckpt: Checkpoint) -> Anatomy:
        from ckinspect.analysis.anatomy import summarize

        return summarize(ckpt)

    def optimizer_params(self, ckpt: Checkpoint) -> dict[str, str]:
        from ckinspect.analysis.params import optimizer_params

        return optimizer_params(ckpt)

    @_listed
    def find(self, paths: list[Path]) -> list[Path]:
        return find_checkpoints(paths)

    def unfinished(self, paths: list[Path], known: list[Path]) -> list[Path]:
        """Checkpoints a save died before writing: only their `.tmp` is on disk (leftovers.unfinished_saves)."""
        from ckinspect.analysis.leftovers import unfinished_saves
        from ckinspect.io.folders import on_disk

        local = [p for p in paths if on_disk(p)]  # their entry quotes a repair plan, which reads local files
        return list(unfinished_saves(local, set(known))) if local else []

    @_listed
    def run(self, paths: list[Path], progress: Callable[[int, int], None] = lambda done, total: None) -> Any:
        """The run one folder holds, every checkpoint judged (ckinspect.analysis.runs), or None when the
        paths are not one folder holding a run. `progress(checkpoints judged, checkpoints)` as they are."""
        from ckinspect.io.folders import names_folder

        if len(paths) != 1:
            return None
        if not names_folder(paths[0]):
            return None
        from ckinspect.analysis.runs import is_run, last_good

        run = last_good(paths[0], everything=True, progress=progress)
        return run if is_run(run) else None

    @_listed
    def value_stats(self, ckpt: Checkpoint, tensor: TensorInfo, progress: Progress | None = None) -> ValueStats:
        return tensor_value_stats(ckpt, tensor, progress)

    @_listed
    def diff(
        self, a: Checkpoint, b: Checkpoint, progress: Progress | None = None, *, quick: bool = False
    ) -> DiffResult:
        """`quick`: structure only, as `diff --quick` (no storage byte read)."""
        from ckinspect.analysis.diff import diff_checkpoints

        return diff_checkpoints(a, b, progress=as_fraction(progress), quick=quick)

    @_listed
    def delta_histogram(self, a: Checkpoint, ta: TensorInfo, b: Checkpoint, tb: TensorInfo) -> DeltaHistogram:
        from ckinspect.analysis.diff import delta_histogram

        return delta_histogram(a, ta, b, tb)

    def match_names(self, a: Checkpoint, b: Checkpoint) -> list[tuple[str | None, str | None]]:
        """(A name, B name) pairs as the diff matches them across layouts (model.x vs x)."""
        from ckinspect.analysis.diff import match_names

        return match_names(a, b)

    @_listed
    def weight_drift(self, ckpt: Checkpoint, progress: Progress | None = None) -> list[TensorDrift]:
        from ckinspect.analysis.drift import weight_drift

        return weight_drift(ckpt, progress=as_fraction(progress))

    def logit_drift(
        self, ckpt: Checkpoint, progress: Callable[[int, int], None] | None = None
    ) -> tuple[dict[str, Any] | None, str]:
        """(the logit drift, or None; why not, when None). Imports torch when the model is known.
        `progress(blocks done, blocks)` as the model runs block by block."""
        from ckinspect.analysis.drift import logit_drift_or_why

        logits, reason = logit_drift_or_why(ckpt, progress=progress)
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
