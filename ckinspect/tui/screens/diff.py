"""Two checkpoints side by side: rows aligned by tensor name, a status column, max |Δ|, a summary line."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Input, Label, LoadingIndicator, Static
from textual.worker import Worker, WorkerState

from ckinspect.fmt import human_bytes, shape_text, terminal_safe
from ckinspect.io.remote import as_path
from ckinspect.model import Checkpoint, TensorInfo
from ckinspect.tui.core import name_matcher, natural_key
from ckinspect.tui.host import failure_text
from ckinspect.tui.messages import DiffComputed, DiffLoaded, Progress
from ckinspect.tui.pairs import Pair
from ckinspect.tui.widgets.footer import KeysFooter
from ckinspect.tui.widgets.palette import SEVERITY_COLOURS, STATUS_COLOURS, themed
from ckinspect.tui.widgets.virtual_table import Column, Row, VirtualTable
from ckinspect.vocab import SAME_STRUCTURE

if TYPE_CHECKING:
    from ckinspect.analysis.diff import DiffResult
    from ckinspect.tui.host import Host

LEFT_COLUMNS = (
    Column("name", "A: name", None, min_width=20, keep_end=True),
    Column("dtype", "dtype", 8, optional=True),
    Column("shape", "shape", 12),
)
RIGHT_COLUMNS = (
    Column("status", "status", 14),
    Column("delta", "max |Δ|", 8, justify="right"),
    Column("name", "B: name", None, min_width=20, keep_end=True),
    Column("dtype", "dtype", 8, optional=1),
    Column("shape", "shape", 12, optional=2),  # B's shape goes first: the status says when it differs
)
# When every matched tensor has the same name on both sides, or the same up to the renaming the
# summary line states (`model.x` vs `x`), the name is shown once (A's, on the left) and the right
# side keeps only what can differ: the names get the room.
ONE_NAME_LEFT = (
    Column("name", "name", None, min_width=24, keep_end=True),
    Column("dtype", "A dtype", 8, optional=True),
    Column("shape", "A shape", 12),
)
ONE_NAME_RIGHT = (
    Column("status", "status", 14),
    Column("delta", "max |Δ|", 8, justify="right"),
    Column("rel", "max rel", 8, justify="right"),
    Column("ndiff", "differing", 9, justify="right"),
    Column("dtype", "B dtype", 8),
    Column("shape", "B shape", 12),
)
ONLY_WHEN_WIDE = ("dtype", "rel", "ndiff")  # below WIDE_ENOUGH_FOR_DTYPES, Enter on a row shows them
VALUE_COLUMNS = (  # the values beside the tensors that differ: step, lr, loss, config, run settings
    Column("path", "value (beside the tensors)", None, min_width=20, keep_end=True),
    Column("a", "A", 16),
    Column("b", "B", 16),
)
LEFT_DROP_ORDER = ("dtype", "shape")  # with one name column, A's columns give way to a whole name
WIDE_ENOUGH_FOR_DTYPES = 110  # below this, the dtypes give way (the status says "dtype changed")


def table_width(columns: list[Column]) -> int:
    """The cells a table of these fixed-width columns takes: a space before each, the border, the scrollbar."""
    return sum(c.width or 0 for c in columns) + len(columns) + 1 + 2


def names_agree(pairs: list[Pair]) -> bool:
    def agree(x: str, y: str) -> bool:
        return x == y or x.endswith("." + y) or y.endswith("." + x)

    return all(agree(p.a.name, p.b.name) for p in pairs if p.a is not None and p.b is not None)


def align(a: Checkpoint, b: Checkpoint, matched: dict[str, str] | None = None) -> list[Pair]:
    """A's order, with each tensor only in B placed right after its predecessor in B.

    `matched` maps A names to B names (the diff matches `model.x` in a resume file with `x` in a
    weights file); without it, names are matched as stored.
    """
    in_a = {t.name: t for t in a.tensors}
    in_b = {t.name: t for t in b.tensors}
    if matched is None:
        matched = {name: name for name in in_a if name in in_b}
    after = _placed_after(b, {y: x for x, y in matched.items()})
    pairs: list[Pair] = []
    used: set[str] = set(in_a)

    def add_only_b(anchor: str | None) -> None:
        for name in after.get(anchor, []):
            key = name if name not in used else f"{name} (B)"
            used.add(key)
            pairs.append(Pair(key, None, in_b[name], "only in B"))

    add_only_b(None)
    for t in a.tensors:
        other = in_b.get(matched.get(t.name, ""))
        pairs.append(Pair(t.name, t, other, structure_status(t, other) or "comparing"))
        add_only_b(t.name)
    return pairs


def _placed_after(b: Checkpoint, b_to_a: dict[str, str]) -> dict[str | None, list[str]]:
    """B's tensors A lacks, by the A name of the tensor before them in B (None: before any)."""
    after: dict[str | None, list[str]] = {}
    previous: str | None = None
    for t in b.tensors:
        if t.name not in b_to_a:
            after.setdefault(previous, []).append(t.name)
        else:
            previous = b_to_a[t.name]
    return after


