"""One checkpoint: header, group bar, sortable/filterable tensor table (or tree), details, findings."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import ContentSwitcher, Input, Label, ProgressBar
from textual.worker import Worker, WorkerState

from ckinspect import steps
from ckinspect.analysis.value_stats import ValueStats
from ckinspect.fmt import terminal_safe
from ckinspect.io.folders import absolute, on_disk
from ckinspect.io.remote import as_path
from ckinspect.model import Checkpoint
from ckinspect.tui.core import ScanOutcome, add_findings, name_matcher
from ckinspect.tui.host import failure_text
from ckinspect.tui.messages import CheckpointLoaded, Progress, Reading, ScanFinished, StatsReady
from ckinspect.tui.widgets.checkpoint_header import CheckpointHeader
from ckinspect.tui.widgets.details_pane import DetailsPane
from ckinspect.tui.widgets.findings_panel import FindingsPanel
from ckinspect.tui.widgets.footer import KeysFooter
from ckinspect.tui.widgets.group_bar import GroupBar
from ckinspect.tui.widgets.palette import SEVERITY_COLOURS, themed
from ckinspect.tui.widgets.tensor_table import (
    COLUMNS,
    DESCENDING_FIRST,
    CompositeRow,
    TensorRow,
    TensorTable,
    owners,
    tensor_rows,
)
from ckinspect.tui.widgets.tensor_tree import TensorTree
from ckinspect.tui.widgets.virtual_table import Row, VirtualTable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ckinspect.tui.host import Host


class InspectScreen(Screen[None]):
    app: Host  # for the type checker: textual types `app` as App[Any]
    AUTO_FOCUS = ""  # nothing until the tables are there: a filter box focused while loading ate the q of quit
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "focus_filter", "Filter", tooltip="Filter tensor names: a substring, or a glob with * ? ["),
        Binding("s", "sort_by('size')", "Size", tooltip="Sort by size, largest first (again: reverse)"),
        Binding(
            "n",
            "sort_by('name')",
            "Name",
            tooltip="Sort by name, in natural order: state.2 before state.10",
            show=False,
        ),
        Binding("e", "sort_by('elements')", "Elements", tooltip="Sort by element count", show=False),
        Binding("T", "sort_by('dtype')", "Dtype", tooltip="Sort by dtype", show=False),
        Binding("G", "sort_by('group')", "Group", tooltip="Sort by group", show=False),
        Binding("P", "sort_by('shape')", "Shape", tooltip="Sort by shape", show=False),
        Binding("r", "sort_reverse", "Reverse", tooltip="Reverse the sort order", show=False),
        Binding("g", "toggle_tree", "Tree", tooltip="Switch between the table and a tree grouped by module path"),
        Binding("v", "value_stats", "Values", tooltip="Compute value statistics of the selected tensor", show=False),
        Binding("y", "copy_name", "Copy", tooltip="Copy the selected tensor's name (Y: the file's path)", show=False),
        Binding("Y", "copy_path", "Copy path", tooltip="Copy the checkpoint's path", show=False),
        Binding(
            "o",
            "export('csv')",
            "Export",
            tooltip="Write the tensors shown (filtered, sorted) to a CSV file",
            show=False,
        ),
        Binding("O", "export('json')", "Export JSON", tooltip="Write the tensors shown to a JSON file", show=False),
        Binding(
            "f",
            "focus_findings",
            "Findings",
            tooltip="Go to the findings; Enter on one jumps to its tensor",
            show=False,
        ),
        Binding("m", "metadata", "Metadata", tooltip="Values beside the tensors: config, lr and betas, loss, run"),
        Binding("d", "diff_with", "Diff", tooltip="Compare with another checkpoint"),
        Binding("w", "drift", "Drift", tooltip="fp16/bf16 rounding error per tensor, and logit drift", show=False),
        Binding("R", "repair", "Repair", tooltip="Plan repairs of interrupted saves in this folder", show=False),
        Binding("escape", "back", "Back", show=False),
    ]

    FOOTER_MORE = ("value_stats", "focus_findings", "drift", "export('csv')", "copy_name", "repair", "sort_reverse")

    def __init__(self, target: Path, ckpt: Checkpoint | None = None, scanned: ScanOutcome | None = None) -> None:
        super().__init__()
        self.target = as_path(target)
        self.ckpt: Checkpoint | None = ckpt
        self.scanned = scanned  # the folder view's scan of this checkpoint (its findings are already on ckpt)
        self.scan_note = ""
        self.scan_stats: dict[str, ValueStats] = {}
        self.stats_cache: dict[str, ValueStats] = {}
        self.params: dict[str, str] = {}  # optimizer state -> its parameter, and parameter -> "<prefix>.state.N.*"
        self.owner: dict[str, str] = {}  # a composite tensor's part -> the composite (its row stands for both)

    def compose(self) -> ComposeResult:
        yield CheckpointHeader(id="ckpt-header")
        yield GroupBar(id="group-bar")
        with Vertical(id="loading"):
            yield Label(Text(f"reading {terminal_safe(self.target)} …"), id="loading-label")
            yield ProgressBar(total=None, show_eta=False, id="loading-progress")
        with Horizontal(id="body"):
            with Vertical(id="main"):
                yield Input(placeholder="filter: substring or glob (model.*.attn.*)", id="filter")
                with ContentSwitcher(initial="tensors", id="views"):
                    yield TensorTable(id="tensors")
                    yield TensorTree(id="tree")
            with Vertical(id="side"):
                yield DetailsPane(id="details")
                yield FindingsPanel(id="findings")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one("#filter", Input).cursor_blink = self.app.cursor_blink_enabled
        self.query_one("#body").display = False
        self.query_one(CheckpointHeader).show_loading(str(self.target))
        self.load()

    # ------------------------------------------------------------ workers

    @work(thread=True, exclusive=True, exit_on_error=False, group="load", description="reading the checkpoint")
    def load(self) -> None:
        backend = self.app.backend
        with steps.watching(lambda what, done, total: self.post_message(Reading(what, done, total))):
            ckpt = self.ckpt or backend.load(self.target)
            steps.step("tensors to lay out", len(ckpt.tensors))
            params = backend.optimizer_params(ckpt)
            states: dict[str, str] = {}
            for state, param in params.items():
                states.setdefault(param, state.rsplit(".", 1)[0] + ".*")
            self.params = {**params, **states}
            self.owner = owners(ckpt)
            self.post_message(CheckpointLoaded(ckpt, tensor_rows(ckpt), backend.summarize(ckpt)))

    @work(thread=True, exclusive=True, exit_on_error=False, group="scan", description="scanning values")
    def scan(self, ckpt: Checkpoint) -> None:
        outcome = self.app.backend.scan(ckpt, progress=lambda f: self.post_message(Progress("scan", f)))
        self.post_message(ScanFinished(outcome.findings, outcome.stats))

    @work(thread=True, exclusive=True, exit_on_error=False, group="stats", description="value statistics")
    def compute_stats(self, ckpt: Checkpoint, name: str) -> None:
        tensor = ckpt.tensor(name)
        if tensor is None:
            return
        stats = self.app.backend.value_stats(ckpt, tensor, progress=lambda f: self.post_message(Progress("stats", f)))
        self.post_message(StatsReady(name, stats))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """Every worker failure of this screen lands here."""
        if event.state != WorkerState.ERROR:
            return
        worker, why = event.worker, failure_text(event.worker.error)
        if worker.group == "load":
            self.query_one("#loading-label", Label).update(Text(f"cannot open {terminal_safe(self.target)}: {why}"))
            header = Text.assemble(
                (terminal_safe(self.target), "bold"), "\n", ("cannot be read", f"bold {SEVERITY_COLOURS['error']}")
            )
            self.query_one(CheckpointHeader).update(themed(header))
            self.query_one(GroupBar).display = False  # no "reading…" under a file that cannot be read
            self.query("#loading-progress").remove()  # hidden, its animation would still tick
        elif worker.group == "scan":
            self.scan_note = f"value scan {why}"
            self._show_findings()
        elif worker.group == "stats":
            self.query_one(DetailsPane).show_stats_note(f"value statistics {why}")

    # ------------------------------------------------------------ results

    def on_progress(self, message: Progress) -> None:
        if message.task == "stats":
            self.query_one(DetailsPane).show_stats_note(f"computing… {message.fraction:.0%}")
        elif message.task == "scan":
            self.scan_note = f"value scan {message.fraction:.0%}"

    def on_reading(self, message: Reading) -> None:
        """A huge file's first paint: what is being read and how many so far, not a bare "reading…"."""
        if not self.query("#loading"):
            return  # it arrived after the rows
        count = f"{message.done:,}" + (f" of {message.total:,}" if message.total is not None else "")
        label = Text(f"reading {terminal_safe(self.target)} …\n{terminal_safe(message.what)}: {count}")
        self.query_one("#loading-label", Label).update(label)
        bar = self.query_one("#loading-progress", ProgressBar)
        bar.update(total=message.total or None, progress=message.done)  # no total: the bar says "busy"

    def on_checkpoint_loaded(self, message: CheckpointLoaded) -> None:
        self.ckpt = ckpt = message.ckpt
        self.query("#loading").remove()  # hidden, the progress bar's animation timer would still tick
        self.query_one("#body").display = True
        missing = sum(1 for row in message.rows if isinstance(row, TensorRow) and row.missing)
        self.query_one(CheckpointHeader).show(ckpt, missing)
        bar = self.query_one(GroupBar)
        if missing:
            from ckinspect.analysis.anatomy import declared_group_bytes

            bar.declared = declared_group_bytes(ckpt)
        bar.missing = missing
        bar.anatomy = message.anatomy
        table = self.query_one(TensorTable)
        if not message.rows:
            table.empty_text = "no tensors in this file" + (" (see the findings)" if ckpt.findings else "")
        table.set_rows(message.rows)
        table.focus()
        self._show_details()
        if self.scanned is not None:
            self.scan_stats = self.scanned.stats
            self.scan_note = ""
            self._show_findings()
            self._show_details(refresh_stats=True)
            return
        if self.app.quick:
            self.scan_note = "--quick: values not scanned"
            self._show_findings()
            return
        self.scan_note = "value scan running…"
        self._show_findings()
        self.scan(ckpt)

    def on_scan_finished(self, message: ScanFinished) -> None:
        if self.ckpt is not None:
            add_findings(self.ckpt, message.findings)
        self.scan_note = ""
        self.scan_stats = message.stats
        self._show_findings()
        self._show_details(refresh_stats=True)

    def on_stats_ready(self, message: StatsReady) -> None:
        self.stats_cache[message.tensor] = message.stats
        pane = self.query_one(DetailsPane)
        if pane.tensor_name == message.tensor:
            pane.show_stats(message.stats)
            pane.scroll_end(animate=False)  # asked for: on a short pane, show the numbers over the facts

    def _mark_rows(self) -> None:
        """Rows of tensors that findings name carry the worst one's sign and colour."""
        from ckinspect.vocab import SEVERITY_RANK

        if self.ckpt is None:
            return
        worst: dict[str, str] = {}
        for f in self.ckpt.findings:
            key = self.owner.get(f.tensor, f.tensor) if f.tensor else None  # a part's finding marks its composite
            if key and SEVERITY_RANK.get(f.severity, 0) > SEVERITY_RANK.get(worst.get(key, ""), -1):
                worst[key] = f.severity
        table = self.query_one(TensorTable)
        for row in table.rows:
            if isinstance(row, (TensorRow, CompositeRow)) and row.flag != worst.get(row.key):
                row.mark(worst.get(row.key))
        table.refresh()

    def _show_findings(self) -> None:
        self._mark_rows()
        if self.ckpt is not None:
            self.query_one(FindingsPanel).show(self.ckpt.findings, self.scan_note)

    def _show_details(self, name: str | None = None, refresh_stats: bool = False) -> None:
        if self.ckpt is None:
            return
        pane = self.query_one(DetailsPane)
        row = self._row(name)
        name = row.key if row is not None else name
        if isinstance(row, CompositeRow):
            pane.show_composite(row.composite, row.kind, row.shape)
            return
        tensor = self.ckpt.tensor(name) if name else None
        if not pane.show_tensor(self.ckpt, tensor, self.params.get(name or "", "")) and not refresh_stats:
            return  # already showing it (with whatever statistics arrived)
        if name in self.stats_cache:
            pane.show_stats(self.stats_cache[name])
        elif name in self.scan_stats:
            pane.show_stats(self.scan_stats[name], note="from the value scan; v adds a histogram")

    def _row(self, name: str | None) -> Row | None:
        """The row of this name (None: the highlighted one)."""
        table = self.query_one(TensorTable)
        return table.current_row if name is None else table.row_for(name)

    # ------------------------------------------------------------ interaction

    @on(VirtualTable.RowHighlighted, "#tensors")
    def _row_highlighted(self, event: VirtualTable.RowHighlighted) -> None:
        self._show_details(event.row.key if event.row else None)

    @on(VirtualTable.RowSelected, "#tensors")
    def _row_selected(self, event: VirtualTable.RowSelected) -> None:
        self.action_value_stats()

    @on(TensorTree.TensorChosen)
    def _tree_chosen(self, event: TensorTree.TensorChosen) -> None:
        self.query_one(TensorTable).move_to_key(event.name)
        self._show_details(event.name)

    @on(TensorTree.ModuleChosen)
    def _tree_module(self, event: TensorTree.ModuleChosen) -> None:
        self.query_one(DetailsPane).show_module(event.path, event.tensors, event.nbytes)

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        matches = name_matcher(event.value)
        table = self.query_one(TensorTable)
        table.set_filter(None if not event.value.strip() else (lambda row: matches(row.key)))
        if self.query_one(ContentSwitcher).current == "tree" and self.ckpt is not None:
            self.query_one(TensorTree).load(self.ckpt, set(self.shown_tensors()))

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self) -> None:
        self.query_one(TensorTable).focus()

    @on(FindingsPanel.JumpToTensor)
    def _jump(self, event: FindingsPanel.JumpToTensor) -> None:
        self.jump_to(event.tensor)

    @on(FindingsPanel.RepairWanted)
    def _repair_wanted(self) -> None:
        self.action_repair()

    def jump_to(self, name: str) -> None:
        name = self.owner.get(name, name)  # a composite's part: its row is the composite's
        table = self.query_one(TensorTable)
        if not table.move_to_key(name):
            self.query_one("#filter", Input).value = ""
            table.set_filter(None)
            table.move_to_key(name)
        self.query_one(ContentSwitcher).current = "tensors"
        table.focus()
        self._show_details(name)

    def shown_tensors(self) -> list[str]:
        """The tensors of the rows shown, in their order: a composite's row stands for its parts."""
        table = self.query_one(TensorTable)
        names: list[str] = []
        for key in table.visible_keys():
            row = table.row_for(key)
            names.extend(t.name for t in row.composite.parts.values()) if isinstance(
                row, CompositeRow
            ) else names.append(key)
        return names

    def action_focus_filter(self) -> None:
        self.query_one(ContentSwitcher).current = "tensors"
        self.query_one("#filter", Input).focus()

    def action_sort_by(self, column: str) -> None:
        """Sort on one column; the header's arrow says how (no notice over the rows)."""
        table = self.query_one(TensorTable)
        if table.sort_column == column:
            table.sort_by(column, reverse=not table.sort_reverse)
        else:
            table.sort_by(column, reverse=column in DESCENDING_FIRST)

    def action_sort_reverse(self) -> None:
        table = self.query_one(TensorTable)
        if table.sort_column is None:
            table.sort_by("name", reverse=True)
        else:
            table.sort_by(table.sort_column, reverse=not table.sort_reverse)

    def action_toggle_tree(self) -> None:
        switcher = self.query_one(ContentSwitcher)
        if switcher.current == "tensors":
            if self.ckpt is not None:
                table = self.query_one(TensorTable)
                names = None if table.row_count == len(table.rows) else set(self.shown_tensors())
                self.query_one(TensorTree).load(self.ckpt, names)
            switcher.current = "tree"
            self.query_one(TensorTree).focus()
        else:
            switcher.current = "tensors"
            self.query_one(TensorTable).focus()
            self._show_details()  # the table's row, whatever the tree showed last

    def action_value_stats(self) -> None:
        row = self.query_one(TensorTable).current_row
        if self.ckpt is None or row is None:
            return
        if isinstance(row, CompositeRow):  # the scan reads its parts, and its findings name them
            self.query_one(DetailsPane).show_stats_note("value statistics are per tensor: a composite's parts are "
                                                        "scanned with the file, and findings name them")  # fmt: skip
            return
        if row.key in self.stats_cache:
            self.query_one(DetailsPane).show_stats(self.stats_cache[row.key])
            return
        self.query_one(DetailsPane).show_stats_note("computing…")
        self.compute_stats(self.ckpt, row.key)

    def action_focus_findings(self) -> None:
        panel = self.query_one(FindingsPanel)
        panel.focus()
        if panel.highlighted is None and panel.option_count:
            panel.action_first()  # so that Enter acts on the worst finding straight away

    def action_diff_with(self) -> None:
        from ckinspect.tui.screens.pick_file import PickFileScreen

        def chosen(other: Path | None) -> None:
            if other is not None:
                from ckinspect.tui.screens.diff import DiffScreen

                self.app.push_screen(DiffScreen(self.target, other, a=self.ckpt))

        self.app.push_screen(PickFileScreen(self.target), chosen)

    def action_copy_name(self) -> None:
        row = self.query_one(TensorTable).current_row
        if row is not None:
            self.app.copy_to_clipboard(row.key)
            self.notify(f"copied {row.key}", timeout=2)

    def action_copy_path(self) -> None:
        """The absolute path (a URL as it is): it pastes into a shell in any folder."""
        path = absolute(self.target)
        self.app.copy_to_clipboard(path)
        self.notify(terminal_safe(f"copied {path}"), timeout=2, markup=False)

    def action_export(self, fmt: str) -> None:
        from ckinspect.tui.core import export_tensors

        if self.ckpt is None:
            return
        names = self.shown_tensors()
        try:
            written = export_tensors(self.ckpt, names, fmt, Path.cwd())
        except OSError as exc:
            self.notify(f"export failed: {exc}", severity="error", timeout=5)
            return
        where = terminal_safe(f"{len(names):,} tensors written to {written.absolute()} (a new file, nothing replaced)")
        self.notify(where, timeout=6, markup=False)

    def action_metadata(self) -> None:
        from ckinspect.tui.screens.metadata import MetadataScreen

        if self.ckpt is not None:
            self.app.push_screen(MetadataScreen(self.ckpt, self.params))

    def action_drift(self) -> None:
        from ckinspect.tui.screens.drift import DriftScreen

        self.app.push_screen(DriftScreen(self.target, self.ckpt))

    def action_repair(self) -> None:
        from ckinspect.tui.screens.repair import RepairScreen

        def closed(changed: bool | None) -> None:
            if changed:  # files moved: the findings (LEFTOVER_TMP) describe a folder that is gone
                self.reload()

        if not on_disk(self.target):  # repairs move and rewrite files beside the checkpoint
            self.notify(f"{terminal_safe(self.target)}: repair works on local folders only; a remote path is "
                        "read-only here", severity="error", markup=False)  # fmt: skip
            return
        folder = self.target if self.target.is_dir() else self.target.parent
        self.app.push_screen(RepairScreen(folder), closed)

    def reload(self) -> None:
        self.app.backend.forget_listings()  # read again: a URL's folder is listed afresh
        self.ckpt = None
        self.scanned = None
        self.stats_cache.clear()
        self.scan_stats = {}
        self.query_one(FindingsPanel).show([], "reading again…")
        self.load()

    def action_back(self) -> None:
        filter_box = self.query_one("#filter", Input)
        if filter_box.value:
            filter_box.value = ""
            self.query_one(TensorTable).focus()
        elif len(self.app.screen_stack) > 1:
            self.app.pop_screen()

    def palette_commands(self) -> list[tuple[str, str, str]]:
        """(title, help, action) for the command palette beyond this screen's key bindings."""
        bound = {b.action for b in self.BINDINGS if isinstance(b, Binding)}
        return [
            (f"Sort by {c.label}", f"Sort the tensor table on {c.label} (again: reverse)", f"sort_by('{c.key}')")
            for c in COLUMNS
            if f"sort_by('{c.key}')" not in bound
        ]
