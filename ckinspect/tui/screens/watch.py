"""`ckinspect watch RUN_DIR`: the live screen. A timeline of the run's checkpoints with their verdicts; the
newest one's findings and what changed since the save before; a sparkline of the update ratio per group.

The follower (jobs.watch) runs in one thread worker: it waits for file events (or polls), judges
each finished save once and posts a `CheckpointJudged` per event. Nothing here reads a checkpoint.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Label, Sparkline, Static
from textual.worker import Worker, WorkerState

from ckinspect.analysis.updates import RATIO_GROUPS
from ckinspect.fmt import terminal_safe
from ckinspect.report.watch_report import ratio_text, shown
from ckinspect.tui.host import failure_text
from ckinspect.tui.widgets.footer import KeysFooter
from ckinspect.vocab import WATCH_KEEP_MIB

if TYPE_CHECKING:
    from ckinspect.tui.host import Host

VERDICT_STYLE = {"good": "green", "not-resumable": "yellow", "": "dim"}  # every other verdict is red
# (title, width): fixed widths, so a row arriving later never re-lays out the rows drawn before it. What
# says whether a save is good comes first: at 80 columns the verdict and findings are on screen, and the
# columns to their right are the ones cut (the detail below shows them for the selected row).
TIMELINE_COLUMNS = (
    ("#", 2),
    ("step", 6),
    ("verdict", 13),
    ("findings", 13),
    ("checkpoint", 15),
    ("Δstep", 5),
    ("model upd", 9),  # ||Δw||/||w|| since the save before
    ("optim upd", 9),
)


class WatchScreen(Screen[None]):
    app: Host  # for the type checker: textual types `app` as App[Any]
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open", "Open", tooltip="Inspect the selected checkpoint (Esc comes back here)"),
        Binding("escape", "back", "Back", show=False),
    ]

    @dataclass
    class CheckpointJudged(Message):
        """One event of the follower, as its JSON (the data the headless report prints)."""

        event: dict[str, Any]

    @dataclass
    class Following(Message):
        """How the follower learns of changes: file events, or polling (and why)."""

        mode: str

    def __init__(
        self,
        run_dir: Path,
        settle: float = 30.0,
        interval: float = 1.0,
        poll: bool = False,
        jobs: int = 1,
        keep_bytes: int = WATCH_KEEP_MIB << 20,
    ) -> None:
        super().__init__()
        self.run_dir, self.settle, self.interval, self.poll, self.jobs = Path(run_dir), settle, interval, poll, jobs
        self.keep_bytes = keep_bytes
        self.stop = threading.Event()
        self.events: list[dict[str, Any]] = []
        self.ratios: dict[str, list[float]] = {group: [] for group in RATIO_GROUPS}
        self.mode = ""
        self.following = True  # the cursor follows the newest save until the user moves it

    def compose(self) -> ComposeResult:
        yield Label(Text.assemble(("watch ", "bold"), terminal_safe(str(self.run_dir))), classes="title-line")
        yield Static("looking at the run…", id="watch-status", classes="summary-line")
        with Horizontal(id="watch-body"):
            yield DataTable(id="timeline", cursor_type="row", zebra_stripes=True)
            with Vertical(id="watch-side"):
                yield Static("no checkpoint judged yet", id="newest")
                for group in RATIO_GROUPS:
                    yield Label(f"{group} update ratio ||Δw||/||w|| per step", classes="spark-label")
                    yield Sparkline([], id=f"spark-{group}", classes="ratio-spark")
        yield KeysFooter()

    def on_mount(self) -> None:
        table = self.query_one("#timeline", DataTable)
        for name, width in TIMELINE_COLUMNS:
            table.add_column(name, key=name, width=width)
        self.follow()

    def on_unmount(self) -> None:
        self.stop.set()

    @work(thread=True, exclusive=True, exit_on_error=False, group="watch", description="following the run")
    def follow(self) -> None:
        from ckinspect.io.changes import Changes
        from ckinspect.jobs.watch import Follower

        if not self.run_dir.is_dir():  # started before the run: wait for its folder to appear
            self.post_message(self.Following(f"waiting for {terminal_safe(str(self.run_dir))} to be made"))
            while not self.run_dir.is_dir():
                if self.stop.wait(max(0.05, self.interval)):
                    return
        follower = Follower(
            self.run_dir, settle=self.settle, verify=not self.app.quick, jobs=self.jobs, keep_bytes=self.keep_bytes
        )
        changes = Changes(self.run_dir, interval=self.interval, poll=self.poll)
        self.post_message(self.Following(changes.mode + (f" ({changes.why})" if changes.why else "")))
        try:
            for event in follower.poll_each():
                self.post_message(self.CheckpointJudged(event.to_json()))
            for _ in changes.wakeups(self.stop):
                for event in follower.poll_each():
                    if self.stop.is_set():
                        return
                    self.post_message(self.CheckpointJudged(event.to_json()))
        finally:
            follower.close()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            self.query_one("#watch-status", Static).update(f"following the run {failure_text(event.worker.error)}")

    def on_watch_screen_following(self, message: Following) -> None:
        self.mode = message.mode
        self._status()

    def on_watch_screen_checkpoint_judged(self, message: CheckpointJudged) -> None:
        event = message.event
        self.events.append(event)
        self._add_row(event)
        updates = event.get("updates") or {}
        delta = updates.get("step_delta") or 1
        for group in RATIO_GROUPS:
            ratio = (updates.get("groups") or {}).get(group, {}).get("ratio")
            if isinstance(ratio, (int, float)):
                self.ratios[group].append(ratio / max(1, delta))
                self.query_one(f"#spark-{group}", Sparkline).data = list(self.ratios[group])
        if event["event"] != "in-progress" and self.following:
            self.query_one("#newest", Static).update(newest_text(event, str(self.run_dir)))
        self._status()

    @on(DataTable.RowHighlighted, "#timeline")
    def _highlighted(self, message: DataTable.RowHighlighted) -> None:
        """The selected save's detail; moving off the newest row stops following new saves."""
        index = message.data_table.cursor_row  # where it is now: saves judged since this message was
        # posted moved it on (following), and the row in the message would read as the user moving off
        if not 0 <= index < len(self.events):
            return
        self.following = index == len(self.events) - 1
        self.query_one("#newest", Static).update(newest_text(self.events[index], str(self.run_dir)))

    @on(DataTable.RowSelected, "#timeline")
    def _selected(self) -> None:
        self.action_open()

    def action_open(self) -> None:
        from ckinspect.tui.screens.inspect import InspectScreen

        index = self.query_one("#timeline", DataTable).cursor_row
        if 0 <= index < len(self.events) and self.events[index]["event"] != "in-progress":
            self.app.push_screen(InspectScreen(Path(self.events[index]["path"])))

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 1:  # the first screen, as everywhere: q quits, Esc does not
            self.app.pop_screen()

    def _add_row(self, event: dict[str, Any]) -> None:
        table = self.query_one("#timeline", DataTable)
        table.add_row(*timeline_cells(event, str(self.run_dir)), key=str(event["index"]))
        if self.following:
            table.move_cursor(row=table.row_count - 1)

    def _status(self) -> None:
        judged = [e for e in self.events if e["event"] not in ("in-progress", "rejudged")]
        latest = {e["path"]: e for e in self.events if e["event"] != "in-progress"}  # judged again: its new verdict
        bad = sum(1 for e in latest.values() if e["verdict"] != "good")
        text = f"{len(latest)} checkpoint(s) judged, {bad} not good"
        if judged and judged[-1]["step"] is not None:
            text += f"; newest at step {judged[-1]['step']}"
        self.query_one("#watch-status", Static).update(f"{text} — following by {self.mode or '…'}")


