"""A table that draws only the rows on screen, so 50,000 tensors open and sort at once.

Textual's DataTable measures every cell as rows are added (about 15 s for 50,000 rows
here); this one keeps plain rows in a list, a view (filtered, sorted indices into it) and
renders lines on demand with the Line API, as toolong does for big logs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any, ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ckinspect.fmt import terminal_safe
from ckinspect.record import Record
from ckinspect.tui.widgets.palette import resolve


class Column(Record):
    key: str
    label: str
    width: int | None = None  # None: takes the width the fixed columns leave (at least min_width)
    justify: str = "left"
    min_width: int = 12
    keep_end: bool = False  # truncate at the start ("…attn.wq.weight"): the end of a dotted name says most
    optional: int = 0  # > 0: may be dropped when the flexible column would get narrower than min_width, highest first


class Row:
    """One line of a table. Subclasses may compute `cells` and `sort_key` lazily (50,000 rows)."""

    __slots__ = ("key", "cells", "sort_keys", "styles")

    def __init__(
        self,
        key: str,  # what a row stands for (a tensor name); unique within a table
        cells: tuple[str, ...],
        sort_keys: tuple[Any, ...],
        styles: tuple[str | None, ...] = (),  # optional rich style per cell
    ) -> None:
        self.key, self.cells, self.sort_keys, self.styles = key, cells, sort_keys, styles

    def sort_key(self, position: int) -> Any:
        return self.sort_keys[position]


_THEME_COLOURS: dict[str, tuple[tuple[str, str], ...]] = {}


@lru_cache(maxsize=256)
def _parse(style: str) -> Style:
    return Style.parse(style)


def _fit(text: str, width: int, justify: str, keep_end: bool = False) -> str:
    if width <= 0:
        return ""
    length = cell_len(text)
    if length > width:
        if width < 2:
            return text[:width]
        return "…" + text[-(width - 1) :] if keep_end else text[: width - 1] + "…"
    pad = " " * (width - length)
    return pad + text if justify == "right" else text + pad


def _width(column: Column, share: int) -> int:
    """A column's width: its own, or (flexible) its share of the room left, never below its minimum."""
    return column.width if column.width is not None else max(column.min_width, share)


def _share(shown: list[Column], flexible: list[Column], width: int) -> int:
    """The width each flexible column gets beside the fixed ones shown (one space before each column)."""
    fixed = sum(c.width or 0 for c in shown) + len(shown)
    return (width - fixed) // len(flexible) if flexible else 0


