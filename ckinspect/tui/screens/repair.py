"""The repair plan for a folder's interrupted saves: each action explained, applied only after a yes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Label, Static
from textual.worker import Worker, WorkerState

from ckinspect.fmt import terminal_safe
from ckinspect.tui.host import failure_text
from ckinspect.tui.messages import RepairApplied, RepairPlanned, RepairUndone
from ckinspect.tui.screens.confirm import ConfirmScreen
from ckinspect.tui.widgets.footer import KeysFooter
from ckinspect.tui.widgets.virtual_table import Column, Row, VirtualTable

if TYPE_CHECKING:
    from ckinspect.ops.repair import RepairPlan
    from ckinspect.tui.host import Host

COLUMNS = (
    Column("action", "action", 16),
    Column("file", "leftover", 28, keep_end=True),
    Column("state", "state", 10, optional=True),
    Column("reason", "why", None, min_width=16),
)


def shown(path: Path, folder: Path) -> str:
    """A path relative to the folder, safe on the screen (file names come from the folder)."""
    return terminal_safe(path.relative_to(folder) if path.is_relative_to(folder) else path)


ACTION_COLOURS = {"promote": "$ck-ok", "promote-keep-old": "$ck-ok", "set-aside": "$ck-warning", "nothing": "$ck-error"}


def action_rows(plan: RepairPlan, folder: Path) -> list[Row]:
    rows = []
    for index, a in enumerate(plan.actions):
        path = shown(a.leftover.tmp, folder)
        rows.append(
            Row(
                str(index),
                (a.action, path, a.state, a.reason),
                (index, path, a.state, a.reason),
                (f"bold {ACTION_COLOURS.get(a.action, '')}",),
            )
        )
    return rows


class RepairScreen(Screen[bool]):
    app: Host  # for the type checker: textual types `app` as App[Any]
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "a",
            "apply",
            "Apply",
            tooltip="Carry out the plan (asks first; nothing is deleted, replaced files are kept aside)",
        ),
        Binding("u", "undo", "Undo", tooltip="Restore what the last apply replaced or set aside"),
        Binding("p", "replan", "Re-plan", tooltip="Look at the folder again"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = Path(folder)
        self.plan: RepairPlan | None = None
        self.applied = False
        self.changed = False  # something was applied or undone: the screen below should read again

    def compose(self) -> ComposeResult:
        yield Label(self._title(), classes="title-line", id="repair-title")
        yield Static("planning…", classes="summary-line", id="repair-summary")
        yield VirtualTable(COLUMNS, id="repair-table", empty_text="planning…")
        yield Static("", id="explain")
        yield KeysFooter()

    def _title(self) -> Text:
        state = " — applied: u undoes it" if self.applied else " — dry run until you apply"
        return Text.assemble(("repair ", "bold"), terminal_safe(self.folder), state)

    def on_mount(self) -> None:
        self.make_plan()

    @work(thread=True, exclusive=True, exit_on_error=False, group="repair", description="planning repairs")
    def make_plan(self) -> None:
        self.post_message(RepairPlanned(self.app.backend.plan_repairs(self.folder)))

    @work(thread=True, exclusive=True, exit_on_error=False, group="repair", description="applying repairs")
    def carry_out(self, plan: RepairPlan) -> None:
        self.post_message(RepairApplied(self.app.backend.apply_plan(plan)))

    @work(thread=True, exclusive=True, exit_on_error=False, group="repair", description="undoing the last repair")
    def revert(self) -> None:
        self.post_message(RepairUndone(self.app.backend.undo(self.folder)))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            self.query_one("#repair-summary", Static).update(f"repair {failure_text(event.worker.error)}")
            table = self.query_one(VirtualTable)
            table.empty_text = "no plan"
            table.refresh()

    def on_repair_planned(self, message: RepairPlanned) -> None:
        self.plan = plan = message.plan
        self.query_one("#repair-title", Label).update(self._title())
        table = self.query_one(VirtualTable)
        table.empty_text = "nothing to repair: no interrupted save found"
        table.set_rows(action_rows(plan, self.folder))
        table.focus()
        pending, undecided = len(plan.pending), len(plan.undecided)
        summary = Text(f"{pending} action(s) to apply" if pending else "nothing to apply")
        if undecided:
            summary.append(f", {undecided} leftover(s) left alone (see why)")
        if self.applied:
            summary.append("  · last repair applied: press u to undo it", style="bold")
        self.query_one("#repair-summary", Static).update(summary)
        self._explain_current()

    def on_repair_applied(self, message: RepairApplied) -> None:
        self.applied = True
        self.changed = True
        result = message.result
        detail = f"{len(result.done)} action(s) done"
        if result.failed:
            detail += f", {len(result.failed)} skipped or failed: {result.failed[0].note or result.failed[0].reason}"
        failed = result.failed
        self.notify(
            terminal_safe(f"repair {detail}; press u to undo"),
            severity="warning" if failed else "information",
            timeout=5,
            markup=False,
        )
        self.make_plan()

    def on_repair_undone(self, message: RepairUndone) -> None:
        self.applied = False
        self.changed = True
        result = message.result
        if result.run_id is None:
            self.notify("nothing to undo: no repair was applied here", timeout=5)
        else:
            detail = f"{len(result.restored)} move(s) put back"
            if result.problems:
                detail += f"; {len(result.problems)} problem(s): {result.problems[0]}"
            self.notify(
                terminal_safe(f"repair undone: {detail}"),
                severity="warning" if result.problems else "information",
                timeout=5,
                markup=False,
            )
        self.make_plan()

    @on(VirtualTable.RowHighlighted)
    def _explain_current(self, event: VirtualTable.RowHighlighted | None = None) -> None:
        row = self.query_one(VirtualTable).current_row
        if row is None or self.plan is None:  # rows come from a plan: no plan, no row
            self.query_one("#explain", Static).update("")
            return
        action = self.plan.actions[int(row.key)]
        text = Text()
        text.append(f"{action.action}: ", style="bold")
        text.append(terminal_safe(action.reason))
        if action.status is not None:
            text.append("\nfound: ", style="dim")
            text.append(terminal_safe(action.status.explain()))
        text.append("\ntmp: ", style="dim")
        text.append(shown(action.leftover.tmp, self.folder))
        text.append("\nmain: ", style="dim")
        text.append(shown(action.leftover.main, self.folder))
        if action.note:
            text.append("\nnote: ", style="dim")
            text.append(terminal_safe(action.note))
        self.query_one("#explain", Static).update(text)

    def action_apply(self) -> None:
        if self.plan is None or not self.plan.pending:
            self.notify("nothing to apply")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.carry_out(self.plan)

        question = (
            f"Apply {len(self.plan.pending)} repair action(s) in {self.folder}?\n\n"
            "Replaced or set-aside files go to a quarantine folder beside them; you can undo this."
        )
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
            self.dismiss(self.changed)
