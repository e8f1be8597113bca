"""What the CI formats (SARIF, JUnit) draw: one `Subject` per checkpoint (or leftover), with its findings.

Every command that reports findings turns its result into subjects here, so `sarif.render` and
`junit.render` are functions over findings and paths that any command can call.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ckinspect.model import Checkpoint, Finding
from ckinspect.record import Record
from ckinspect.vocab import DIFF_CODES

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ckinspect.analysis.diff import DiffResult
    from ckinspect.analysis.runs import Run
    from ckinspect.ops.repair import RepairPlan


class Subject(Record):
    """One thing a CI report is about: a checkpoint file or folder (a JUnit testcase), and its findings."""

    name: str  # what a reader calls it: the path as the user gave it
    path: Path  # where SARIF locates its findings
    findings: list[Finding]
    # when set, exactly these fail its JUnit testcase, whatever --fail-on (last-good: why it is no resume point)
    held_against: list[Finding] | None = None


def from_checkpoints(checkpoints: Sequence[Checkpoint]) -> list[Subject]:
    return [Subject(str(ckpt.path), Path(ckpt.path), list(ckpt.findings)) for ckpt in checkpoints]


def from_diff(a: Checkpoint, b: Checkpoint, result: DiffResult) -> list[Subject]:
    """A's and B's own findings, plus each difference on the side it belongs to (only in A: on A; the rest on B)."""

    def diff(code: str, message: str, tensor: str | None = None) -> Finding:
        return Finding(code, message, tensor, DIFF_CODES[code])

    on_a = [diff("TENSOR_ONLY_IN_A", f"{name}: only in {a.path}", name) for name in result.only_a]
    on_b = [diff("TENSOR_ONLY_IN_B", f"{name}: only in {b.path}", name) for name in result.only_b]
    for change in result.changed:
        on_b.append(diff("TENSOR_CHANGED", f"{change.name}: {_change_text(change)}", change.name))
    for key, (va, vb) in result.metadata_changed.items():
        on_b.append(diff("METADATA_CHANGED", f"{key}: {va} in {a.path}, {vb} in {b.path}"))
    for value in result.values_changed:
        on_b.append(diff("METADATA_CHANGED", f"{value.path}: {value.a!r} in {a.path}, {value.b!r} in {b.path}"))
    on_b += [diff("TENSOR_UNREADABLE", f"{name}: {why}", name) for name, why in result.unreadable]
    return [
        Subject(str(a.path), Path(a.path), [*a.findings, *on_a]),
        Subject(str(b.path), Path(b.path), [*b.findings, *on_b]),
    ]


def _change_text(change) -> str:
    if change.reason == "shape":
        return f"shape {list(change.a_shape)} -> {list(change.b_shape)}"
    if change.reason == "dtype":
        return f"dtype {change.a_dtype} -> {change.b_dtype}"
    text = "values differ"
    if change.n_diff is not None:
        text += f" in {change.n_diff:,} of {change.numel:,} elements"
    if change.max_abs_diff is not None:
        text += f", max |a-b| {change.max_abs_diff:.6g}"
    return text


def from_repair(plan: RepairPlan, verb: dict[str, str]) -> list[Subject]:
    """One subject per leftover tmp; a LEFTOVER_TMP finding on each that still needs the user (a done
    repair leaves nothing to report: the tmp is gone)."""
    subjects = []
    for action in plan.actions:
        findings = []
        if action.state != "done":
            found = action.status.explain() if action.status else action.leftover.tmp.name
            what = f"{verb[action.action]}: {action.reason}" + (f" ({action.note})" if action.note else "")
            findings.append(Finding("LEFTOVER_TMP", f"{found}; {what} [{action.state}]"))
        subjects.append(Subject(str(action.leftover.tmp), action.leftover.tmp, findings))
    return subjects


def from_runs(runs: Sequence[Run], candidates: bool = False) -> list[Subject]:
    """What the runs' own records say: a pointer naming a missing tag (at the run's folder), a checkpoint's
    missing or disagreeing parts (at the checkpoint). With `candidates` (last-good), every judged checkpoint
    is a subject, its parts' findings included (the part named in the message), and what keeps it from
    being a resume point is held against it."""
    subjects = []
    for run in runs:
        if run.findings:
            subjects.append(Subject(str(run.path), run.path, list(run.findings)))
        for ckpt in run.checkpoints:
            if candidates and ckpt.verdict:
                subjects.append(Subject(str(ckpt.path), ckpt.path, ckpt.located_findings(), list(ckpt.held_against)))
            elif ckpt.findings and not candidates:
                subjects.append(Subject(str(ckpt.path), ckpt.path, list(ckpt.findings)))
    return subjects


def merge(*groups: Sequence[Subject]) -> list[Subject]:
    """One subject per path, in first-seen order; a finding said twice about one path is said once."""
    merged: dict[Path, Subject] = {}
    for group in groups:
        for subject in group:
            known = merged.get(subject.path)
            if known is None:
                merged[subject.path] = Subject(subject.name, subject.path, list(subject.findings), subject.held_against)
            else:
                known.findings += [f for f in subject.findings if f not in known.findings]
    return list(merged.values())
