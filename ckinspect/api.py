"""The public Python API: what the commands print, as objects a training script can use.

    report = ckinspect.inspect("runs/step_60_resume.pth")       # Report: .format .tensors .findings ...
    result = ckinspect.diff("a.pth", "b.pth", only=["model"])   # DiffResult: .identical .changed ...
    resume = ckinspect.last_good("runs/")                      # the CLI's answer: a path, or None
    run = ckinspect.judge_run("runs/")                         # what the answer needs judged (all=True: all)

Torch-free where the CLI is (opening, listing, the value scan, diff, judging a run); nothing here
prints or exits. Every error is a `CkinspectError` (a path that does not exist or cannot be read, a
bad argument, a failed remote read); a bug of ours is its subclass `InternalError`, the original
exception chained. Bad content is never an error: it is a finding. Paths may be URLs wherever the CLI
takes them. `to_json()` gives what `--format json` prints for the same call, key for key.

The commands are thin layers over the private functions below (`open_report`, `compare`, `judged_run`),
which raise what the readers raise, so that the CLI keeps its own one-line error handling.
"""

from __future__ import annotations

import os
from pathlib import PurePath

from ckinspect.model import Checkpoint, Finding, TensorInfo
from ckinspect.record import Record
from ckinspect.vocab import NOT_JUDGED, SEVERITY_RANK, CkinspectError, InternalError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, TypeVar

    from ckinspect.analysis.diff import DiffResult as _Diff
    from ckinspect.analysis.diff import TensorChange
    from ckinspect.analysis.runs import Run, RunCheckpoint

    T = TypeVar("T")

__all__ = [
    "Candidate",
    "CheckpointRejected",
    "CkinspectError",
    "DiffResult",
    "Finding",
    "InternalError",
    "Report",
    "RunVerdict",
    "TensorInfo",
    "diff",
    "inspect",
    "judge_checkpoint",
    "judge_run",
    "last_good",
]

# ------------------------------------------------------------------------------------------------ results


class Report(Record):
    """One checkpoint as `ckinspect --report PATH` reports it (file, sharded set or DCP folder)."""

    __hash__ = None  # type: ignore[assignment]

    path: PurePath  # a Path; for a URL, a PurePosixPath whose str() is the URL
    format: str  # torch-zip, torch-legacy, torchscript, safetensors, sharded, dcp, pickle, numpy, unknown
    layout: str  # the recogniser that mapped roles: trainer, lightning, nanogpt, hf ... or unknown
    tensors: list[TensorInfo]  # .name .dtype .shape .group .nbytes ...
    optimizer_share: float  # optimizer bytes / all tensor bytes (storages counted once)
    metadata: dict[str, Any]  # step, epoch, world_size (None when unknown) and what the file says beside them
    findings: list[Finding]  # .code .severity .message .tensor
    quick: bool  # True: structure only, no value scan (no NONFINITE/FP16_OVERFLOW/CRC findings)
    checkpoint: Checkpoint  # the full data model, for what this class does not name

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    def to_json(self) -> dict[str, Any]:
        """The entry of `ckinspect --report PATH --format json`'s `files` for this checkpoint."""
        from ckinspect.report.json_report import file_entry

        return file_entry(self.checkpoint)

    @classmethod
    def of(cls, ckpt: Checkpoint, quick: bool) -> Report:
        from ckinspect.report.json_report import file_entry

        entry = file_entry(ckpt)
        return cls(
            path=ckpt.path,
            format=ckpt.format,
            layout=ckpt.layout,
            tensors=list(ckpt.tensors),
            optimizer_share=entry["optimizer_share"],
            metadata=entry["metadata"],
            findings=list(ckpt.findings),
            quick=quick,
            checkpoint=ckpt,
        )


class DiffResult(Record):
    """Two checkpoints compared tensor by tensor, and the values beside them (`ckinspect diff --report`)."""

    __hash__ = None  # type: ignore[assignment]

    a: Report
    b: Report
    verdict: str  # identical, different, or unknown (tensors that could not be read, nothing else differs)
    changed: list[TensorChange]  # .name .reason (values|shape|dtype) .max_abs_diff ...
    only_a: list[str]  # tensor names only A holds
    only_b: list[str]
    same: int  # tensors equal (bit for bit, or within atol)
    result: _Diff  # the analysis' full result (metadata and value changes, what was not compared ...)

    @property
    def identical(self) -> bool:
        return self.verdict == "identical"

    def to_json(self) -> dict[str, Any]:
        """The `diff` object of `ckinspect diff A B --report --format json`."""
        return self.result.to_json()


