"""The repair plan for a folder's interrupted saves: each action explained, applied only after a yes."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, Label, Static
from textual.worker import Worker, WorkerState

from ckinspect.tui.core import as_records, format_value
from ckinspect.tui.messages import RepairApplied, RepairPlanned
from ckinspect.tui.screens.confirm import ConfirmScreen
from ckinspect.tui.screens.inspect import failure_text
from ckinspect.tui.widgets.virtual_table import Column, Row, VirtualTable

COLUMNS = (
    Column("action", "action", 16),
    Column("file", "leftover", 28, keep_end=True),
    Column("state", "state", 10, optional=True),
    Column("reason", "why", None, min_width=16),
)
_ACTION_KEYS = ("action", "kind", "op")
_FILE_KEYS = ("tmp", "path", "source", "file", "target")
_WHY_KEYS = ("reason", "why", "explanation", "message")


def explain(record: dict[str, Any]) -> str:
    text = next((str(record[k]) for k in _WHY_KEYS if record.get(k)), "")
    if not text and callable(record.get("explain")):
        text = record["explain"]()
    return text


def shown(path: Any, folder: Path) -> str:
    if path in (None, ""):
        return ""
    p = Path(path)
    return str(p.relative_to(folder)) if p.is_relative_to(folder) else str(p)


ACTION_COLOURS = {"promote": "#3bb58a", "promote-keep-old": "#3bb58a", "set-aside": "#e8a33d", "nothing": "#e5484d"}


def action_rows(records: list[dict[str, Any]], folder: Path) -> list[Row]:
    rows = []
    for index, r in enumerate(records):
        action = next((format_value(r[k]) for k in _ACTION_KEYS if r.get(k) is not None), "?")
        path = shown(next((r[k] for k in _FILE_KEYS if r.get(k) is not None), ""), folder)
        why = explain(r)
        state = format_value(r.get("state", ""))
        rows.append(Row(str(index), (action, path, state, why), (index, path, state, why), (f"bold {ACTION_COLOURS.get(action, '')}",)))
    return rows


class RepairScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "apply", "Apply", tooltip="Carry out the plan (asks first; nothing is deleted, replaced files are kept aside)"),
        Binding("u", "undo", "Undo", tooltip="Restore what the last apply replaced or set aside"),
        Binding("p", "replan", "Re-plan", tooltip="Look at the folder again"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = Path(folder)
        self.plan: Any = None
        self.records: list[dict[str, Any]] = []
        self.applied = False

    def compose(self) -> ComposeResult:
        yield Label(Text.assemble(("repair ", "bold"), str(self.folder), " — dry run until you apply"), classes="title-line")
        yield Static("planning…", classes="summary-line", id="repair-summary")
        yield VirtualTable(COLUMNS, id="repair-table", empty_text="planning…")
        yield Static("", id="explain")
        yield Footer()

    def on_mount(self) -> None:
        self.make_plan()

    @work(thread=True, exclusive=True, exit_on_error=False, group="repair", description="planning repairs")
    def make_plan(self) -> None:
        self.post_message(RepairPlanned(self.app.backend.plan_repairs(self.folder)))

    @work(thread=True, exclusive=True, exit_on_error=False, group="repair", description="applying repairs")
    def carry_out(self, plan: Any) -> None:
        self.post_message(RepairApplied(self.app.backend.apply_plan(plan)))

    @work(thread=True, exclusive=True, exit_on_error=False, group="repair", description="undoing the last repair")
    def revert(self) -> None:
        self.post_message(RepairApplied(self.app.backend.undo(self.folder), undone=True))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            self.query_one("#repair-summary", Static).update(f"repair {failure_text(event.worker.error)}")
            table = self.query_one(VirtualTable)
            table.empty_text = "no plan"
            table.refresh()

    def on_repair_planned(self, message: RepairPlanned) -> None:
        self.plan = message.plan
        self.records = as_records(message.plan, "actions", "steps", "items")
        table = self.query_one(VirtualTable)
        table.empty_text = "nothing to repair: no interrupted save found"
        table.set_rows(action_rows(self.records, self.folder))
        table.focus()
        count = len(self.records)
        summary = Text(f"{count} action(s) planned" if count else "nothing to repair")
        if self.applied:
            summary.append("  · last repair applied: press u to undo it", style="bold")
        self.query_one("#repair-summary", Static).update(summary)
        self._explain_current()

    def on_repair_applied(self, message: RepairApplied) -> None:
        self.applied = not message.undone
        result = message.result
        if message.undone:
            restored = getattr(result, "restored", None)
            problems = getattr(result, "problems", None) or []
            detail = f"{len(restored)} move(s) put back" if restored is not None else "undone"
            if problems:
                detail += f"; {len(problems)} problem(s): {problems[0]}"
            self.notify(f"repair undone: {detail}", severity="warning" if problems else "information", timeout=5)
        else:
            done = getattr(result, "done", None)
            failed = getattr(result, "failed", None) or []
            detail = f"{len(done)} action(s) done" if done is not None else "applied"
            if failed:
                detail += f", {len(failed)} skipped or failed"
            self.notify(f"repair {detail}; press u to undo", severity="warning" if failed else "information", timeout=5)
        self.make_plan()

    @on(VirtualTable.RowHighlighted)
    def _explain_current(self, event: VirtualTable.RowHighlighted | None = None) -> None:
        row = self.query_one(VirtualTable).current_row
        if row is None:
            self.query_one("#explain", Static).update("")
            return
        record = self.records[int(row.key)]
        text = Text()
        text.append(f"{row.cells[0]}: ", style="bold")
        text.append(explain(record) or "(no explanation given)")
        status = record.get("status")
        if isinstance(status, dict) and status.get("explain"):
            text.append("\nfound: ", style="dim")
            text.append(str(status["explain"]))
        for k in ("tmp", "main", "note"):
            if record.get(k):
                text.append(f"\n{k}: ", style="dim")
                text.append(shown(record[k], self.folder) if k != "note" else str(record[k]))
        self.query_one("#explain", Static).update(text)

    def action_apply(self) -> None:
        if not self.records:
            self.notify("nothing to apply")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.carry_out(self.plan)

        question = (f"Apply {len(self.records)} repair action(s) in {self.folder}?\n\n"
                    "Replaced or set-aside files go to a quarantine folder beside them; you can undo this.")
        self.app.push_screen(ConfirmScreen(question, "Apply"), answered)

    def action_undo(self) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                self.revert()

        self.app.push_screen(ConfirmScreen(f"Undo the last repair applied in {self.folder}?", "Undo"), answered)

    def action_replan(self) -> None:
        self.make_plan()

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 1:
            self.app.pop_screen()