class VirtualTable(ScrollView, can_focus=True):
    """Rows of strings, a cursor, click-a-header to sort; only visible lines are rendered."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "cursor_up", "Up", show=False),
        Binding("down,j", "cursor_down", "Down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home", "first", "First", show=False),
        Binding("end", "last", "Last", show=False),
        Binding("enter", "select", "Select", show=False),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "virtual-table--header",
        "virtual-table--header-sorted",
        "virtual-table--cursor",
        "virtual-table--even-row",
        "virtual-table--empty",
    }

    DEFAULT_CSS = """
    VirtualTable {
        background: $surface;
        color: $foreground;
        height: 1fr;
        overflow-x: hidden;
        & > .virtual-table--header { text-style: bold; background: $panel; color: $foreground; }
        & > .virtual-table--header-sorted { text-style: bold underline; background: $panel; color: $ck-info; }
        & > .virtual-table--even-row { background: $surface-lighten-1 50%; }
        & > .virtual-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
        }
        & > .virtual-table--empty { color: $text-muted; text-style: italic; }
        &:focus > .virtual-table--cursor {
            background: $block-cursor-background;
            color: $block-cursor-foreground;
            text-style: $block-cursor-text-style;
        }
    }
    """

    cursor = reactive(0, always_update=True, init=False)

    class RowHighlighted(Message):
        def __init__(self, table: VirtualTable, row: Row | None, index: int) -> None:
            super().__init__()
            self.table, self.row, self.index = table, row, index

        @property
        def control(self) -> VirtualTable:
            return self.table

    class RowSelected(Message):
        def __init__(self, table: VirtualTable, row: Row) -> None:
            super().__init__()
            self.table, self.row = table, row

        @property
        def control(self) -> VirtualTable:
            return self.table

    class SortRequested(Message):
        """A header was clicked; a table that does not sort itself leaves the order to its screen."""

        def __init__(self, table: VirtualTable, column: str) -> None:
            super().__init__()
            self.table, self.column = table, column

        @property
        def control(self) -> VirtualTable:
            return self.table

    def __init__(
        self,
        columns: Sequence[Column],
        *,
        empty_text: str = "nothing to show",
        sorts_itself: bool = True,  # False: a header click only posts SortRequested (the diff sorts both panes)
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.columns: list[Column] = list(columns)
        self._widths_cache: tuple[int, tuple[Column, ...], list[int]] | None = None
        self.rows: list[Row] = []
        self.view: list[int] = []  # indices into rows, in display order
        self.sort_column: str | None = None
        self.sort_reverse = False
        self.empty_text = empty_text
        self.sorts_itself = sorts_itself
        self._filter: Callable[[Row], bool] | None = None
        self._sort_fn: Callable[[int], Any] | None = None  # row index -> sort key, set by sort_with
        self._index_of: dict[str, int] = {}
        self.leader: VirtualTable | None = None  # set by follow(): the table whose scroll and cursor this one draws
        self._followers: list[VirtualTable] = []

    def follow(self, leader: VirtualTable) -> None:
        """Draw at `leader`'s scroll position and cursor, which it alone owns (the diff's right pane follows
        the left): the two cannot disagree, and nothing passes positions back and forth. Both tables must
        hold the same rows in the same order (sort_with on a shared key, the same filter)."""
        self.leader = leader
        leader._followers.append(self)
        self.can_focus = False
        self.styles.scrollbar_size_vertical = 0  # its own scroll position is never drawn

    def top_row(self) -> int:
        """The first row drawn: the leader's scroll position for a follower."""
        return int((self.leader or self).scroll_y)

    def _cursor_shown(self) -> int:
        return (self.leader or self).cursor

    # ------------------------------------------------------------ data

    def set_rows(self, rows: list[Row]) -> None:
        self.rows = rows
        self._index_of = {row.key: i for i, row in enumerate(rows)}
        self._rebuild_view(keep=None)

    def set_filter(self, predicate: Callable[[Row], bool] | None) -> None:
        keep = self.current_row.key if self.current_row else None
        self._filter = predicate
        self._rebuild_view(keep)

    def sort_by(self, column: str, reverse: bool | None = None) -> None:
        """Sort on a column; sorting again on the same column flips the order."""
        if reverse is None:
            reverse = (not self.sort_reverse) if column == self.sort_column else False
        self.sort_column, self.sort_reverse = column, reverse
        self._sort_fn = None
        keep = self.current_row.key if self.current_row else None
        self._apply_sort()
        self._restore(keep)

    def sort_with(self, column: str | None, reverse: bool, key: Callable[[int], Any]) -> None:
        """Sort on a key of each row's index (tables built from one row model sort alike); `column` is
        the header marked as sorted (None when this table has no such column)."""
        self.sort_column, self.sort_reverse, self._sort_fn = column, reverse, key
        keep = self.current_row.key if self.current_row else None
        self._apply_sort()
        self._restore(keep)

    def column_index(self, key: str) -> int:
        return next(i for i, c in enumerate(self.columns) if c.key == key)

    def _apply_sort(self) -> None:
        if self._sort_fn is not None:
            self.view.sort(key=self._sort_fn, reverse=self.sort_reverse)
            return
        if self.sort_column is None:
            return
        position = self.column_index(self.sort_column)
        rows = self.rows
        self.view.sort(key=lambda i: rows[i].sort_key(position), reverse=self.sort_reverse)

    def _rebuild_view(self, keep: str | None) -> None:
        predicate = self._filter
        rows = self.rows
        self.view = list(range(len(rows))) if predicate is None else [i for i, r in enumerate(rows) if predicate(r)]
        self._apply_sort()
        self._restore(keep)

    def _restore(self, keep: str | None) -> None:
        self.virtual_size = Size(self.size.width, len(self.view) + 1)
        position = 0
        if keep is not None and keep in self._index_of:
            wanted = self._index_of[keep]
            try:
                position = self.view.index(wanted)
            except ValueError:
                position = 0
        self.cursor = min(position, max(0, len(self.view) - 1))
        self.refresh()

    @property
    def row_count(self) -> int:
        return len(self.view)

    @property
    def current_row(self) -> Row | None:
        if 0 <= self.cursor < len(self.view):
            return self.rows[self.view[self.cursor]]
        return None

    def replace_row(self, row: Row) -> bool:
        """Swap in a new version of the row with the same key (a folder entry read later)."""
        index = self._index_of.get(row.key)
        if index is None:
            return False
        self.rows[index] = row
        self.refresh()
        return True

    def row_for(self, key: str) -> Row | None:
        """The row with this key, shown or filtered out (None when there is none)."""
        index = self._index_of.get(key)
        return None if index is None else self.rows[index]

    def visible_keys(self) -> list[str]:
        return [self.rows[i].key for i in self.view]

    def move_to_key(self, key: str) -> bool:
        """Put the cursor on the row with this key (False when it is filtered out or absent)."""
        index = self._index_of.get(key)
        if index is None:
            return False
        try:
            self.cursor = self.view.index(index)
        except ValueError:
            return False
        return True

    # ------------------------------------------------------------ cursor and scrolling

    def watch_cursor(self, old: int, new: int) -> None:
        if self.view and not 0 <= new < len(self.view):
            self.cursor = max(0, min(new, len(self.view) - 1))
            return
        self._scroll_cursor_into_view()
        self.refresh()
        for follower in self._followers:
            follower.set_reactive(VirtualTable.cursor, new)  # the same value, without its watcher
            follower.refresh()
        self.post_message(self.RowHighlighted(self, self.current_row, new))

    def _page(self) -> int:
        return max(1, self.scrollable_content_region.height - 1)

    def _scroll_cursor_into_view(self) -> None:
        top = int(self.scroll_y)
        height = self._page()
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False, force=True)
        elif self.cursor >= top + height:
            self.scroll_to(y=self.cursor - height + 1, animate=False, force=True)

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if int(old) != int(new):
            for follower in self._followers:
                follower.refresh()

    def _on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        if self.leader is not None:  # the wheel over a follower scrolls the one position, its leader's
            self.leader._on_mouse_scroll_down(event)
            return
        super()._on_mouse_scroll_down(event)

    def _on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        if self.leader is not None:
            self.leader._on_mouse_scroll_up(event)
            return
        super()._on_mouse_scroll_up(event)

    def action_cursor_up(self) -> None:
        if self.cursor > 0:
            self.cursor -= 1

    def action_cursor_down(self) -> None:
        if self.cursor < len(self.view) - 1:
            self.cursor += 1

    def action_page_up(self) -> None:
        self.cursor = max(0, self.cursor - self._page())

    def action_page_down(self) -> None:
        self.cursor = min(max(0, len(self.view) - 1), self.cursor + self._page())

    def action_first(self) -> None:
        self.cursor = 0

    def action_last(self) -> None:
        self.cursor = max(0, len(self.view) - 1)

    def action_select(self) -> None:
        row = self.current_row
        if row is not None:
            self.post_message(self.RowSelected(self, row))

    def _column_at(self, x: int) -> str | None:
        position = 0
        for column, width in zip(self.columns, self._widths(), strict=True):
            if width == 0:
                continue
            if position <= x < position + width + 1:
                return column.key
            position += width + 1
        return None

    async def _on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        if offset.y == 0:
            column = self._column_at(offset.x)
            if column is not None:
                if self.sorts_itself:
                    self.sort_by(column)
                self.post_message(self.SortRequested(self, column))
            return
        owner = self.leader or self  # a click on a follower moves the one cursor, its leader's
        position = self.top_row() + offset.y - 1
        if 0 <= position < len(owner.view):
            was = owner.cursor
            owner.cursor = position
            owner.focus()
            if was == position or event.chain > 1:
                owner.action_select()

    def _on_resize(self, event: events.Resize) -> None:
        self.virtual_size = Size(self.scrollable_content_region.width, len(self.view) + 1)

    # ------------------------------------------------------------ rendering

    def _widths(self) -> list[int]:
        """Width per column; 0 for optional columns dropped to leave the flexible ones room.

        Asked for by every line drawn: computed once per table width and set of columns (the columns
        compared by identity, since a screen may replace one in place)."""
        width = max(1, self.scrollable_content_region.width)
        columns = tuple(self.columns)
        cached = self._widths_cache
        if (
            cached is not None
            and cached[0] == width
            and len(cached[1]) == len(columns)
            and all(a is b for a, b in zip(cached[1], columns, strict=True))
        ):
            return cached[2]
        widths = self._fit_columns(width)
        self._widths_cache = (width, columns, widths)
        return widths

    def _fit_columns(self, width: int) -> list[int]:
        shown = list(self.columns)
        flexible = [c for c in self.columns if c.width is None]
        optional = self._drop_order()
        share = _share(shown, flexible, width)
        while flexible and optional and share < min(c.min_width for c in flexible):
            shown.remove(optional.pop(0))
            share = _share(shown, flexible, width)
        kept = {id(c) for c in shown}
        return [_width(c, share) if id(c) in kept else 0 for c in self.columns]

    def _drop_order(self) -> list[Column]:
        """The optional columns in the order they give way: highest `optional` first; among equals, the
        rightmost first."""
        ranked = sorted(
            (i for i, c in enumerate(self.columns) if c.optional), key=lambda i: (-self.columns[i].optional, -i)
        )
        return [self.columns[i] for i in ranked]

    def _line(self, cells: Sequence[str], widths: list[int], base: Style, styles: Sequence[str | None] = ()) -> Strip:
        segments: list[Segment] = []
        for position, (column, width) in enumerate(zip(self.columns, widths, strict=True)):
            if width == 0:
                continue
            raw = cells[position] if position < len(cells) else ""
            text = _fit(terminal_safe(raw), width, column.justify, column.keep_end)
            style = base
            extra = styles[position] if position < len(styles) else None
            if extra:
                style = base + (resolve(extra, self._theme_colours()) if "$" in extra else _parse(extra))
            segments.append(Segment(" ", base))
            segments.append(Segment(text, style))
        return Strip(segments)

    def _theme_colours(self) -> tuple[tuple[str, str], ...]:
        """The theme's ck-* colours (cells name them as `$ck-warning`), looked up once per theme."""
        theme = self.app.theme
        if theme not in _THEME_COLOURS:
            variables = self.app.theme_variables
            _THEME_COLOURS[theme] = tuple(sorted((k, v) for k, v in variables.items() if k.startswith("ck-")))
        return _THEME_COLOURS[theme]

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        widths = self._widths()
        if y == 0:
            header = self.get_component_rich_style("virtual-table--header")
            sorted_style = self.get_component_rich_style("virtual-table--header-sorted")
            labels: list[str] = []
            label_styles: list[str | None] = []
            for column in self.columns:
                label = column.label
                if column.key == self.sort_column:
                    label += " ▼" if self.sort_reverse else " ▲"
                    label_styles.append(str(sorted_style))
                else:
                    label_styles.append(None)
                labels.append(label)
            return self._line(labels, widths, header, label_styles).adjust_cell_length(width, header).crop(0, width)
        position = self.top_row() + y - 1
        if not self.view:
            if y == 1:
                muted = self.get_component_rich_style("virtual-table--empty")
                return Strip([Segment(" " + self.empty_text, muted)]).adjust_cell_length(width).crop(0, width)
            return Strip.blank(width, self.rich_style)
        if position >= len(self.view):
            return Strip.blank(width, self.rich_style)
        row = self.rows[self.view[position]]
        if position == self._cursor_shown():
            base = self.get_component_rich_style("virtual-table--cursor")
            styles: Sequence[str | None] = ()
        else:
            base = self.rich_style
            if position % 2:
                base = base + self.get_component_rich_style("virtual-table--even-row")
            styles = row.styles
        return self._line(row.cells, widths, base, styles).adjust_cell_length(width, base).crop(0, width)
