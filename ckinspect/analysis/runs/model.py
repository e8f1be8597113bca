"""The records of a run: its checkpoints, each made of parts, and what each checkpoint's own records promise.

Pure data; the recognisers (one module per framework) fill them, `judge` reads the parts.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ckinspect.io import folders
from ckinspect.model import Checkpoint, Finding
from ckinspect.record import Record, field
from ckinspect.vocab import NOT_JUDGED, Verdict

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# What a checkpoint is judged to be. Only "good" is a resume point.
GOOD = Verdict.GOOD
INCOMPLETE = Verdict.INCOMPLETE
DAMAGED = Verdict.DAMAGED
UNSAFE = Verdict.UNSAFE
NOT_RESUMABLE = Verdict.NOT_RESUMABLE
VERDICTS = tuple(Verdict)

# Which verdict a disqualifying finding gives, worst first.
VERDICT_OF = {
    "UNSAFE_PICKLE": UNSAFE,
    "MISSING_PARTS": INCOMPLETE,
    "LEFTOVER_TMP": INCOMPLETE,
    "CORRUPT": DAMAGED,
    "PARTS_DISAGREE": DAMAGED,
    "OPTIMIZER_MISMATCH": DAMAGED,
    "NONFINITE": DAMAGED,
    "RESUME_INCOMPLETE": NOT_RESUMABLE,
    "WRITTEN_AFTER_COMMIT": DAMAGED,  # a data file rewritten after the marker that describes it
    "SALVAGED_PARTIAL": INCOMPLETE,  # a salvage output that lost tensors or values
    "MIXED_RUN": NOT_RESUMABLE,  # another run's model: the current one cannot load it
}


def written_after_commit(ckpt: RunCheckpoint, marker: Path, data: list[Path]) -> None:
    """A save's data files are written first and its commit marker last (DCP's `.metadata`, HF's
    trainer_state.json): a data file newer than the marker was rewritten after the commit (a resumed run
    saving the same step again, one rank at a time), so the marker may describe other bytes."""
    try:
        committed = folders.mtime(marker)
    except OSError:
        return
    newer = []
    for path in data:
        try:
            if folders.mtime(path) > committed:
                newer.append(path.name)
        except OSError:
            continue
    if newer:
        shown = ", ".join(sorted(newer)[:4]) + (f" and {len(newer) - 4} more" if len(newer) > 4 else "")
        message = (f"{shown} modified after {marker.name}, which the save writes last: rewritten since the save "
                   "committed, so the parts may not belong together")  # fmt: skip
        ckpt.add("WRITTEN_AFTER_COMMIT", message)


STEP_IN_NAME = re.compile(r"(\d+)(?!.*\d)")  # the last number in a name: checkpoint-500, global_step30, iter_0000020


def step_in_name(name: str) -> int | None:
    match = STEP_IN_NAME.search(name)
    return int(match.group(1)) if match else None


class Part(Record):
    """One file of a checkpoint."""

    __hash__ = None  # type: ignore[assignment]  # read when its checkpoint is judged

    path: Path
    role: str  # model, optimizer, rng, scheduler, state, settings, index, pointer, data
    loaded: bool = True  # the framework reads it when it resumes; a part it never loads cannot disqualify
    checkpoint: Checkpoint | None = None  # the reader's view, once judged (not for JSON/text parts)
    findings: list[Finding] = field(default_factory=list)

    @property
    def size(self) -> int:
        return folders.tree_size(self.path)


class RunCheckpoint(Record):
    """One resume point of a run: a file, a DCP folder, an HF `checkpoint-N/`, a DeepSpeed tag ..."""

    __hash__ = None  # type: ignore[assignment]  # filled in by its recogniser, then judged

    path: Path
    framework: str  # deepspeed, hf-trainer, accelerate, megatron, dcp, lightning, trainer, sharded, file
    step: int | None = None
    parts: list[Part] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)  # from its records: MISSING_PARTS, PARTS_DISAGREE ...
    verdict: str = ""  # "" until judged; one the answer never needed stays "" (NOT_JUDGED in its JSON)
    reasons: list[str] = field(default_factory=list)  # why it is not good, one line each
    # the same reasons as findings (a part's located by the part's path in the message), for JUnit's failures
    held_against: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was seen and does not disqualify (a part never loaded ...)
    values_checked: bool = False  # its CRCs and values were read (and judged) along with its structure
    time: float = 0.0  # newest modification time of its parts (seconds since the epoch)
    # files per kind (rank files, model files ...), to compare with the run's other checkpoints
    _counts: dict[str, int] = field(default_factory=dict, init=False)
    _deferred: list[Any] = field(default_factory=list, init=False)  # its records are read when it is judged
    _size: int | None = field(default=None, init=False)  # all parts' bytes, once asked (see size)

    @property
    def size(self) -> int:
        """All its parts' bytes, asked when first shown (a JSON answer, the TUI): a save the answer did not need
        costs no request for it, where a listing gives no sizes (a web server's index pages: a HEAD each)."""
        if self._size is None:
            self._size = sum(part.size for part in self.parts)
        return self._size

    @size.setter
    def size(self, value: int) -> None:
        self._size = value

    @property
    def counts(self) -> dict[str, int]:
        return self._counts

    def set_counts(self, counts: dict[str, int]) -> None:
        self._counts = counts

    def defer(self, reading: Any) -> None:
        """Read these records when the checkpoint is judged, not when the run is listed: `reading(reader)`."""
        self._deferred.append(reading)

    def read_deferred(self, reader: Any) -> None:
        while self._deferred:
            self._deferred.pop(0)(reader)

    def measure(self) -> None:
        """Its time (the newest part's modification); its size is asked again when next shown."""
        times = []
        for part in self.parts:
            try:
                times.append(folders.mtime(part.path))
            except OSError:
                continue
        self.time = max(times, default=0.0)
        self._size = None  # asked again when shown

    def add(self, code: str, message: str) -> None:
        self.findings.append(Finding(code, message))

    def part(self, path: Path, role: str, loaded: bool = True) -> Part:
        part = Part(path, role, loaded)
        self.parts.append(part)
        return part

    @property
    def good(self) -> bool:
        return self.verdict == GOOD

    def part_name(self, part: Part) -> str:
        """A part as the checkpoint's reasons name it: its path inside the checkpoint's folder, or its file name."""
        try:
            return str(part.path.relative_to(self.path)) if part.path != self.path else part.path.name
        except ValueError:
            return part.path.name

    def located(self, finding: Finding, part: Part) -> Finding:
        """A part's finding as the checkpoint's: the part named first, unless the part is the checkpoint."""
        if part.path == self.path:
            return finding
        return finding.replace(message=f"{self.part_name(part)}: {finding.message}")

    def located_findings(self) -> list[Finding]:
        """Its own findings, then each part's, located."""
        return [*self.findings, *(self.located(f, part) for part in self.parts for f in part.findings)]

    def all_findings(self) -> list[Finding]:
        out = list(self.findings)
        for part in self.parts:
            out.extend(part.findings)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "framework": self.framework,
            "step": self.step,
            "time": round(self.time, 3),
            "size": self.size,
            "verdict": self.verdict or NOT_JUDGED,  # not judged: older than the answer, which did not need it
            "values_checked": self.values_checked,
            "reasons": list(self.reasons),
            "notes": list(self.notes),
            "parts": [
                {"path": str(p.path), "role": p.role, "loaded_on_resume": p.loaded, "bytes": p.size} for p in self.parts
            ],
            "findings": [f.to_json() for f in self.all_findings()],
        }