class Candidate(Record):
    """One checkpoint of a run with its verdict (`ckinspect last-good --format json`'s `checkpoints`)."""

    __hash__ = None  # type: ignore[assignment]

    path: PurePath
    framework: str  # deepspeed, hf-trainer, accelerate, megatron, dcp, lightning, trainer, sharded, file
    step: int | None
    verdict: str  # good, incomplete, damaged, unsafe, not-resumable; not-judged: the answer did not need it
    reasons: list[str]  # why it is not good, one line each
    held_against: list[Finding]  # the same reasons as findings (a part's message starts with the part)
    findings: list[Finding]  # every finding of the checkpoint and its parts, held against it or not
    notes: list[str]  # what was seen and does not disqualify it
    parts: list[PurePath]
    values_checked: bool  # its CRCs and values were read (False under quick, or for one never a candidate)
    checkpoint: RunCheckpoint

    @property
    def good(self) -> bool:
        return self.verdict == "good"

    def to_json(self) -> dict[str, Any]:
        return self.checkpoint.to_json()

    @classmethod
    def of(cls, ckpt: RunCheckpoint) -> Candidate:
        return cls(
            path=ckpt.path,
            framework=ckpt.framework,
            step=ckpt.step,
            verdict=ckpt.verdict or NOT_JUDGED,
            reasons=list(ckpt.reasons),
            held_against=list(ckpt.held_against),
            findings=ckpt.located_findings(),
            notes=list(ckpt.notes),
            parts=[part.path for part in ckpt.parts],
            values_checked=ckpt.values_checked,
            checkpoint=ckpt,
        )


class RunVerdict(Record):
    """A run folder judged: every candidate, oldest first, and what the run's pointers say."""

    __hash__ = None  # type: ignore[assignment]

    path: PurePath
    candidates: list[Candidate]
    findings: list[Finding]  # the run's own: a `latest` naming a missing tag ...
    run: Run

    @property
    def last_good(self) -> Candidate | None:
        return next((c for c in reversed(self.candidates) if c.good), None)

    def to_json(self) -> dict[str, Any]:
        """The `run` object of `ckinspect last-good RUN_DIR --format json`."""
        return self.run.to_json()


class CheckpointRejected(CkinspectError):
    """A save judged and refused under `fail_on` (the integrations raise it): `.candidate` is the judged
    checkpoint, `.findings` those at or above the threshold; the message names the first."""

    def __init__(self, candidate: Candidate, findings: list[Finding]) -> None:
        self.candidate = candidate
        self.findings = findings
        first = findings[0]
        more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
        super().__init__(f"{candidate.path}: {candidate.verdict or 'judged'}: {first.code}: {first.message}{more}")


def rejection(candidate: Candidate, fail_on: str | None) -> CheckpointRejected | None:
    """The exception `fail_on` ("error", "warning"; None or "never": none) asks for, or None: the findings of
    what the framework loads on resume (and the reasons the checkpoint is no resume point) at or above it."""
    if fail_on in (None, "never"):
        return None
    ckpt = candidate.checkpoint
    loaded = [*ckpt.findings, *(ckpt.located(f, part) for part in ckpt.parts if part.loaded for f in part.findings)]
    seen: set[tuple[str, str]] = set()
    reached = []
    for finding in [*candidate.held_against, *loaded]:
        if SEVERITY_RANK[finding.severity] >= SEVERITY_RANK[fail_on] and (finding.code, finding.message) not in seen:
            seen.add((finding.code, finding.message))
            reached.append(finding)
    return CheckpointRejected(candidate, reached) if reached else None


# ------------------------------------------------------------------------------------------------ the API


def inspect(path: str | os.PathLike[str], *, quick: bool = False) -> Report:
    """Open one checkpoint (a file, a sharded set's index, a DCP folder; or a URL) and check it; unless
    `quick`, scan every value (NaN/Inf, fp16 range, CRCs). A folder holding several checkpoints is an
    error that names them: inspect each, or judge the run (`judge_run`)."""

    def run() -> Report:
        from ckinspect.formats.tree import no_gc

        with no_gc():  # as the command: full passes of the collector over a listing find nothing to free
            return Report.of(open_report(path, quick=quick), quick)

    return _guarded(run)


