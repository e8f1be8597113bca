"""Following a run live: each checkpoint judged once, the moment its save has finished.

    follower = Follower(Path("runs/"), settle=30.0)
    for event in follower.poll_each():     # call again whenever the folder may have changed
        event.checkpoint.verdict, event.findings, event.updates   # each as soon as it is judged
    follower.close()                       # the files held open, the worker processes (--jobs)

A save is finished when its framework says so: the file exists under its own name (the trainer's and
torch's atomic rename), its DCP folder has `.metadata` (written last, after every rank's data), its HF
folder has `trainer_state.json` (written last), its DeepSpeed tag is named by `latest`, its Megatron
iteration by the tracker file, its sharded set has its index; Accelerate writes no such mark, so its folder
is finished once quiet. A save that is not finished is never judged while it is still being written: only
when its files have not changed for `settle` seconds (its writer is gone) is it judged, and the run's own
judge (analysis.runs.judge) names what it lacks: MISSING_PARTS, LEFTOVER_TMP.

Each save is judged as last-good judges it, with the run around it: what only the run's other saves can
tell (analysis.runs.context: MISSING_PARTS where it has fewer rank files than every other save of its
folder, PARTS_DISAGREE where an Accelerate save's optimizer.bin or scheduler.bin is another save's, MIXED_RUN
where its model is not the shape of the run's newest) is decided by the same RunContext last-good asks,
from a few facts kept per save judged (its file counts, four step numbers, its model's shapes shared by
every save of that model), never by reading an earlier save again. A later save can change what the run
tells of an earlier one: the Accelerate relation becomes decidable once three saves exist, a restart with
another model makes the older saves MIXED_RUN, a save removed (a rotation) takes its say with it. Then
the earlier save is judged again from what was kept of it (its findings and its parts' findings; no byte
read) and a REJUDGED event follows the event that changed it, with its new verdict and findings, whenever
its verdict or the codes of its run-level findings changed. So the latest event of each save is the
verdict last-good, `--verify` and the run views give it on the same folder.

Each finished checkpoint is judged once (structure, CRC and value scan: the judge with `verify`), then
compared with the previous save of the same series (analysis.updates): the relative update per group and
layer, the step delta, the optimizer's moments. Three anomalies become findings: UPDATE_RATIO_OUTLIER (an
update far outside the run's own history), LAYER_FROZEN (a layer that changed before and stopped), and
NONFINITE_ONSET (the first checkpoint of the run holding NaN/Inf, naming its step).

Each save is read once: its value scan keeps a copy of what the comparison needs (the float tensors of
the model and optimizer groups, raw, as read: `updates.compared_values`), the comparison takes the
current save's values from that copy and the previous save's from the copy kept when it was judged, and
the copy of the previous save is released as the new one takes its place. So the follower holds, per
series, the newest save's listing, its kept values (at most `keep_bytes`, DEFAULT_KEEP: a save with
more is kept up to that, and the rest of its tensors are read from its files, held open, as needed) and
the history of ratios; at its peak, while a save is compared, two saves' kept values. Per save judged it
keeps only its run facts and its findings (a few hundred bytes, no listing; one copy of each model's
shapes): memory does not grow with the checkpoints' size, and by that little with the run's length.

With `jobs` > 1, a backlog of saves (a run that saves faster than one core can judge) is read by `jobs`
worker processes, up to `jobs` saves ahead: each part listed and scanned there (the readers and the
pickle scan are Python: threads would queue on the GIL), its listing and kept values sent back; the
judge's verdict, the comparison and the anomalies follow here, one save after another, in order. A
single new save is read here (a worker would only add the trip). The pool starts at the first poll, so
that the first backlog does not wait for it (forkserver: forked from a clean process that has imported
the readers once, never from this one, whose other threads may hold locks), and lives until `close()`.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from ckinspect import settings
from ckinspect.analysis.inspect import inspect_path
from ckinspect.analysis.runs import collect, order
from ckinspect.analysis.runs.context import RunContext
from ckinspect.analysis.runs.deepspeed import LATEST
from ckinspect.analysis.runs.hf import TRAINER_STATE
from ckinspect.analysis.runs.judge import RECORD_ROLES, Reader, give_verdict, judge, resumable
from ckinspect.analysis.runs.megatron import TRACKER
from ckinspect.analysis.runs.model import GOOD, Part, RunCheckpoint, read_text, step_in_name
from ckinspect.analysis.updates import RATIO_GROUPS, Updates, compare_saves, compared_values
from ckinspect.io.blobs import Blobs, UnreadableStorage
from ckinspect.model import Checkpoint, Finding
from ckinspect.record import Record, field
from ckinspect.vocab import DCP_METADATA, TMP_SUFFIX, WATCH_KEEP_MIB

TYPE_CHECKING = False
if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor
    from typing import Any

    from ckinspect.analysis.scan import Kept

DEFAULT_SETTLE = 30.0  # seconds a save must stay unchanged, and unfinished, before its writer counts as gone
# An update this many times above or below the median of the series' earlier ones is far outside its history.
OUTLIER_FACTOR = 10.0
HISTORY_NEEDED = 3  # earlier comparisons needed before a ratio can be far outside them
# Only the latest comparisons count: a schedule's warmup and decay move the ratio slowly, a blow-up at once.
HISTORY_WINDOW = 8
# Imported once by the forkserver, before it forks the workers (their first save would import them, ~0.2 s
# each): numpy and the readers of the saves trainers write. A name that fails to import is skipped.
WORKER_PRELOAD = ("numpy", "ckinspect.formats.dcp", "ckinspect.formats.torch_zip", "ckinspect.formats.safetensors")
# Values of one save kept for the comparison with the next (per series; two saves' worth at the peak).
DEFAULT_KEEP = WATCH_KEEP_MIB << 20
# Frameworks whose saves have no "done" mark (Accelerate's save_state writes its files and stops): a save is
# finished when its folder has been quiet for the settle time.
NO_DONE_MARK = ("accelerate",)
# Structural verdicts that a save still being written would also get: held back until its files are quiet.
STRUCTURE_CODES = ("CORRUPT", "MISSING_PARTS", "LEFTOVER_TMP", "PARTS_DISAGREE")

# Event kinds: a finished save judged; an unfinished one judged once its writer is gone; one still being written
# (only `--once` reports that: it does not wait); a save judged before whose verdict or findings the run's
# other saves have changed since (a save that came or went), judged again from what was kept of it.
JUDGED = "judged"
ABANDONED = "abandoned"
IN_PROGRESS = "in-progress"
REJUDGED = "rejudged"

Signature = tuple[tuple[str, int, int, int], ...]  # (relative name, size, mtime_ns, inode) of every file
Read = tuple[Checkpoint, "Kept | None"]  # one part as a worker read it: its listing, the values its scan kept


class Event(Record):
    """One checkpoint judged (or, with `--once`, seen still being written)."""

    __hash__ = None  # type: ignore[assignment]

    kind: str
    checkpoint: RunCheckpoint
    findings: list[Finding] = field(default_factory=list)  # its own, then the watch's anomalies
    updates: Updates | None = None
    previous: Path | None = None  # the save it was compared with
    seconds_after_save: float = 0.0  # from its newest file's modification to the verdict
    index: int = 0  # 1 for the first event of this follower

    @property
    def step(self) -> int | None:
        return self.checkpoint.step

    def to_json(self) -> dict[str, Any]:
        ckpt = self.checkpoint
        return {
            "event": self.kind,
            "index": self.index,
            "path": str(ckpt.path),
            "framework": ckpt.framework,
            "step": ckpt.step,
            "verdict": ckpt.verdict if self.kind != IN_PROGRESS else None,
            "reasons": list(ckpt.reasons),
            "findings": [f.to_json() for f in self.findings],
            "previous": str(self.previous) if self.previous is not None else None,
            "updates": self.updates.to_json() if self.updates is not None else None,
            "seconds_after_save": round(self.seconds_after_save, 3),
        }


class _Series(Record):
    """What the follower keeps of one series of saves (one file overwritten, or `name_step<N>/` folders)."""

    __hash__ = None  # type: ignore[assignment]

    path: Path | None = None  # the newest judged save
    parts: dict[str, Checkpoint] = field(default_factory=dict)  # its parts' listings, by part key
    files: Blobs | None = None  # its files, held open: a save written again under its name replaces them
    values: dict[str, dict[str, Any]] = field(default_factory=dict)  # its kept values, by part key, then tensor
    ratios: dict[str, list[float]] = field(default_factory=dict)  # per group, per step, oldest first
    changing: set[str] = field(default_factory=set)  # model layers that changed at the last comparison


class _Judged(Record):
    """What the follower keeps of each save it judged, to judge it again when the run's other saves change
    what they tell of it: its verdict's inputs (its findings, its parts' findings: no listing), nothing read."""

    __hash__ = None  # type: ignore[assignment]

    checkpoint: RunCheckpoint  # the save as judged, its parts without their listings
    resumable: bool
    run_level: list[Finding]  # the findings the run's other saves gave it (analysis.runs.context)


class Follower:
    """Judges each new checkpoint of `run_dir` once; see the module docstring."""

    def __init__(
        self,
        run_dir: Path,
        settle: float = DEFAULT_SETTLE,
        verify: bool = True,
        clock: Callable[[], float] = time.time,
        jobs: int = 1,
        keep_bytes: int = DEFAULT_KEEP,
    ) -> None:
        self.run_dir = run_dir
        self.jobs = max(1, jobs)
        self.keep_bytes = max(0, keep_bytes)
        self.settle = settle
        self.verify = verify
        self.clock = clock
        self.judged: dict[str, Signature] = {}  # checkpoint path -> the files it was judged on
        self.waiting: dict[str, Signature] = {}  # unfinished saves -> their files when last seen
        self.series: dict[tuple[str, str, str], _Series] = {}
        self.context = RunContext()  # what the run's other saves decide of each (the one last-good asks)
        self.saves: dict[Path, _Judged] = {}  # every save judged and still there
        self.nonfinite_seen: Path | None = None  # the first checkpoint holding NaN/Inf
        self.events = 0
        self.pool: ProcessPoolExecutor | None = None  # with jobs > 1, from the first poll on

    def close(self) -> None:
        """Close the files held open for the next comparison, and stop the worker processes."""
        self._drop_workers()
        for series in self.series.values():
            if series.files is not None:
                series.files.close()
                series.files = None
            series.values = {}

    # ------------------------------------------------------------------------------------------ polling

    def poll(self, once: bool = False) -> list[Event]:
        """Judge what has finished since the last call, oldest first. With `once`, also report the saves
        still being written (as IN_PROGRESS events, without findings) instead of waiting for them."""
        return list(self.poll_each(once))

    def poll_each(self, once: bool = False) -> Iterator[Event]:
        """`poll`, each event as soon as it is judged: the first saves of a backlog are not held back until
        the last is judged. Consume it whole before the next call."""
        plan, gone = self._plan(once)
        yield from (self._event(e) for e in self._forget(gone))
        if self.jobs > 1:
            self._workers()  # started before the first backlog, so that one does not wait for them
        readings = self._read_all([ckpt for ckpt, _, kind, _ in plan if kind != IN_PROGRESS])
        for ckpt, files, kind, quiet in plan:
            if kind == IN_PROGRESS:
                yield self._event(Event(IN_PROGRESS, ckpt))
                continue
            read, kept = next(readings)
            assert read is ckpt  # read in the plan's order
            yield from self._judged(ckpt, files, kind, quiet, kept, once)

    def _judged(self, ckpt: RunCheckpoint, files: Signature, kind: str, quiet: bool, kept: dict[Path, Kept],
                once: bool) -> Iterator[Event]:  # fmt: skip
        """A save the judge has read: its event, then the earlier saves it makes the run judge otherwise."""
        event = self._settled(ckpt, files, self._judge(ckpt, files, kind, kept), quiet, kept)
        if event is None:
            if once:
                yield self._event(Event(IN_PROGRESS, ckpt))
            return
        yield self._event(event)
        yield from (self._event(e) for e in self._rejudged(ckpt.path))

    def _plan(self, once: bool) -> tuple[list[tuple[RunCheckpoint, Signature, str, bool]], list[Path]]:
        """What this poll judges, oldest first: (checkpoint, files, kind, quiet), and the judged saves that
        are gone. A save still being written waits (IN_PROGRESS in the plan only `once`); what was judged
        and not written since is left out."""
        run = collect(self.run_dir, peers=False)  # its peers: this follower's RunContext, as judged
        now = self.clock()
        plan = [step for ckpt in sorted(run.checkpoints, key=_order) if (step := self._planned(ckpt, now, once))]
        seen = {str(ckpt.path) for ckpt in run.checkpoints}
        for key in list(self.waiting):
            if key not in seen:
                del self.waiting[key]  # renamed into place, or removed: nothing left to wait for
        gone = [path for path in self.saves if str(path) not in seen]
        return plan, gone

    def _planned(
        self, ckpt: RunCheckpoint, now: float, once: bool
    ) -> tuple[RunCheckpoint, Signature, str, bool] | None:
        """One checkpoint's place in the plan; None when it is left out (judged and not written since, or
        still being written and not `once`)."""
        key = str(ckpt.path)
        files = signature(ckpt)
        if self.judged.get(key) == files:
            return None  # judged already, and not written again since
        finished = is_finished(ckpt)
        quiet = now - newest_change(files) >= self.settle and (once or self.waiting.get(key) in (files, None))
        if not finished and not quiet:
            self.waiting[key] = files
            return (ckpt, files, IN_PROGRESS, False) if once else None
        # a framework that writes no "done" mark (Accelerate) is finished once quiet: judged, and compared
        return ckpt, files, JUDGED if finished or ckpt.framework in NO_DONE_MARK else ABANDONED, quiet

    def _settled(self, ckpt: RunCheckpoint, files: Signature, event: Event, quiet: bool,
                 kept: dict[Path, Kept]) -> Event | None:  # fmt: skip
        """The judged event, remembered; None when a save finished by its marker is broken the way a save in
        flight looks and has not been quiet yet: it waits, to be looked at again once quiet."""
        key = str(ckpt.path)
        if event.kind == JUDGED and not quiet and _structure_broken(event):
            self.waiting[key] = files
            self.context.drop(ckpt.path)  # being written again: judged again once quiet
            self.saves.pop(ckpt.path, None)
            return None
        self.judged[key] = files
        self.waiting.pop(key, None)
        self._remember(ckpt, event, files, kept)
        return event

    def _read_all(self, checkpoints: list[RunCheckpoint]) -> Iterator[tuple[RunCheckpoint, dict[Path, Kept]]]:
        """The run's judge on each (structure, CRC, value scan), in order, with the values each part's scan
        kept for the comparison (by part path). A backlog with jobs > 1: parts read by the worker processes,
        at most `jobs` saves ahead of the one yielded (so at most that many saves' kept values wait)."""
        if self.jobs == 1 or len(checkpoints) < 2:
            for ckpt in checkpoints:
                yield ckpt, self._read_here(ckpt)
            return
        waiting = iter(checkpoints)
        ahead = self._first_submitted(waiting)
        while ahead:
            ckpt, futures = ahead.popleft()
            read = [(path, _result(future)) for path, future in futures]  # in this save's part order
            following = next(waiting, None)
            if following is not None:
                ahead.append((following, self._submit(following)))
            yield ckpt, self._read_here(ckpt, [(path, r) for path, r in read if r is not None])

    def _first_submitted(
        self, waiting: Iterator[RunCheckpoint]
    ) -> deque[tuple[RunCheckpoint, list[tuple[Path, Future[Read]]]]]:
        """The first `jobs` saves' parts, sent to the workers."""
        ahead: deque[tuple[RunCheckpoint, list[tuple[Path, Future[Read]]]]] = deque()
        for ckpt in waiting:
            ahead.append((ckpt, self._submit(ckpt)))
            if len(ahead) >= self.jobs:
                break
        return ahead

    def _submit(self, ckpt: RunCheckpoint) -> list[tuple[Path, Future[Read]]]:
        """Each part the judge will open, to the workers (parts a record names only once read are read here)."""
        paths = list(dict.fromkeys(part.path for part in ckpt.parts if part.role not in RECORD_ROLES))
        room = self.keep_bytes // max(1, len(paths))  # the save's budget shared by its parts
        try:
            pool = self._workers()
            return [(path, pool.submit(read_part, path, self.verify, room)) for path in paths]
        except (BrokenProcessPool, RuntimeError, OSError):  # a worker died, or none could start: read here
            self._drop_workers()
            return []

    def _workers(self) -> ProcessPoolExecutor:
        if self.pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
            context = multiprocessing.get_context(method)
            if method == "forkserver":
                context.set_forkserver_preload([__name__, *WORKER_PRELOAD])
            threads = max(1, (os.cpu_count() or 1) // self.jobs)  # each worker's scan threads: cores shared out
            self.pool = ProcessPoolExecutor(
                self.jobs, mp_context=context, initializer=_start_worker, initargs=(threads,)
            )
            for _ in range(self.jobs):
                self.pool.submit(_start_worker, threads)  # each submit starts a worker while there are fewer
        return self.pool

    def _drop_workers(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None

    def _read_here(self, ckpt: RunCheckpoint, read: list[tuple[Path, Read]] | None = None) -> dict[Path, Kept]:
        """Judge here; parts the workers read already (`read`: by the path the judge opens) are not read
        again, the others are."""
        kept: dict[Path, Kept] = {}
        reader = Reader(verify=self.verify, keep=self._keep(kept))
        for path, (opened, values) in read or []:
            reader.cache[path] = opened
            if values is not None:
                kept[opened.path] = values
        listed = order(ckpt)  # its place as listed, before its records are read (as last-good keeps it)
        judge(ckpt, reader)
        self._in_run(ckpt, reader, listed)
        return kept

    def _in_run(self, ckpt: RunCheckpoint, reader: Reader, listed: tuple[int, float, str]) -> None:
        """What the run's saves judged so far tell of this one (analysis.runs.context, as last-good asks it:
        MISSING_PARTS against its peers' files, an Accelerate save's steps, MIXED_RUN): judged again with
        them (its parts are in the reader), and kept to judge it again when the run changes."""
        self.context.put(ckpt, listed, reader)
        run_level = self.context.findings(ckpt.path)
        peers = [f for f in run_level if f.code == "MISSING_PARTS"]  # where last-good's listing puts them: first
        ckpt.findings = peers + ckpt.findings + [f for f in run_level if f not in peers]
        if run_level:
            judge(ckpt, reader)
        self.saves[ckpt.path] = _Judged(_kept_of(ckpt), resumable(ckpt), run_level)

    def _rejudged(self, newest: Path | None = None) -> list[Event]:
        """The saves judged before (all but `newest`) that the run's other saves now judge otherwise: each
        given its verdict again from what was kept of it (no byte read), an event where its verdict or the
        codes of its run-level findings changed (a message that only counts the run's saves anew is kept
        quietly)."""
        events = []
        for path, held in self.saves.items():
            run_level = self.context.findings(path) if path != newest else held.run_level
            if run_level != held.run_level and (event := self._judged_again(held, run_level)) is not None:
                events.append(event)
        return events

    def _judged_again(self, held: _Judged, run_level: list[Finding]) -> Event | None:
        """An earlier save's verdict given again with the run-level findings it has now; its event, where
        its verdict or their codes changed."""
        ckpt = held.checkpoint
        before = (ckpt.verdict, sorted(f.code for f in held.run_level))
        own = [f for f in ckpt.findings if f not in held.run_level]
        peers = [f for f in run_level if f.code == "MISSING_PARTS"]
        ckpt.findings = peers + own + [f for f in run_level if f not in peers]
        give_verdict(ckpt, held.resumable.__bool__)
        held.run_level = run_level
        if (ckpt.verdict, sorted(f.code for f in run_level)) == before:
            return None
        event = Event(REJUDGED, _kept_of(ckpt), findings=_own_findings(ckpt))
        event.seconds_after_save = max(0.0, self.clock() - ckpt.time)
        return event

    def _forget(self, gone: list[Path]) -> list[Event]:
        """Saves judged before and removed since (a run's rotation, `save_total_limit`): their facts leave the
        run's context, and what they decided of the others is decided again."""
        for path in gone:
            self.context.drop(path)
            self.saves.pop(path, None)
            self.judged.pop(str(path), None)
        return self._rejudged() if gone else []

    def _keep(self, kept: dict[Path, Kept]) -> Callable[[Checkpoint], Kept] | None:
        """What each part's scan keeps (into `kept`, by the part's path): the compared values, within what
        is left of the save's budget."""
        if not self.keep_bytes:
            return None

        def keep(listed: Checkpoint) -> Kept:
            room = self.keep_bytes - sum(k.nbytes for k in kept.values())
            wanted = kept[listed.path] = compared_values(listed, max(0, room))
            return wanted

        return keep

    def _event(self, event: Event) -> Event:
        self.events += 1
        event.index = self.events
        return event

    # ------------------------------------------------------------------------------------------ judging

    def _judge(self, ckpt: RunCheckpoint, files: Signature, kind: str, kept: dict[Path, Kept]) -> Event:
        """The event of a checkpoint the judge has read: its findings, the comparison, the anomalies."""
        event = Event(kind, ckpt, findings=_own_findings(ckpt))
        event.seconds_after_save = max(0.0, self.clock() - newest_change(files)) if files else 0.0
        if kind != JUDGED:
            return event
        series = self.series.get(series_key(ckpt))
        if series is not None and series.parts:
            event.previous = series.path
            event.updates = self._compare(series, ckpt, kept)
            event.findings.extend(self._anomalies(series, ckpt, event.updates))
        event.findings.extend(self._nonfinite_onset(ckpt, event))
        return event

    def _compare(self, series: _Series, ckpt: RunCheckpoint, kept: dict[Path, Kept]) -> Updates | None:
        total: Updates | None = None
        for key, opened in _parts(ckpt).items():
            before = series.parts.get(key)
            if before is None:
                continue
            now = kept.get(opened.path)
            values = now.values if now is not None else None
            updates = compare_saves(before, opened, series.files, series.values.get(key), values)
            if total is None:
                total = updates
            else:
                total.merge(updates)
        if total is not None:
            _stamp_steps(total, ckpt, series)
        return total

    def _remember(self, ckpt: RunCheckpoint, event: Event, files: Signature, kept: dict[Path, Kept]) -> None:
        if event.kind != JUDGED:
            return
        series = self.series.setdefault(series_key(ckpt), _Series())
        parts = _parts(ckpt)
        if not parts:
            return
        if series.files is not None:
            series.files.close()
        series.path, series.parts, series.files = ckpt.path, parts, _hold_open(ckpt, parts, files)
        # the previous save's kept values go here (released), this save's take their place
        series.values = {key: kept[opened.path].values for key, opened in parts.items() if opened.path in kept}
        if series.files is None:
            series.parts, series.values = {}, {}  # replaced before it could be held open: nothing to compare with
        if event.updates is not None:
            _record_ratios(series, event.updates)

    # ------------------------------------------------------------------------------------------ anomalies

    def _anomalies(self, series: _Series, ckpt: RunCheckpoint, updates: Updates | None) -> list[Finding]:
        if updates is None:
            return []
        return _ratio_outliers(series, updates, _at(ckpt)) + _frozen_layers(series, updates, _at(ckpt))

    def _nonfinite_onset(self, ckpt: RunCheckpoint, event: Event) -> list[Finding]:
        hits = [f for f in event.findings if f.code == "NONFINITE"]
        if not hits or self.nonfinite_seen is not None:
            return []
        self.nonfinite_seen = ckpt.path
        tensors = list(dict.fromkeys(f.tensor for f in hits if f.tensor))
        return [Finding("NONFINITE_ONSET", _onset_message(ckpt, tensors), tensors[0] if tensors else None)]


def _onset_message(ckpt: RunCheckpoint, tensors: list[str]) -> str:
    step = f"step {ckpt.step}" if ckpt.step is not None else "an unknown step"
    named = f": {', '.join(tensors[:4])}{' ...' if len(tensors) > 4 else ''}" if tensors else ""
    return (f"NaN/Inf first appears at {step} ({ckpt.path.name}); every earlier checkpoint of the run "
            f"this watch judged held none{named}")  # fmt: skip


def _per_step(updates: Updates) -> int:
    return updates.step_delta if updates.step_delta and updates.step_delta > 0 else 1


def _stamp_steps(total: Updates, ckpt: RunCheckpoint, series: _Series) -> None:
    """The steps the comparison is between, where the parts did not say: this save's, and the last one's name."""
    if total.step is None:
        total.step = ckpt.step
    if total.previous_step is None and series.path is not None:
        total.previous_step = step_in_name(series.path.name) if series.path.is_dir() else None


def _record_ratios(series: _Series, updates: Updates) -> None:
    """This save's update ratios per step join the series' history; the layers that changed are noted."""
    per = _per_step(updates)
    for group in RATIO_GROUPS:
        ratio = updates.ratio(group)
        if ratio is not None and ratio != float("inf"):
            series.ratios.setdefault(group, []).append(ratio / per)
    series.changing = {name for name, norms in updates.layers.items() if norms.changed}


def _ratio_outliers(series: _Series, updates: Updates, at: str) -> list[Finding]:
    """UPDATE_RATIO_OUTLIER: a group's update per step far above or below the run's recent median."""
    out: list[Finding] = []
    per = _per_step(updates)
    for group in RATIO_GROUPS:
        ratio, history = updates.ratio(group), series.ratios.get(group, [])[-HISTORY_WINDOW:]
        if ratio is None or len(history) < HISTORY_NEEDED:
            continue
        typical = statistics.median(history)
        now = ratio / per
        if typical > 0 and (now > typical * OUTLIER_FACTOR or now < typical / OUTLIER_FACTOR):
            how = "above" if now > typical else "below"
            message = (f"{group} update ||Δw||/||w|| {now:.3g} per step {at}, more than {OUTLIER_FACTOR:g}x "
                       f"{how} the run's median of {typical:.3g} over its last {len(history)} saves")  # fmt: skip
            out.append(Finding("UPDATE_RATIO_OUTLIER", message))
    return out


def _frozen_layers(series: _Series, updates: Updates, at: str) -> list[Finding]:
    """LAYER_FROZEN: a layer that changed the save before and is bit-identical now (full precision, finite)."""
    out: list[Finding] = []
    for layer, norms in sorted(updates.layers.items()):
        if layer in series.changing and not norms.changed and norms.full_precision and not norms.nonfinite:
            message = (f"{layer} stopped changing {at}: its {norms.tensors} tensor(s) are bit-identical to "
                       f"{_at_series(series)}, though they changed the save before")  # fmt: skip
            out.append(Finding("LAYER_FROZEN", message, layer))
    return out


# ---------------------------------------------------------------------------------------------- workers


def read_part(path: Path, verify: bool, keep_bytes: int) -> Read:
    """One part of a save, as the judge's reader reads it (in a worker process): its listing, checks and
    value scan, and the values the scan kept for the comparison."""
    kept: list[Kept] = []

    def keep(listed: Checkpoint) -> Kept:
        kept.append(compared_values(listed, keep_bytes))
        return kept[-1]

    opened = inspect_path(path, quick=not verify, keep=keep if keep_bytes else None)
    return opened, (kept[0] if kept else None)


def _start_worker(threads: int) -> None:
    settings.set_threads(threads)


def _result(future: Future[Read]) -> Read | None:
    """A worker's reading, or None when it failed (the judge then reads the part here, as without workers:
    the same findings, or the same error)."""
    try:
        return future.result()
    except Exception:  # noqa: BLE001 - a broken pool or a part that cannot be opened: read here instead
        return None


# ---------------------------------------------------------------------------------------------- helpers


def is_finished(ckpt: RunCheckpoint) -> bool:
    """Has the framework's own "done" mark been written (see the module docstring)?"""
    path = ckpt.path
    if ckpt.framework == "dcp":
        return (path / DCP_METADATA).is_file()
    if ckpt.framework == "hf-trainer":
        return (path / TRAINER_STATE).is_file()
    if ckpt.framework == "deepspeed":
        return _pointer_reached(path.parent / LATEST, path.name)
    if ckpt.framework == "megatron":
        return _pointer_reached(path.parent / TRACKER, path.name)
    if any(f.code == "LEFTOVER_TMP" and not path.exists() for f in ckpt.findings):
        return False  # only the tmp is there: the save died, or has not yet renamed it into place
    if ckpt.framework in NO_DONE_MARK:
        return False  # its folder is judged once quiet
    return path.exists()


def _pointer_reached(pointer: Path, name: str) -> bool:
    """`latest` (or Megatron's tracker) names this tag or a later one."""
    text = read_text(pointer)
    if not text:
        return False
    if text == name:
        return True
    mine, theirs = step_in_name(name), step_in_name(text)
    return mine is not None and theirs is not None and theirs >= mine


def signature(ckpt: RunCheckpoint) -> Signature:
    """Every file of a checkpoint (its folder's, or the file and its tmp), with size, time and inode."""
    out: list[tuple[str, int, int, int]] = []
    path = ckpt.path
    candidates: list[Path]
    if path.is_dir():
        candidates = sorted(p for p in path.rglob("*") if not p.is_dir())
    else:
        candidates = [path, path.with_name(path.name + TMP_SUFFIX)]
    for file in candidates:
        try:
            st = file.stat()
        except OSError:
            continue
        name = str(file.relative_to(path)) if path.is_dir() else file.name
        out.append((name, st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(out)


def newest_change(files: Signature) -> float:
    return max((mtime for _, _, mtime, _ in files), default=0) / 1e9


STEP_DIGITS = re.compile(r"\d+")


def series_key(ckpt: RunCheckpoint) -> tuple[str, str, str]:
    """Saves of one series: the same file written again, or folders named alike but for their step."""
    return (ckpt.framework, str(ckpt.path.parent), STEP_DIGITS.sub("#", ckpt.path.name))


def _parts(ckpt: RunCheckpoint) -> dict[str, Checkpoint]:
    """The opened parts that hold tensors, keyed alike across saves of a series (digits dropped)."""
    out: dict[str, Checkpoint] = {}
    for part in ckpt.parts:
        if part.checkpoint is None or not part.checkpoint.tensors:
            continue
        rel = os.path.relpath(part.path, ckpt.path) if part.path != ckpt.path else "."
        out[STEP_DIGITS.sub("#", rel)] = part.checkpoint
    return out


def _order(ckpt: RunCheckpoint) -> tuple[int, float, str]:
    """Oldest first, by step; a save whose records are unread yet (a tmp alone) by the step in its name."""
    step = ckpt.step if ckpt.step is not None else step_in_name(ckpt.path.name)
    return (step if step is not None else -1, ckpt.time, str(ckpt.path))


def _hold_open(ckpt: RunCheckpoint, parts: dict[str, Checkpoint], files: Signature) -> Blobs | None:
    """Open every file the parts' tensors live in, and check a single file is still the one judged (its inode)."""
    blobs = Blobs()
    try:
        for opened in parts.values():
            for storage in opened.storages.values():
                blobs.fd(storage.file)
        if ckpt.path.is_file():
            inode = next((ino for name, _, _, ino in files if name == ckpt.path.name), None)
            if inode is None or os.fstat(blobs.fd(ckpt.path)).st_ino != inode:
                blobs.close()
                return None
    except (OSError, UnreadableStorage):
        blobs.close()
        return None
    return blobs


def _own_findings(ckpt: RunCheckpoint) -> list[Finding]:
    # a tmp beside a whole part is the next save in flight: this watch reports that save on its own
    return _unique(ckpt.findings + [f for p in ckpt.parts for f in p.findings if f.code != "LEFTOVER_TMP"])


def _kept_of(ckpt: RunCheckpoint) -> RunCheckpoint:
    """A judged save without its parts' listings: what its verdict is given from again (judge.give_verdict)."""
    parts = [Part(p.path, p.role, p.loaded, findings=list(p.findings)) for p in ckpt.parts]
    kept = RunCheckpoint(ckpt.path, ckpt.framework, ckpt.step, parts, list(ckpt.findings), verdict=ckpt.verdict,
                         reasons=list(ckpt.reasons), held_against=list(ckpt.held_against), notes=list(ckpt.notes),
                         values_checked=ckpt.values_checked, time=ckpt.time)  # fmt: skip
    kept.size = ckpt.size
    return kept


def _structure_broken(event: Event) -> bool:
    return event.checkpoint.verdict != GOOD and any(f.code in STRUCTURE_CODES for f in event.findings)


def _unique(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[str, str, str | None]] = set()
    out = []
    for f in findings:
        key = (f.code, f.message, f.tensor)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def _at(ckpt: RunCheckpoint) -> str:
    return f"at step {ckpt.step} ({ckpt.path.name})" if ckpt.step is not None else f"in {ckpt.path.name}"


def _at_series(series: _Series) -> str:
    return f"the previous save ({series.path.name})" if series.path is not None else "the previous save"