def structure_status(t: TensorInfo, other: TensorInfo | None) -> str:
    """What the structure alone says of a pair ("" when only the values can tell)."""
    if other is None:
        return "only in A"
    if other.dtype != t.dtype:
        return "dtype changed"
    return "shape changed" if tuple(other.shape) != tuple(t.shape) else ""


def apply_result(pairs: list[Pair], result: DiffResult) -> None:
    """Fold the diff's verdict into the pairs (changes and unreadable tensors are reported under A's name)."""
    changed = {c.name: c for c in result.changed}
    unreadable = {name for name, _ in result.unreadable}
    for pair in pairs:
        if pair.name in unreadable:
            pair.status = "unreadable"
            continue
        change = changed.get(pair.name)
        if change is not None:
            pair.max_abs_diff, pair.max_rel_diff, pair.n_diff = change.max_abs_diff, change.max_rel_diff, change.n_diff
            if pair.status == "comparing":
                pair.status = {"shape": "shape changed", "dtype": "dtype changed"}.get(change.reason, "changed")
        elif pair.status == "comparing":
            pair.status = SAME_STRUCTURE if result.quick else "same"  # --quick read no value: never "same"


STATUS_ORDER = (
    "only in A",
    "only in B",
    "shape changed",
    "dtype changed",
    "changed",
    "unreadable",
    "comparing",
    SAME_STRUCTURE,
    "same",
)
DESCENDING_FIRST = ("delta", "rel", "ndiff")
SUMMARY_ORDER = (  # the summary line counts the pairs in this order
    "same",
    SAME_STRUCTURE,
    "changed",
    "shape changed",
    "dtype changed",
    "only in A",
    "only in B",
    "unreadable",
    "comparing",
)  # a first sort on max |Δ| puts the largest change on top


def pair_sort_key(pair: Pair, side: str, column: str) -> Any:
    """The key one column sorts on, computed from the pair itself, so both panes order alike.
    `side` is "a" or "b": which tensor a name, dtype or shape column shows."""
    if column == "status":
        return STATUS_ORDER.index(pair.status) if pair.status in STATUS_ORDER else len(STATUS_ORDER)
    if column in ("delta", "rel", "ndiff"):
        value = {"delta": pair.max_abs_diff, "rel": pair.max_rel_diff, "ndiff": pair.n_diff}[column]
        return -1.0 if value is None else value
    return _side_key(pair, pair.a if side == "a" else pair.b, column)


def _side_key(pair: Pair, tensor: TensorInfo | None, column: str) -> Any:
    """A name, dtype or shape column's key: of the tensor that side shows."""
    if column == "name":
        return natural_key(tensor.name if tensor is not None else pair.name)
    if tensor is None:  # the side without the tensor sorts last, whatever the direction
        return (1, ())
    if column == "dtype":
        return (0, (tensor.dtype,))
    if column == "shape":
        return (0, tuple(tensor.shape))
    return natural_key(pair.name)


