"""Judging one checkpoint of a run from its parts: whole, intact, safe and resumable, or why not.

Every part is read by the same pipeline `ckinspect --report` uses (analysis.inspect: the readers, the
layout, the structural checks); `verify` adds the value scan, which checks every stored byte against its
CRC and every float for NaN/Inf. Only parts the framework loads on resume can disqualify a checkpoint.
"""

from __future__ import annotations

from pathlib import Path

from ckinspect.analysis.inspect import check_values, inspect_path, list_path
from ckinspect.analysis.runs.model import DAMAGED, GOOD, INCOMPLETE, NOT_RESUMABLE, UNSAFE, VERDICT_OF, RunCheckpoint
from ckinspect.formats.unpickler import FRAMEWORK_RECORDS
from ckinspect.model import Checkpoint, Finding
from ckinspect.vocab import CkinspectError, Verdict

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from ckinspect.analysis.layouts import Layout
    from ckinspect.analysis.scan import Kept

    ScanMany = Callable[[list[Checkpoint]], None]  # value-scans listed checkpoints, findings appended to each

# Frameworks whose checkpoint is one file: its own checks decide whether it is a resume file.
SINGLE_FILE = ("file", "lightning", "trainer")
# A checkpoint with several reasons gets the verdict of the worst.
WORST_FIRST = (UNSAFE, INCOMPLETE, DAMAGED, NOT_RESUMABLE)
WEIGHTS_ONLY = "weights only: no optimizer state or step to resume from"
# Parts read as JSON or text by the recognisers; their problems are already the checkpoint's findings.
RECORD_ROLES = ("state", "pointer")


class Reader:
    """Reads each part once (recognisers and the judge share it). With `verify` and a `scan_many` (the caller's
    way of scanning several listed checkpoints side by side: jobs.parallel's process pool, `scanner(jobs)`),
    the value scan of a checkpoint's parts runs there; analysis itself starts no process.

    `keep(listed)`, when given, says which values the value scan of each part keeps (a `scan.Kept`, which
    the scan fills): see analysis.inspect. Kept values fill in this process only, so a Reader that keeps
    scans here, whatever `scan_many` is."""

    def __init__(
        self,
        verify: bool = False,
        keep: Callable[[Checkpoint], Kept] | None = None,
        scan_many: ScanMany | None = None,
        structure_only: bool = False,
    ) -> None:
        self.verify = verify
        self.structure_only = structure_only  # no value is read from what it lists (--quick): DCP from .metadata
        self.keep = keep
        self.scan_many = scan_many
        self.cache: dict[Path, Checkpoint] = {}
        # what this reader listed without reading values (not structure_only): the listing and its layout,
        # from which with_values() reads the values of one candidate without listing its parts again
        self.listed: dict[Path, tuple[Checkpoint, Layout]] = {}

    def with_values(self) -> Reader:
        """A reader that verifies (CRCs and values read), starting from the listings this one made: the
        candidate's parts are neither opened nor fetched again (each a copy: this reader's stay as listed)."""
        verified = Reader(verify=True, keep=self.keep, scan_many=self.scan_many)
        verified.listed = self.listed
        return verified

    def _relisted(self, path: Path) -> tuple[Checkpoint, Layout]:
        """A fresh copy of this path's listing (its own findings list), or the path listed now."""
        listed = self.listed.get(path)
        if listed is None:
            return list_path(path)
        ckpt, layout = listed
        return ckpt.replace(findings=list(ckpt.findings)), layout

    def prefetch(self, paths: list[Path]) -> None:
        """Read these parts now, their value scans side by side (one checkpoint's rank files or shards);
        the same Checkpoints `inspect` would give one by one."""
        todo = [p for p in dict.fromkeys(paths) if p not in self.cache]
        if not self.verify or self.scan_many is None or self.keep is not None or len(todo) < 2:
            return  # inspect() reads them one by one
        listed = [self._relisted(p)[0] for p in todo]
        self.scan_many(listed)
        self.cache.update(zip(todo, listed, strict=True))

    def inspect(self, path: Path) -> Checkpoint:
        ckpt = self.cache.get(path)
        if ckpt is None:
            try:
                ckpt = self._opened(path)
            except CkinspectError:
                why = _open_error(path)
                if why is None:
                    raise
                # one part the user may not read (mode 0600, another owner): that checkpoint is judged
                # unreadable, and the run (the others, last-good, the folder view) goes on
                ckpt = Checkpoint(path, "unknown", 0)
                ckpt.add("CORRUPT", f"cannot read ({why}): skipped, nothing in it judged")
            self.cache[path] = ckpt
        return ckpt

    def _opened(self, path: Path) -> Checkpoint:
        """The part listed (kept in `listed` unless structure_only) and, when verifying, its values read."""
        if self.structure_only:
            return inspect_path(path, structure_only=True)
        if self.verify:
            ckpt, layout = self._relisted(path)
            check_values(ckpt, layout, keep=self.keep)
            return ckpt
        ckpt, layout = list_path(path)
        self.listed[path] = (ckpt, layout)
        return ckpt


