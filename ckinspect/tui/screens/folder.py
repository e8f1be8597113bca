"""A folder (or several paths): the checkpoints found, with format, size, step and finding badges.

A folder that holds a run (several checkpoints, or one made of several files: DeepSpeed, HF Trainer,
Accelerate, Megatron, DCP) is shown as its timeline instead: each checkpoint oldest first with its step,
time, size and verdict, the last good one marked ★, and the reasons of the highlighted one below.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Label, Static
from textual.worker import Worker, WorkerState, get_current_worker

from ckinspect import steps
from ckinspect.fmt import human_bytes, terminal_safe
from ckinspect.io import folders
from ckinspect.io.folders import on_disk
from ckinspect.io.remote import as_path
from ckinspect.model import Checkpoint
from ckinspect.tui.core import ScanOutcome, add_findings, natural_key, severity_badges, verdict_of
from ckinspect.tui.host import failure_text
from ckinspect.tui.messages import Progress, Reading, RunJudged, TargetsFound, TargetSummarized, TargetSummary
from ckinspect.tui.screens.inspect import InspectScreen
from ckinspect.tui.widgets.footer import KeysFooter
from ckinspect.tui.widgets.palette import SEVERITY_COLOURS, themed
from ckinspect.tui.widgets.virtual_table import Column, Row, VirtualTable
from ckinspect.vocab import SEVERITY_RANK

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ckinspect.tui.host import Host

COLUMNS = (
    Column("path", "checkpoint", None, min_width=16, keep_end=True),
    Column("format", "format", 12),
    Column("size", "size", 9, justify="right"),
    Column("step", "step", 7, justify="right"),
    Column("findings", "findings", 10),
)


RUN_COLUMNS = (
    Column("mark", "", 1, min_width=1),
    Column("path", "checkpoint", None, min_width=16, keep_end=True),
    Column("framework", "framework", 11),
    Column("step", "step", 7, justify="right"),
    Column("time", "time", 19, optional=1),
    Column("size", "size", 9, justify="right"),
    Column("verdict", "verdict", 13),
)
VERDICT_LEVEL = {"good": "ok", "not-resumable": "warning"}  # every other verdict is an error


def run_row(ckpt: Any, run: Any) -> Row:
    """One checkpoint of a run; the key is the file the inspect screen opens for it."""
    from ckinspect.report.run_report import LAST_GOOD_MARK, shown_path, when

    best = run.last_good
    mark = LAST_GOOD_MARK if best is not None and ckpt.path == best.path else ""
    name = shown_path(str(ckpt.path), str(run.path))
    step = "" if ckpt.step is None else str(ckpt.step)
    level = VERDICT_LEVEL.get(ckpt.verdict, "error")
    return Row(
        str(ckpt_target(ckpt)),
        (mark, name, ckpt.framework, step, when(ckpt.time), human_bytes(ckpt.size), ckpt.verdict),
        (
            mark,
            name,
            ckpt.framework,
            ckpt.step if ckpt.step is not None else -1,
            ckpt.time,
            ckpt.size,
            ckpt.verdict,
        ),  # fmt: skip
        (SEVERITY_COLOURS["ok"], None, None, None, None, None, SEVERITY_COLOURS[level]),
    )


def ckpt_target(ckpt: Any) -> Path:
    """What Enter opens: the checkpoint's first part a reader can list (its model file, DCP folder ...)."""
    readable = [p.path for p in ckpt.parts if p.role not in ("state", "pointer")]
    return readable[0] if readable else Path(ckpt.path)


def shown_path(path: Path, roots: list[Path]) -> str:
    for root in roots:
        if folders.is_dir(root) and path.is_relative_to(root):
            return str(path.relative_to(root)) or path.name
    return str(path)


def summary_row(summary: TargetSummary, roots: list[Path]) -> Row:
    name = shown_path(summary.path, roots)
    if summary.error:
        return Row(
            str(summary.path),
            (name, "?", "", "", "unreadable"),
            (natural_key(name), "", -1, -1, 3),
            (None, None, None, None, SEVERITY_COLOURS["error"]),
        )
    if summary.findings is None:
        return Row(str(summary.path), (name, "…", "", "", ""), (natural_key(name), "", -1, -1, -1))
    badges = severity_badges(summary.findings) or "ok"
    if summary.values != "scanned":
        badges += "*"  # from the structure alone: the value scan may add errors (NaN, Inf)
    level = verdict_of(summary.findings)
    step = summary.step if summary.step is not None else ""
    return Row(
        str(summary.path),
        (name, summary.format, human_bytes(summary.file_bytes or 0), str(step), badges),
        (
            natural_key(name),
            summary.format,
            summary.file_bytes or 0,
            step if isinstance(step, int) else -1,
            SEVERITY_RANK.get(level, 0),
        ),
        (None, None, None, None, SEVERITY_COLOURS.get(level)),
    )