def _cells(t: TensorInfo | None) -> tuple[str, str, str]:
    if t is None:
        return ("—", "", "")
    return (t.name, t.dtype, shape_text(t.shape))


def _delta(x: float | None) -> str:
    if x is None:
        return ""
    return f"{x:.3g}"


def _pair_cells(p: Pair, one_name: bool) -> tuple[dict[str, str], dict[str, str]]:
    """Every cell either side can show, by column key (A: its tensor; B: its tensor and the verdict)."""
    a, b = _cells(p.a), _cells(p.b)
    a_cells = {"name": p.name if one_name else a[0], "dtype": a[1], "shape": a[2]}
    b_cells = {
        "status": p.status,
        "delta": _delta(p.max_abs_diff),
        "rel": _delta(p.max_rel_diff),
        "ndiff": "" if p.n_diff is None else f"{p.n_diff:,}",
        "name": b[0],
        "dtype": b[1],
        "shape": b[2],
    }
    return a_cells, b_cells


def rows_for(
    pairs: list[Pair], left_keys: list[str], right_keys: list[str], one_name: bool = False
) -> tuple[list[Row], list[Row]]:
    """The cells of each side for the columns shown (keys as in the Column definitions)."""
    left, right = [], []
    for index, p in enumerate(pairs):
        colour = STATUS_COLOURS.get(p.status) or None
        a_cells, b_cells = _pair_cells(p, one_name)
        left_cells = tuple(a_cells[k] for k in left_keys)
        right_cells = tuple(b_cells[k] for k in right_keys)
        b_style = None if p.b else "dim"
        left.append(Row(p.name, left_cells, (index,) * len(left_cells), (None if p.a else "dim",)))
        right.append(
            Row(
                p.name,
                right_cells,
                (index,) * len(right_cells),
                tuple(colour if k in ("status", "delta", "rel", "ndiff") else b_style for k in right_keys),
            )
        )
    return left, right


def sort_mark(table: VirtualTable, column: str, clicked: bool) -> str | None:
    """The column a pane marks as sorted: the one clicked on its own side, a verdict column on the right,
    and only one the pane shows."""
    marked = column if clicked or column in ("status", "delta", "rel", "ndiff") else None
    return marked if marked in [c.key for c in table.columns] else None


