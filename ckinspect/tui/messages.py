"""App-wide messages: each thread worker ends by posting one of these (failures go to Worker.StateChanged)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.message import Message

from ckinspect.model import Checkpoint, Finding
from ckinspect.tui.core import ValueStats
from ckinspect.tui.widgets.virtual_table import Row

if TYPE_CHECKING:
    from ckinspect.analysis.anatomy import Anatomy
    from ckinspect.analysis.diff import DiffResult
    from ckinspect.analysis.drift import TensorDrift
    from ckinspect.ops.repair import ApplyResult, RepairPlan, UndoResult


class Progress(Message):
    """How far a worker is (0..1); a newer one replaces an unprocessed older one."""

    def __init__(self, task: str, fraction: float) -> None:
        super().__init__()
        self.task, self.fraction = task, fraction

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, Progress) and message.task == self.task


class CheckpointLoaded(Message):
    def __init__(self, ckpt: Checkpoint, rows: list[Row], anatomy: Anatomy) -> None:
        super().__init__()
        self.ckpt, self.rows, self.anatomy = ckpt, rows, anatomy


class ScanFinished(Message):
    def __init__(self, findings: list[Finding], stats: dict[str, ValueStats]) -> None:
        super().__init__()
        self.findings, self.stats = findings, stats


class StatsReady(Message):
    def __init__(self, tensor: str, stats: ValueStats) -> None:
        super().__init__()
        self.tensor, self.stats = tensor, stats


@dataclass
class TargetSummary:
    path: Path
    format: str = ""
    file_bytes: int | None = None
    step: Any = None
    findings: list[Finding] | None = None
    error: str = ""


class TargetSummarized(Message):
    def __init__(self, summary: TargetSummary) -> None:
        super().__init__()
        self.summary = summary


class TargetsFound(Message):
    def __init__(self, paths: list[Path], unfinished: list[Path] | None = None) -> None:
        super().__init__()
        self.paths = paths
        self.unfinished = unfinished or []  # checkpoints whose save died before its rename: only a .tmp exists


class DiffLoaded(Message):
    def __init__(self, a: Checkpoint, b: Checkpoint, matched: dict[str, str]) -> None:
        super().__init__()
        self.a, self.b, self.matched = a, b, matched


class DiffComputed(Message):
    def __init__(self, result: DiffResult) -> None:
        super().__init__()
        self.result = result


class DriftComputed(Message):
    def __init__(self, weights: list[TensorDrift], logits: dict[str, Any] | None, logits_note: str) -> None:
        super().__init__()
        self.weights, self.logits, self.logits_note = weights, logits, logits_note


class RepairPlanned(Message):
    def __init__(self, plan: RepairPlan) -> None:
        super().__init__()
        self.plan = plan


class RepairApplied(Message):
    def __init__(self, result: ApplyResult) -> None:
        super().__init__()
        self.result = result


class RepairUndone(Message):
    def __init__(self, result: UndoResult) -> None:
        super().__init__()
        self.result = result