def _open_error(path: Path) -> str | None:
    """Why a local file cannot be opened (permission, I/O), or None when it can (or is not a local file)."""
    try:
        with open(path, "rb"):
            return None
    except (IsADirectoryError, FileNotFoundError):
        return None
    except OSError as exc:
        return exc.strerror or str(exc)
    except TypeError:  # a remote path
        return None


def judge(ckpt: RunCheckpoint, reader: Reader) -> RunCheckpoint:
    """Read the parts, then set verdict, reasons and notes. Never raises for bad content."""
    ckpt.read_deferred(reader)
    ckpt.measure()
    _read_parts(ckpt, reader)
    _step_and_agreement(ckpt)
    give_verdict(ckpt, lambda: resumable(ckpt))
    ckpt.values_checked = reader.verify
    return ckpt


def give_verdict(ckpt: RunCheckpoint, is_resumable: Callable[[], bool]) -> None:
    """Verdict, reasons and notes from its findings and its parts' findings alone (no listing is read:
    watch gives an earlier save its verdict again this way when the run's other saves add a finding);
    `is_resumable()` is asked only when nothing is held against it."""
    against: list[tuple[Verdict, Finding]] = [(VERDICT_OF[f.code], f) for f in ckpt.findings if f.code in VERDICT_OF]
    ckpt.notes = [n for n in ckpt.notes if not n.startswith("never loaded on resume")]
    against += _held_from_parts(ckpt)
    _set_verdict(ckpt, against, is_resumable)
    ckpt.notes = list(dict.fromkeys(ckpt.notes))  # judged again with its values: each note once


def _step_and_agreement(ckpt: RunCheckpoint) -> None:
    """The step a part records where the recogniser found none; the parts' steps held against it."""
    if ckpt.step is None:
        steps = [p.checkpoint.metadata.get("step") for p in ckpt.parts if p.checkpoint is not None]
        ckpt.step = next((s for s in steps if isinstance(s, int) and not isinstance(s, bool)), None)
    for finding in steps_disagree(ckpt):
        if finding not in ckpt.findings:  # judged again with its values: once
            ckpt.findings.append(finding)


def _set_verdict(ckpt: RunCheckpoint, against: list[tuple[Verdict, Finding]], is_resumable: Callable[[], bool]) -> None:
    """The worst verdict of what is held against it (good when nothing is), and the reasons."""
    ckpt.reasons = [f"{finding.code}: {finding.message}" for _, finding in against]
    if not against and not is_resumable():
        # no finding (a weights file is not a damaged resume file), but nothing to resume from either
        against.append((NOT_RESUMABLE, Finding("RESUME_INCOMPLETE", WEIGHTS_ONLY)))
        ckpt.reasons = [WEIGHTS_ONLY]
    ckpt.held_against = [finding for _, finding in against]
    ckpt.verdict = min((v for v, _ in against), key=WORST_FIRST.index, default=GOOD)


def _read_parts(ckpt: RunCheckpoint, reader: Reader) -> None:
    """Open every part (records aside) with the reader; keep the findings that belong to the checkpoint."""
    reader.prefetch([part.path for part in ckpt.parts if part.role not in RECORD_ROLES])
    for part in ckpt.parts:
        if part.role in RECORD_ROLES:
            continue
        opened = reader.inspect(part.path)
        part.checkpoint = opened
        part.findings = [f for f in opened.findings if _belongs(f, ckpt)]
        _framework_globals(ckpt, part)
    if ckpt.framework in SINGLE_FILE and ckpt.parts and ckpt.parts[0].checkpoint is not None:
        _single_file(ckpt, ckpt.parts[0].checkpoint)