class DiffScreen(Screen[None]):
    app: Host  # for the type checker: textual types `app` as App[Any]
    AUTO_FOCUS = ""  # nothing until the tables are there: a filter box focused while loading ate the q of quit
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("x", "toggle_differences", "Diffs only", tooltip="Show only tensors that differ (or show all again)"),
        Binding("slash", "focus_filter", "Filter", tooltip="Filter tensor names: a substring or a glob"),
        Binding("n", "next_difference", "Next diff", tooltip="Move to the next tensor that differs"),
        Binding("y", "copy_name", "Copy", tooltip="Copy the selected tensor's name", show=False),
        Binding("D", "sort_delta", "Sort Δ", tooltip="Sort both panes by max |Δ|, largest first (again: reverse)"),
        Binding("enter", "detail", "Detail", tooltip="The selected tensor's diff: max |Δ|, max rel, count, histogram"),
        Binding("escape", "back", "Back", show=False),
    ]

    def __init__(self, a_path: Path, b_path: Path, *, a: Checkpoint | None = None, b: Checkpoint | None = None) -> None:
        super().__init__()
        self.a_path, self.b_path = as_path(a_path), as_path(b_path)
        self.a, self.b = a, b
        self.pairs: list[Pair] = []
        self.differences_only = False
        self.result: DiffResult | None = None
        self.result_note = "comparing values…"
        self.one_name = False
        self.sort: tuple[str, str, bool] | None = None  # (side, column, reverse) both panes are sorted on

    def compose(self) -> ComposeResult:
        yield Label(
            Text.assemble(("A ", "bold"), terminal_safe(self.a_path), ("   B ", "bold"), terminal_safe(self.b_path)),
            classes="title-line",
            id="diff-title",
        )
        yield Static("reading both checkpoints…", classes="summary-line", id="summary")
        yield Input(placeholder="filter: substring or glob", id="diff-filter", classes="filter-box")
        with Vertical(id="diff-loading"):
            yield LoadingIndicator()
        with Horizontal(id="tables"):
            yield VirtualTable(LEFT_COLUMNS, id="left", empty_text="no tensor to show", sorts_itself=False)
            yield VirtualTable(RIGHT_COLUMNS, id="right", empty_text="", sorts_itself=False)
        yield VirtualTable(VALUE_COLUMNS, id="values", empty_text="")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one("#diff-filter", Input).cursor_blink = self.app.cursor_blink_enabled
        self.query_one("#tables").display = False
        self.query_one("#values").display = False
        self.query_one("#right", VirtualTable).follow(self.query_one("#left", VirtualTable))
        self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="load", description="reading both checkpoints")
    def load(self) -> None:
        backend = self.app.backend
        a = self.a or backend.load(self.a_path)
        b = self.b or backend.load(self.b_path)
        matched = {x: y for x, y in backend.match_names(a, b) if x is not None and y is not None}
        self.post_message(DiffLoaded(a, b, matched))

    @work(thread=True, exclusive=True, exit_on_error=False, group="diff", description="comparing values")
    def compare(self, a: Checkpoint, b: Checkpoint) -> None:
        def progress(fraction: float) -> None:
            self.post_message(Progress("diff", fraction))

        result = self.app.backend.diff(a, b, progress, quick=self.app.quick)
        self.post_message(DiffComputed(result))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state != WorkerState.ERROR:
            return
        why = failure_text(event.worker.error)
        if event.worker.group == "load":
            self.query("#diff-loading").remove()
            self.query_one("#summary", Static).update(Text(f"cannot read both checkpoints: {why}"))
        else:
            self.result_note = f"value comparison {why}"
            self._refresh_rows()

    def on_diff_loaded(self, message: DiffLoaded) -> None:
        self.a, self.b = message.a, message.b
        self.pairs = align(message.a, message.b, message.matched)
        self.one_name = names_agree(self.pairs)
        left, right = self.query_one("#left", VirtualTable), self.query_one("#right", VirtualTable)
        left.columns = list(ONE_NAME_LEFT if self.one_name else LEFT_COLUMNS)
        if self.one_name and any(p.a is not None and p.b is not None and p.a.name != p.b.name for p in self.pairs):
            left.columns[0] = left.columns[0].replace(label="A: name")
        right.columns = list(ONE_NAME_RIGHT if self.one_name else RIGHT_COLUMNS)
        refreshed = self._fit_right()  # may drop the dtypes on a narrow screen, refreshing the rows
        self.query("#diff-loading").remove()  # hidden, its animation timer would still tick 16 times a second
        self.query_one("#tables").display = True
        if not refreshed:
            self._refresh_rows()
        self.query_one("#left", VirtualTable).focus()
        self.compare(message.a, message.b)

    def on_progress(self, message: Progress) -> None:
        if message.task == "diff" and self.result is None:
            self.result_note = f"comparing values… {message.fraction:.0%}"
            self._show_summary()

    def on_diff_computed(self, message: DiffComputed) -> None:
        apply_result(self.pairs, message.result)
        self.result = message.result
        self.result_note = ""
        self._show_values(message.result)
        self._refresh_rows()

    def _show_values(self, result: DiffResult) -> None:
        from ckinspect.report.diff_report import value_rows

        rows = value_rows(result.to_json())
        table = self.query_one("#values", VirtualTable)
        table.set_rows([Row(path, (path, va, vb), (natural_key(path), va, vb)) for path, va, vb in rows])
        table.styles.height = min(len(rows), 5) + 1 + 1  # header, rows, the border above
        table.display = bool(rows)

    def on_resize(self) -> None:
        self._fit_right()

    def _fit_right(self) -> bool:
        """With one name column, the right table is as wide as its columns and the left takes the rest.
        True when the columns changed and the rows were drawn again."""
        right = self.query_one("#right", VirtualTable)
        if not self.one_name:
            right.styles.width = "1fr"
            return False
        wide = self.size.width >= WIDE_ENOUGH_FOR_DTYPES
        columns = [c for c in ONE_NAME_RIGHT if wide or c.key not in ONLY_WHEN_WIDE]
        right.styles.width = right_width = table_width(columns)
        left = self.query_one("#left", VirtualTable)
        beside = self._beside_names(wide, self.size.width - right_width)
        before = [c.key for c in (*left.columns, *right.columns)]
        if [c.key for c in (left.columns[0], *beside, *columns)] != before:
            right.columns = columns
            left.columns = [left.columns[0], *beside]
            self._refresh_rows()
            return True
        return False

    def _beside_names(self, wide: bool, left_width: int) -> list[Column]:
        """A's columns beside the names: dropped in LEFT_DROP_ORDER until the longest name fits whole (B's
        dtype and shape are on the right, and the status says when they differ: names come first)."""
        beside = [c for c in ONE_NAME_LEFT[1:] if wide or c.key != "dtype"]
        for key in LEFT_DROP_ORDER:
            if self._names_fit(left_width, beside):
                break
            beside = [c for c in beside if c.key != key]
        return beside

    def _names_fit(self, left_width: int, beside: list[Column]) -> bool:
        """Whether the longest name fits whole in a left table this wide, beside these columns."""
        longest = max((len(p.name) for p in self.pairs), default=0)
        return longest <= left_width - table_width(beside) - 1

    def _refresh_rows(self) -> None:
        left, right = self.query_one("#left", VirtualTable), self.query_one("#right", VirtualTable)
        left_rows, right_rows = rows_for(
            self.pairs, [c.key for c in left.columns], [c.key for c in right.columns], self.one_name
        )
        keep = left.current_row.key if left.current_row else None
        left.set_rows(left_rows)
        right.set_rows(right_rows)
        self._apply_filter()
        if keep:
            left.move_to_key(keep)
        self._show_summary()

    def _apply_filter(self) -> None:
        matches = name_matcher(self.query_one("#diff-filter", Input).value)
        differing = {p.name for p in self.pairs if p.differs}
        only = self.differences_only

        def keep(row: Row) -> bool:
            return (not only or row.key in differing) and matches(row.key)

        left = self.query_one("#left", VirtualTable)
        values_differ = self.query_one("#values", VirtualTable).row_count
        if only and not differing and not self.query_one("#diff-filter", Input).value:
            left.empty_text = "no tensor differs; the values below do" if values_differ else "no differences"
        else:
            left.empty_text = "no tensor matches"
        for table in (left, self.query_one("#right", VirtualTable)):
            table.set_filter(keep)

    def _show_summary(self) -> None:
        counts: dict[str, int] = {}
        for p in self.pairs:
            counts[p.status] = counts.get(p.status, 0) + 1
        text = Text(f"A {self._side_summary(self.a)}  B {self._side_summary(self.b)}  ")
        for status in SUMMARY_ORDER:
            if counts.get(status):
                text.append(f"{status} {counts[status]:,}", style=STATUS_COLOURS.get(status) or "")
                text.append("  ")
        if self.result is not None:
            self._verdict(text, self.result)
        elif self.result_note:
            text.append(self.result_note, style="italic")
        if self.differences_only:
            text.append("  (differences only)", style="italic")
        self.query_one("#summary", Static).update(themed(text))

    @staticmethod
    def _side_summary(ckpt: Checkpoint | None) -> str:
        return f"{len(ckpt.tensors) if ckpt else 0:,} tensors ({human_bytes(ckpt.file_bytes) if ckpt else '?'})"

    def _verdict(self, text: Text, result: DiffResult) -> None:
        """The values that differ beside the tensors, then IDENTICAL, DIFFERENT or SAME STRUCTURE (--quick)."""
        if values := len(self.query_one("#values", VirtualTable).rows):
            text.append(f"values {values:,}", style=STATUS_COLOURS["changed"])
            text.append("  ")
        same_structure = result.verdict == SAME_STRUCTURE
        verdict = "SAME STRUCTURE, values not compared (--quick)" if same_structure else None
        text.append(
            verdict or ("IDENTICAL" if result.identical else "DIFFERENT"),
            style="bold " + SEVERITY_COLOURS["ok" if result.identical or same_structure else "error"],
        )
        if result.match != "names matched exactly":
            text.append(f"  ({result.match})", style="italic")

    # ------------------------------------------------------------ the two tables move together: the right
    # pane follows the left (VirtualTable.follow), so one scroll position and one cursor exist

    @on(VirtualTable.SortRequested)
    def _sort_requested(self, event: VirtualTable.SortRequested) -> None:
        if event.table.id in ("left", "right"):
            self.sort_pairs("a" if event.table.id == "left" else "b", event.column)

    def sort_pairs(self, side: str, column: str, reverse: bool | None = None) -> None:
        """Sort both panes on one key of the shared pairs (clicking the same header again reverses)."""
        if reverse is None:
            same = self.sort is not None and self.sort[:2] == (side, column)
            reverse = (not self.sort[2]) if same and self.sort else column in DESCENDING_FIRST
        self.sort = (side, column, reverse)
        clicked = "left" if side == "a" else "right"

        def key(index: int) -> Any:
            return pair_sort_key(self.pairs[index], side, column)

        for table in (self.query_one("#left", VirtualTable), self.query_one("#right", VirtualTable)):
            table.sort_with(sort_mark(table, column, table.id == clicked), reverse, key)

    # ------------------------------------------------------------ actions

    @on(Input.Changed, "#diff-filter")
    def _filter_changed(self) -> None:
        self._apply_filter()

    @on(Input.Submitted, "#diff-filter")
    def _filter_submitted(self) -> None:
        self.query_one("#left", VirtualTable).focus()

    def action_focus_filter(self) -> None:
        self.query_one("#diff-filter", Input).focus()

    def action_toggle_differences(self) -> None:
        self.differences_only = not self.differences_only
        self._apply_filter()
        self._show_summary()

    def action_next_difference(self) -> None:
        left = self.query_one("#left", VirtualTable)
        differing = {p.name for p in self.pairs if p.differs}
        keys = left.visible_keys()
        for position in range(left.cursor + 1, len(keys)):
            if keys[position] in differing:
                left.cursor = position
                return
        self.notify("no further difference", timeout=1.5)

    def action_copy_name(self) -> None:
        row = self.query_one("#left", VirtualTable).current_row
        if row is not None:
            self.app.copy_to_clipboard(row.key)
            self.notify(f"copied {row.key}", timeout=2)

    def action_sort_delta(self) -> None:
        self.sort_pairs("b", "delta")

    @on(VirtualTable.RowSelected, "#left, #right")
    def _row_selected(self) -> None:
        self.action_detail()

    def action_detail(self) -> None:
        from ckinspect.tui.screens.diff_detail import DiffDetailScreen

        row = self.query_one("#left", VirtualTable).current_row
        pair = next((p for p in self.pairs if row is not None and p.name == row.key), None)
        if pair is None or self.a is None or self.b is None:
            return
        change = next((c for c in self.result.changed if c.name == pair.name), None) if self.result else None
        self.app.push_screen(DiffDetailScreen(self.a, self.b, pair, change))

    def action_back(self) -> None:
        box = self.query_one("#diff-filter", Input)
        if box.value:
            box.value = ""
        elif len(self.app.screen_stack) > 1:
            self.app.pop_screen()