class Run(Record):
    """A folder of checkpoints, newest last, and what its pointers (`latest`, tracker files) say."""

    __hash__ = None  # type: ignore[assignment]

    path: Path
    checkpoints: list[RunCheckpoint]
    findings: list[Finding] = field(default_factory=list)

    @property
    def last_good(self) -> RunCheckpoint | None:
        return next((c for c in reversed(self.checkpoints) if c.good), None)

    def to_json(self) -> dict[str, Any]:
        best = self.last_good
        return {
            "path": str(self.path),
            "last_good": str(best.path) if best else None,
            "findings": [f.to_json() for f in self.findings],
            "checkpoints": [c.to_json() for c in self.checkpoints],
        }


def read_json(path: Path) -> Any:
    """A small JSON record (trainer_state.json ...); None when it is missing or unreadable."""
    try:
        if folders.size(path) > 64 << 20:
            return None
        return json.loads(folders.read_bytes(path))
    except (OSError, ValueError, RecursionError):
        return None


def read_text(path: Path, limit: int = 4096) -> str | None:
    """A pointer file (`latest`, `latest_checkpointed_iteration.txt`): its first line, or None."""
    try:
        raw = folders.read_bytes(path, limit)
        return raw.decode("utf-8").strip().splitlines()[0].strip() if raw.strip() else ""
    except (OSError, UnicodeDecodeError):
        return None