def diff(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str],
    *,
    quick: bool = False,
    only: Sequence[str] | None = None,
    atol: float = 0.0,
) -> DiffResult:
    """Compare B with A: tensors matched by name across layouts, bytes first, values where bytes differ.
    `only`: groups to compare (model, optimizer, rng, other); `atol`: values within it count as the same.
    `quick`: structure only (names, dtypes, shapes, sizes, layouts and the non-tensor values), no storage
    byte read; its verdict is at best "same structure", never "identical" without comparing."""

    def run() -> DiffResult:
        from ckinspect.formats.tree import no_gc

        with no_gc():  # as the command: the collector's full passes over two listings found nothing to free
            left, right = open_checked(a, structure_only=quick), open_checked(b, structure_only=quick)
            result = compare(left, right, only=list(only) if only else None, atol=atol, quick=quick)
            return DiffResult(
                a=Report.of(left, True),
                b=Report.of(right, True),
                verdict=result.verdict,
                changed=list(result.changed),
                only_a=list(result.only_a),
                only_b=list(result.only_b),
                same=len(result.same),
                result=result,
            )

    return _guarded(run)


def last_good(
    run_dir: str | os.PathLike[str], *, quick: bool = False, verify: bool = False, missing_ok: bool = False
) -> PurePath | None:
    """The newest checkpoint of the run that is whole, intact, safe, resumable and (unless `quick`) finite,
    or None: the path `ckinspect last-good RUN_DIR` prints, with the same `--quick` (structure only, no value
    read) and `--verify` (the values of every checkpoint judged, not only of the one named). A Path; for a
    URL prefix, a PurePosixPath whose str() is the checkpoint's URL. A local `run_dir` that does not exist
    is an error (a mistyped path must not start a run afresh), or with `missing_ok` None: a first launch."""

    def run() -> PurePath | None:
        from ckinspect.io import folders

        if missing_ok and folders.known_missing(run_dir):
            return None
        best = judged_run(run_dir, quick=quick, verify=verify).last_good
        return None if best is None else best.path

    return _guarded(run)


def judge_run(
    run_dir: str | os.PathLike[str], *, quick: bool = False, verify: bool = False, all: bool = False
) -> RunVerdict:
    """The run's checkpoints, oldest first, each with its verdict and reasons: `ckinspect last-good RUN_DIR
    --format json` (same `quick`, `verify` and `all`). What the answer needs is judged, at the cost of
    `last_good`: newest first, the newer checkpoints that fail, then the answer; the older ones have the
    verdict "not-judged" (vocab.NOT_JUDGED). `all`: every checkpoint judged (the same answer)."""

    def run() -> RunVerdict:
        judged = judged_run(run_dir, quick=quick, verify=verify, everything=all)
        return RunVerdict(
            path=judged.path,
            candidates=[Candidate.of(c) for c in judged.checkpoints],
            findings=list(judged.findings),
            run=judged,
        )

    return _guarded(run)


def judge_checkpoint(path: str | os.PathLike[str], *, quick: bool = False) -> Candidate:
    """One checkpoint judged on its own, as `judge_run` would judge it in its run: an HF `checkpoint-N/`,
    an Accelerate `save_state` folder, a DeepSpeed tag, a DCP folder, a Lightning `.ckpt` ... Only its
    own files are read (what one save wrote), never its neighbours'."""
    return _guarded(lambda: Candidate.of(judged_checkpoint(path, quick=quick)))


# ------------------------------------------------------------------------------------- what the CLI shares


def open_report(path: str | os.PathLike[str], quick: bool) -> Checkpoint:
    """The one checkpoint at `path`, as `--report` reads it: found (discover), read, checked, scanned."""
    from ckinspect.analysis.inspect import inspect_path
    from ckinspect.formats.discover import find_checkpoints

    targets = find_checkpoints([os.fspath(path)])
    if len(targets) != 1:
        names = ", ".join(str(t.path) for t in targets[:5]) + (", ..." if len(targets) > 5 else "")
        raise CkinspectError(
            f"{path}: no checkpoint found"
            if not targets
            else f"{path} holds {len(targets)} checkpoints ({names}): inspect one, or judge the run (judge_run)"
        )
    return inspect_path(targets[0], quick=quick)