def timeline_cells(event: dict[str, Any], run_dir: str) -> tuple[str | Text, ...]:
    """One save's row: index, step, path, verdict, finding codes, Δstep and the model's and optimizer's
    update ratios."""
    codes = sorted({f["code"] for f in event["findings"]})
    return (
        str(event["index"]),
        str(event["step"]) if event["step"] is not None else "?",
        shown(event["path"], run_dir),
        Text(event["verdict"] or "writing…", style=VERDICT_STYLE.get(event["verdict"] or "", "red")),
        Text(", ".join(codes), style="red" if codes else ""),
        *update_cells(event.get("updates") or {}),
    )


def update_cells(updates: dict[str, Any]) -> tuple[str, str, str]:
    """Δstep and the model's and optimizer's update ratios since the previous save ("" before there is one)."""
    groups = updates.get("groups") or {}
    model, optimizer = (ratio_text(groups.get(g, {}).get("ratio")) if groups else "" for g in ("model", "optimizer"))
    delta = updates.get("step_delta")
    return ("" if delta is None else str(delta), model, optimizer)


def moment_text(stats: dict[str, Any]) -> str:
    """rms and max |x| of one kind of moment; they are over the finite values, so NaN/Inf are named
    instead of a max of 0 (all values NaN) that would read as a healthy, tiny moment."""
    nonfinite = stats.get("nonfinite") or 0
    if nonfinite and not stats.get("count"):
        return f"rms -, max |x| NaN/Inf: all {nonfinite:,} values are non-finite"
    text = f"rms {ratio_text(stats['rms'])}, max |x| {ratio_text(stats['max_abs'])}"
    return text + (f" over the finite values; {nonfinite:,} NaN/Inf" if nonfinite else "")