class FolderScreen(Screen[None]):
    app: Host  # for the type checker: textual types `app` as App[Any]
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open", "Open", tooltip="Inspect the selected checkpoint"),
        Binding("s", "sort_next", "Sort", tooltip="Sort on the next column"),
        Binding("R", "repair", "Repair", tooltip="Plan repairs of interrupted saves in this folder"),
    ]

    def __init__(self, paths: list[Path]) -> None:
        super().__init__()
        self.roots = [as_path(p) for p in paths]  # a URL prefix stays a URL (io.folders lists it)
        self.summaries: dict[Path, TargetSummary] = {}
        self.loaded: dict[Path, Checkpoint] = {}
        self.scans: dict[Path, ScanOutcome] = {}  # value scans done here: opening a file does not repeat them
        self.unfinished: list[Path] = []
        self.run: Any = None  # the run this folder holds, once judged (analysis.runs.Run)
        self._judging = ""  # how far judging the run is, while it is judged

    def compose(self) -> ComposeResult:
        roots = ", ".join(map(terminal_safe, self.roots))
        yield Label(Text.assemble(("checkpoints in ", "bold"), roots), classes="title-line")
        yield Static("looking for checkpoints…", classes="summary-line", id="folder-summary")
        yield VirtualTable(COLUMNS, id="targets", empty_text="looking…")
        yield Static("", classes="summary-line", id="run-reasons")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one(VirtualTable).focus()
        self.discover()

    @work(thread=True, exclusive=True, exit_on_error=False, group="discover", description="finding checkpoints")
    def discover(self) -> None:
        backend = self.app.backend

        def judged(done: int, total: int) -> None:
            self.post_message(Progress("run", done / total if total else 0.0, done, total))

        with steps.watching(lambda what, done, total: self.post_message(Reading(what, done, total))):
            run = backend.run(self.roots, progress=judged)
        if run is not None:
            self.post_message(RunJudged(run))
            return
        paths = backend.find(self.roots)
        unfinished = backend.unfinished(self.roots, paths)
        self.post_message(TargetsFound(paths, unfinished))
        if len(paths) == 1 and len(self.roots) == 1 and not unfinished:
            return  # it opens straight away in its own screen, which reads it
        worker = get_current_worker()
        for path in paths:
            if worker.is_cancelled:
                return
            try:
                ckpt = backend.load(path)
            except Exception as exc:  # one unreadable file must not hide the others
                self.post_message(TargetSummarized(TargetSummary(path, error=str(exc))))
                continue
            self.loaded[path] = ckpt
            values = "not scanned" if self.app.quick else "pending"
            self.post_message(TargetSummarized(self._summary(path, ckpt, values)))
        if self.app.quick:
            return
        # second pass: the badges must agree with what opening a file shows, so values are scanned too
        for path in paths:
            scanning = self.loaded.get(path)
            if worker.is_cancelled:
                return
            if scanning is None:
                continue
            try:
                outcome = backend.scan(scanning)
            except Exception as exc:  # the structural badges stay, marked as such
                self.post_message(TargetSummarized(self._summary(path, scanning, f"value scan failed: {exc}")))
                continue
            add_findings(scanning, outcome.findings)
            self.scans[path] = outcome
            self.post_message(TargetSummarized(self._summary(path, scanning, "scanned")))

    @staticmethod
    def _summary(path: Path, ckpt: Checkpoint, values: str) -> TargetSummary:
        step = ckpt.metadata.get("step")
        return TargetSummary(path, ckpt.format, ckpt.file_bytes, step, list(ckpt.findings), values=values)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            why = failure_text(event.worker.error)
            self.query_one("#folder-summary", Static).update(Text(f"finding checkpoints {why}"))

    def on_progress(self, message: Progress) -> None:
        """A run's checkpoints being judged: how many of how many (the last step reads the newest good one's values)."""
        if message.task != "run" or self.run is not None or self.summaries:
            return
        if message.done < message.total:
            self._judging = f"judging checkpoints: {message.done:,} of {message.total:,} done…"
        else:
            self._judging = f"{message.total:,} checkpoints judged · reading the values of the newest good one…"
        self.query_one("#folder-summary", Static).update(self._judging)

    def on_reading(self, message: Reading) -> None:
        """What the checkpoint being judged is reading (a DCP folder of many ranks: its entries, n of N)."""
        if self.run is not None or self.summaries or not self._judging:
            return
        count = f"{message.done:,}" + (f" of {message.total:,}" if message.total is not None else "")
        text = Text(self._judging)
        text.append(f"\n{terminal_safe(message.what)}: {count}", style="dim")
        self.query_one("#folder-summary", Static).update(text)

    def on_targets_found(self, message: TargetsFound) -> None:
        self.unfinished = message.unfinished
        if len(message.paths) == 1 and len(self.roots) == 1 and not self.unfinished:
            # a DCP folder, a sharded set, or a folder holding one checkpoint: open it straight away
            # (pushed, so Escape still leads back to the listing)
            self.app.push_screen(InspectScreen(message.paths[0]))
        self.summaries = {p: TargetSummary(p) for p in message.paths}
        table = self.query_one(VirtualTable)
        table.empty_text = "no whole checkpoint here: R shows what the interrupted save left" if self.unfinished \
            else "no checkpoint found here"  # fmt: skip
        table.set_rows([summary_row(s, self.roots) for s in self.summaries.values()])
        self._summarize()

    def on_run_judged(self, message: RunJudged) -> None:
        from ckinspect.report.run_report import verdict_line

        self.run = message.run
        table = self.query_one(VirtualTable)
        table.columns = list(RUN_COLUMNS)
        table.set_rows([run_row(ckpt, self.run) for ckpt in self.run.checkpoints])
        best = self.run.last_good
        if best is not None:
            table.move_to_key(str(ckpt_target(best)))
        table.refresh()
        title = self.query_one(".title-line", Label)
        title.update(Text.assemble(("run ", "bold"), terminal_safe(self.run.path), " · a timeline of its checkpoints"))
        summary = Text(terminal_safe(verdict_line(self.run.to_json())) + " · Enter opens one")
        for finding in self.run.findings:
            summary.append(f"\n{finding.code}: {terminal_safe(finding.message)}", style=SEVERITY_COLOURS["error"])
        self.query_one("#folder-summary", Static).update(themed(summary))
        self._show_reasons(table.current_row)

    @on(VirtualTable.RowHighlighted)
    def _highlighted(self, event: VirtualTable.RowHighlighted) -> None:
        if self.run is not None:
            self._show_reasons(event.row)

    def _show_reasons(self, row: Row | None) -> None:
        ckpt = next((c for c in self.run.checkpoints if row is not None and str(ckpt_target(c)) == row.key), None)
        text = Text()
        if ckpt is not None:
            level = VERDICT_LEVEL.get(ckpt.verdict, "error")
            text.append(f"{terminal_safe(ckpt.path.name)}: {ckpt.verdict}", style=f"bold {SEVERITY_COLOURS[level]}")
            for reason in ckpt.reasons:
                text.append(f"\n  {terminal_safe(reason)}")
            for note in ckpt.notes:
                text.append(f"\n  {terminal_safe(note)}", style="dim")
        self.query_one("#run-reasons", Static).update(themed(text))

    def on_target_summarized(self, message: TargetSummarized) -> None:
        self.summaries[message.summary.path] = message.summary
        self.query_one(VirtualTable).replace_row(summary_row(message.summary, self.roots))
        self._summarize()

    def _summarize(self) -> None:
        done = [s for s in self.summaries.values() if s.findings is not None or s.error]
        text = f"{len(self.summaries)} checkpoint(s)"
        if len(done) < len(self.summaries):
            text += f" · reading {len(done)}/{len(self.summaries)}…"
        scanned = sum(1 for s in self.summaries.values() if s.values == "scanned")
        if self.app.quick:
            text += " · * structure only (--quick): values not scanned"
        elif scanned < len(self.summaries):
            text += f" · * values not scanned yet ({scanned}/{len(self.summaries)} done)"
        summary = Text(text + " · Enter opens one")
        if self.unfinished:
            names = terminal_safe(", ".join(shown_path(p, self.roots) for p in self.unfinished[:3]))
            more = f" and {len(self.unfinished) - 3} more" if len(self.unfinished) > 3 else ""
            summary.append(f"\nmissing (the save died before its rename): {names}{more} · R plans the repair",
                           style=SEVERITY_COLOURS["warning"])  # fmt: skip
        self.query_one("#folder-summary", Static).update(themed(summary))

    @on(VirtualTable.RowSelected)
    def _selected(self) -> None:
        self.action_open()

    def action_open(self) -> None:
        row = self.query_one(VirtualTable).current_row
        if row is not None:
            path = as_path(row.key)
            self.app.push_screen(InspectScreen(path, self.loaded.get(path), self.scans.get(path)))

    def action_sort_next(self) -> None:
        table = self.query_one(VirtualTable)
        keys = [c.key for c in table.columns]
        current = table.sort_column
        following = keys[(keys.index(current) + 1) % len(keys)] if current in keys else keys[0]
        table.sort_by(following, reverse=following in ("size", "step", "findings"))

    def action_repair(self) -> None:
        from ckinspect.tui.screens.repair import RepairScreen

        def closed(changed: bool | None) -> None:
            if changed:  # files moved: every badge (LEFTOVER_TMP) and every file read before is stale
                self.rediscover()

        remote = next((r for r in self.roots if not on_disk(r)), None)
        if remote is not None:  # repairs move and rewrite files in the folder
            self.notify(f"{terminal_safe(remote)}: repair works on local folders only; a remote path is read-only here",
                        severity="warning")  # fmt: skip
            return
        folder = next((r for r in self.roots if r.is_dir()), self.roots[0].parent)
        self.app.push_screen(RepairScreen(folder), closed)

    def rediscover(self) -> None:
        self.app.backend.forget_listings()  # look again: a URL prefix is listed afresh
        self.loaded.clear()
        self.scans.clear()
        self.run = None
        self.summaries = {}
        table = self.query_one(VirtualTable)
        table.empty_text = "looking…"
        table.set_rows([])
        self.query_one("#folder-summary", Static).update("looking for checkpoints again…")
        self.discover()
