"""App-wide messages: each thread worker ends by posting one of these (failures go to Worker.StateChanged)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.message import Message

from ckinspect.analysis.value_stats import ValueStats
from ckinspect.model import Checkpoint, Finding
from ckinspect.record import Record
from ckinspect.tui.widgets.virtual_table import Row

if TYPE_CHECKING:
    from ckinspect.analysis.anatomy import Anatomy
    from ckinspect.analysis.diff import DiffResult
    from ckinspect.analysis.drift import TensorDrift
    from ckinspect.analysis.runs import Run
    from ckinspect.ops.repair import ApplyResult, RepairPlan, UndoResult


# Messages are small dataclasses, Textual's own style: the generated __init__ sets the fields, then
# calls Message.__post_init__, which is Message's real initialiser. (Plain data the TUI passes around
# is a Record, like the core's.)


@dataclass
class Progress(Message):
    """How far a worker is (0..1), and in what it counts when it says (`done` of `total` blocks, files ...);
    a newer one replaces an unprocessed older one."""

    task: str
    fraction: float
    done: int = 0
    total: int = 0

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, Progress) and message.task == self.task


@dataclass
class Reading(Message):
    """What a worker's read is doing now (ckinspect.steps): `done` of `total` `what`; a newer one replaces
    an unprocessed older one."""

    what: str
    done: int
    total: int | None

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, Reading)


@dataclass
class CheckpointLoaded(Message):
    ckpt: Checkpoint
    rows: list[Row]
    anatomy: Anatomy


@dataclass
class ScanFinished(Message):
    findings: list[Finding]
    stats: dict[str, ValueStats]


@dataclass
class StatsReady(Message):
    tensor: str
    stats: ValueStats


class TargetSummary(Record):
    __hash__ = None  # type: ignore[assignment]  # changed after it is built

    path: Path
    format: str = ""
    file_bytes: int | None = None
    step: Any = None
    findings: list[Finding] | None = None
    error: str = ""
    values: str = "pending"  # the value scan: "pending", "scanned", "not scanned" (--quick) or why it failed


@dataclass
class TargetSummarized(Message):
    summary: TargetSummary


@dataclass
class TargetsFound(Message):
    paths: list[Path]
    unfinished: list[Path] = field(default_factory=list)  # checkpoints whose save died before its rename


@dataclass
class RunJudged(Message):
    """A folder that holds a run: its checkpoints judged."""

    run: Run


@dataclass
class DiffLoaded(Message):
    a: Checkpoint
    b: Checkpoint
    matched: dict[str, str]


@dataclass
class DiffComputed(Message):
    result: DiffResult


@dataclass
class DriftComputed(Message):
    weights: list[TensorDrift]
    logits: dict[str, Any] | None
    logits_note: str


@dataclass
class RepairPlanned(Message):
    plan: RepairPlan


@dataclass
class RepairApplied(Message):
    result: ApplyResult


@dataclass
class RepairUndone(Message):
    result: UndoResult