def newest_text(event: dict[str, Any], run_dir: str) -> Text:
    """The newest checkpoint: verdict, reasons, findings, and what changed since the previous save."""
    out = Text()
    out.append(shown(event["path"], run_dir), style="bold")
    out.append(f"  step {event['step']}\n" if event["step"] is not None else "\n")
    out.append(event["verdict"] or "", style=VERDICT_STYLE.get(event["verdict"] or "", "red"))
    if event["event"] == "abandoned":
        out.append(" — the save never finished and its writer is gone")
    out.append("\n")
    if event.get("updates"):
        previous = shown(event["previous"], run_dir) if event.get("previous") else "the previous save"
        _updates_text(out, event["updates"], previous)
    _findings_text(out, event["findings"])
    return out


def _updates_text(out: Text, updates: dict[str, Any], previous: str) -> None:
    """What changed since the previous save: update ratios per group, layers that did not move, moments."""
    out.append(f"since {previous} (Δstep {updates.get('step_delta')}):\n")
    for group, norms in updates["groups"].items():
        out.append(f"  {group}: ||Δw||/||w|| {ratio_text(norms['ratio'])}, {norms['changed']}/{norms['tensors']}")
        out.append(" tensors changed\n")
    still = [name for name, norms in updates["layers"].items() if not norms["changed"]]
    if still:
        out.append(f"  unchanged layers: {', '.join(still[:4])}{' …' if len(still) > 4 else ''}\n")
    for name, stats in updates["moments"].items():
        out.append(f"  {name}: {moment_text(stats)}\n")


def _findings_text(out: Text, findings: list[dict[str, Any]]) -> None:
    """The first eight findings, worst named in red, and how many more."""
    if not findings:
        out.append("no findings\n", style="green")
    for finding in findings[:8]:
        style = "red" if finding["severity"] == "error" else "yellow"
        out.append(f"{finding['code']}", style=f"bold {style}")
        out.append(f": {terminal_safe(finding['message'])}\n")
    if len(findings) > 8:
        out.append(f"… and {len(findings) - 8} more\n", style="dim")
