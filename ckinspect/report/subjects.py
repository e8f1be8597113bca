"""What the CI formats (SARIF, JUnit) draw: one `Subject` per checkpoint (or leftover), with its findings.

Every command that reports findings turns its result into subjects here, so `sarif.render` and
`junit.render` are functions over findings and paths that any command can call.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ckinspect.model import Checkpoint, Finding
from ckinspect.record import Record
from ckinspect.vocab import DIFF_CODES

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ckinspect.analysis.diff import DiffResult
    from ckinspect.ops.repair import RepairPlan

# C0/C1 controls (XML 1.0 cannot even carry most of them), DEL, bidi overrides and isolates (they reorder
# what a reader sees), and lone surrogates (undecodable bytes of a file name): shown as escapes, never raw.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def clean_text(text: object) -> str:
    """Text from a file (names, messages) made safe to put in a document someone reads: every control,
    bidi override or lone surrogate becomes a visible escape (\\x1b, \\u202e); tabs and newlines stay."""
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", str(text))


class Subject(Record):
    """One thing a CI report is about: a checkpoint file or folder (a JUnit testcase), and its findings."""

    __slots__ = ("name", "path", "findings")

    def __init__(self, name: str, path: Path, findings: list[Finding]) -> None:
        self.name = name  # what a reader calls it: the path as the user gave it
        self.path = path  # where SARIF locates its findings
        self.findings = findings


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