def _held_from_parts(ckpt: RunCheckpoint) -> list[tuple[Verdict, Finding]]:
    """The parts' findings that disqualify (those of parts the framework loads); the others become notes."""
    against: list[tuple[Verdict, Finding]] = []
    for part in ckpt.parts:
        where = ckpt.part_name(part)
        for finding in part.findings:
            if finding.code not in VERDICT_OF or finding.code == "LEFTOVER_TMP":
                continue  # a tmp beside a whole file is another save's; the file is judged on its own bytes
            if part.loaded:
                against.append((VERDICT_OF[finding.code], ckpt.located(finding, part)))
            else:
                ckpt.notes.append(f"never loaded on resume, so not held against it: {where}: {finding.code}: "
                                  f"{finding.message}")  # fmt: skip
    return against


def steps_disagree(ckpt: RunCheckpoint) -> list[Finding]:
    """Every part that records a step, held against the checkpoint's own step (HF Trainer: trainer_state's
    global_step, optimizer.pt's per-parameter step, scheduler.pt's last_epoch; the Trainer steps both once
    per optimizer step). Under fp16 (a scaler part) a skipped step leaves optimizer and scheduler behind,
    so there only a part ahead of the global step disagrees."""
    if ckpt.framework != "hf-trainer" or ckpt.step is None:
        return []
    behind_ok = any(part.role == "scaler" for part in ckpt.parts)
    out = []
    for part in ckpt.parts:
        recorded = _recorded_step(part) if part.checkpoint is not None else None
        if recorded is None:
            continue
        what, value = recorded
        if value == ckpt.step or (behind_ok and value < ckpt.step):
            continue
        message = (f"{ckpt.part_name(part)} records step {_plain(value)} ({what}) but trainer_state.json's "
                   f"global_step is {ckpt.step}: the parts come from different saves")  # fmt: skip
        out.append(Finding("PARTS_DISAGREE", message))
    return out


def _recorded_step(part: Any) -> tuple[str, int | float] | None:
    from ckinspect.analysis.layouts import optimizer_step, top_mapping

    opened = part.checkpoint
    top = top_mapping(opened)
    if top is None:
        return None
    if part.role == "optimizer":
        step = optimizer_step(opened, top)
        return None if step is None else ("its optimizer's per-parameter step", step)
    if part.role == "scheduler" and isinstance(top.get("last_epoch"), int):
        return ("its scheduler's last_epoch", top["last_epoch"])
    return None


def _plain(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _belongs(finding: Finding, ckpt: RunCheckpoint) -> bool:
    """A part's own RESUME_INCOMPLETE is dropped where the checkpoint is several files: the recogniser
    judges resumability from the parts together (an HF model file alone has no optimizer)."""
    return ckpt.framework in SINGLE_FILE or finding.code != "RESUME_INCOMPLETE"


def _framework_globals(ckpt: RunCheckpoint, part: Any) -> None:
    """Drop UNSAFE_PICKLE from a part whose only foreign globals are its framework's own harmless classes."""
    expected = FRAMEWORK_RECORDS.get(ckpt.framework)
    if not expected or part.checkpoint is None or not any(f.code == "UNSAFE_PICKLE" for f in part.findings):
        return
    foreign = _foreign_globals(part.checkpoint)
    if not foreign or not _only_framework_classes(foreign, expected):
        return
    part.findings = [f for f in part.findings if f.code != "UNSAFE_PICKLE"]
    ckpt.notes.append(f"{part.path.name} names {ckpt.framework}'s own classes ({', '.join(foreign)}), which its "
                      "resume imports itself; nothing else outside torch's weights_only allowlist")  # fmt: skip


def _foreign_globals(opened: Checkpoint) -> list[str]:
    from ckinspect.formats.pickle_scan import classify_global

    return [g for g in opened.globals if "." in g and classify_global(*g.rsplit(".", 1)) == "unsafe"]


def _only_framework_classes(foreign: list[str], expected: dict[str, str]) -> bool:
    from ckinspect.formats.pickle_scan import is_dangerous

    return all(g in expected and not is_dangerous(*g.rsplit(".", 1)) for g in foreign)


def _single_file(ckpt: RunCheckpoint, opened: Checkpoint) -> None:
    if opened.layout in ("lightning", "trainer"):
        ckpt.framework = opened.layout
    if opened.format == "dcp":
        ckpt.framework = "dcp"


def resumable(ckpt: RunCheckpoint) -> bool:
    """Resume state is there: the recogniser said what it lacks otherwise (multi-file), or the file holds it."""
    if ckpt.framework not in SINGLE_FILE and ckpt.framework not in ("dcp", "sharded"):
        return True
    opened = [p.checkpoint for p in ckpt.parts if p.checkpoint is not None]
    return any(any(t.group == "optimizer" for t in c.tensors) and c.metadata.get("step") is not None for c in opened)