def open_checked(path: str | os.PathLike[str], structure_only: bool = False) -> Checkpoint:
    """Open + analyze + structural checks (diff's sides), a usage error for a path that does not exist.
    `structure_only` (diff --quick): no value will be read from it (a DCP folder is listed from .metadata)."""
    from ckinspect.analysis.inspect import inspect_path
    from ckinspect.io import folders

    if folders.known_missing(path):  # a URL: a missing or denied object is a one-line error from its read
        raise CkinspectError(f"{path}: no such file or folder")
    return inspect_path(os.fspath(path), quick=True, structure_only=structure_only)


def compare(
    a: Checkpoint,
    b: Checkpoint,
    only: list[str] | None = None,
    atol: float = 0.0,
    quick: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> _Diff:
    """The diff of two opened checkpoints, with the files' own bytes deciding where tensors cannot.
    Raises CkinspectError when `only` leaves nothing to compare."""
    from ckinspect.analysis.diff import DiffResult as Diff
    from ckinspect.analysis.diff import diff_checkpoints, raw_bytes_differ, unsafe_side, why_not_comparable

    reason = why_not_comparable(a, b)
    if reason is not None:  # no tensor verdict: the files' own bytes decide, or nothing does
        result = Diff(a.path, b.path, match="tensors not compared", only=only, atol=atol, not_compared=reason)
        result.raw_bytes_differ = raw_bytes_differ(a.path, b.path)
        return result
    result = diff_checkpoints(a, b, only=only, atol=atol, progress=progress, quick=quick)
    if only and not (result.same or result.changed or result.only_a or result.only_b or result.unreadable):
        raise CkinspectError(f"neither file has tensors in group(s) {', '.join(only)}: nothing to compare")
    result.unsafe = unsafe_side(a, b)
    if result.unreadable or result.unsafe:
        result.raw_bytes_differ = raw_bytes_differ(a.path, b.path)
    return result


# The one place that calls the run judge (analysis.runs): last_good, judge_run, judge_checkpoint and the
# CLI's last-good all come through these two functions.


def judged_run(
    run_dir: str | os.PathLike[str],
    quick: bool = False,
    verify: bool = False,
    everything: bool = False,
    jobs: int | None = 1,
) -> Run:
    """The run with its checkpoints judged (analysis.runs.last_good: newest first until one is good, or all
    with `everything`): the values of the checkpoint about to be named are read unless `quick`; `verify`
    reads those of every checkpoint judged."""
    from ckinspect.analysis.runs import last_good as judge
    from ckinspect.jobs.parallel import scanner

    return judge(run_dir, verify=verify, everything=everything, quick=quick, scan_many=scanner(jobs))


def judged_checkpoint(path: str | os.PathLike[str], quick: bool = False) -> RunCheckpoint:
    """The checkpoint at `path` (a file or a folder that is one checkpoint; a URL prefix ending in /)
    judged alone: its folder is listed, only its own parts are read."""
    from ckinspect.analysis.runs import Reader, collect, judge_run
    from ckinspect.io import folders

    if not folders.on_disk(path) and not folders.names_folder(path):
        raise CkinspectError(f"{path}: a remote checkpoint is judged by its folder's URL (ending in /)")
    target = folders.open_folder(path)  # a URL prefix: listed now
    is_dir = folders.is_dir(target)
    if not is_dir and not target.exists():
        raise CkinspectError(f"{path}: no such file or folder")
    run = collect(target if is_dir else target.parent)
    found = _only(run, target, path)
    run.checkpoints = found  # judged as its run would judge it, and only it: one definition of good
    judge_run(run, Reader(), everything=False, values=not quick)
    return found[0]


def _only(run: Any, target: PurePath, path: str | os.PathLike[str]) -> list[RunCheckpoint]:
    """The run's checkpoint at `target`, alone; CkinspectError naming what is there when it is none."""
    found = [c for c in run.checkpoints if c.path == target]
    if not found:
        seen = ", ".join(sorted(str(c.path) for c in run.checkpoints)[:5]) or "none"
        raise CkinspectError(f"{path} is not one checkpoint (checkpoints found there: {seen})")
    return found


def _guarded(call: Callable[[], T]) -> T:
    """Every error as a CkinspectError: ours as they are, the system's (OSError) as one, a bug of ours as
    InternalError with the original chained. Each call owns the listings of the URL prefixes it lists (as
    each command does), so the next call sees what was written since."""
    from ckinspect.io.folders import Listings

    try:
        with Listings().in_use():
            return call()
    except CkinspectError:
        raise
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise CkinspectError(f"{where}{exc.strerror or exc}") from exc
    except Exception as exc:
        raise InternalError(f"internal error: {type(exc).__name__}: {exc}") from exc
