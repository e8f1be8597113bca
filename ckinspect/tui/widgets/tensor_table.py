"""The tensor listing: name, group, dtype, shape, elements, size, % of file; sortable on every column."""

from __future__ import annotations

import math
from typing import Any

from textual import events

from ckinspect.fmt import human_bytes, shape_text
from ckinspect.model import RAGGED, Checkpoint, CompositeTensor, TensorInfo
from ckinspect.tui.core import natural_key
from ckinspect.tui.widgets.palette import GROUP_COLOURS, SEVERITY_COLOURS
from ckinspect.tui.widgets.virtual_table import Column, Row, VirtualTable

FLAG_SIGNS = {"error": " ✗", "warning": " !", "info": " i"}  # as the text report marks findings
# the first sort on a number puts the largest on top
DESCENDING_FIRST = ("shape", "elements", "size", "share")

COLUMNS = (
    Column("name", "name", None, min_width=32, keep_end=True),  # at 80 columns the group gives way first
    Column("group", "group", 9, optional=2),
    Column("dtype", "dtype", 8),
    Column("shape", "shape", 12),
    Column("elements", "elements", 11, justify="right", optional=3),
    Column("size", "size", 9, justify="right"),
    Column("share", "% file", 6, justify="right", optional=1),
)


class TensorRow(Row):
    """Cells are formatted when first drawn and sort keys computed when sorted on: opening
    50,000 tensors must not format 350,000 strings nobody looks at."""

    __slots__ = ("tensor", "file_bytes", "missing", "flag", "_cells", "_name_key")

    def __init__(self, tensor: TensorInfo, file_bytes: int, missing: bool = False) -> None:
        self.key = tensor.name
        self.tensor = tensor
        self.file_bytes = file_bytes
        self.missing = missing  # its bytes are not in the file (a save cut short): never a normal row
        self.styles = (
            (SEVERITY_COLOURS["error"],) * len(COLUMNS) if missing else (None, GROUP_COLOURS.get(tensor.group))
        )
        self._cells: tuple[str, ...] | None = None
        self._name_key: tuple[Any, ...] | None = None
        self.flag: str | None = None  # the worst severity of the findings about this tensor

    def mark(self, severity: str | None) -> None:
        """Mark the row of a tensor a finding names: its name ends in the report's sign, in the severity's colour."""
        self.flag = severity
        self._cells = None
        if not self.missing:
            colour = SEVERITY_COLOURS.get(severity or "")
            self.styles = (f"bold {colour}" if colour else None, GROUP_COLOURS.get(self.tensor.group))

    @property
    def cells(self) -> tuple[str, ...]:  # type: ignore[override]
        if self._cells is None:
            t = self.tensor
            nbytes = t.nbytes
            self._cells = (
                t.name + FLAG_SIGNS.get(self.flag or "", ""),
                t.group,
                t.dtype,
                shape_text(t.shape),
                f"{t.numel:,}",
                "missing" if self.missing else human_bytes(nbytes),
                "—" if self.missing else f"{nbytes / self.file_bytes:.1%}",
            )
        return self._cells

    def sort_key(self, position: int) -> Any:
        t = self.tensor
        if position == 0:  # natural order: state.2 before state.10
            if self._name_key is None:
                self._name_key = natural_key(t.name)
            return self._name_key
        if position == 1:
            return t.group
        if position == 2:
            return t.dtype
        if position == 3:
            return t.shape
        if position == 4:
            return t.numel
        return t.nbytes  # size and % of file order the same way


class CompositeRow(Row):
    """A sparse, nested, jagged, quantized, meta or wrapper-subclass tensor: one row for the whole (its
    parts are in the details pane): its kind after the name, its logical shape (ragged dimensions as j),
    its parts' bytes. Cells as the text report writes them (report.common.composite_rows)."""

    __slots__ = ("composite", "file_bytes", "missing", "flag", "numel", "kind", "shape", "_base")

    def __init__(self, composite: CompositeTensor, file_bytes: int) -> None:
        from ckinspect.report.common import composite_rows
        from ckinspect.report.json_report import composite_entries

        self.key = composite.name
        self.composite = composite
        self.file_bytes = file_bytes
        self.missing = False
        self.flag: str | None = None
        first = next(iter(composite.parts.values()), None)
        group = first.group if first is not None else "model"
        ragged = any(n == RAGGED for n in composite.shape)
        self.numel = None if ragged else math.prod(composite.shape)
        entry = {"composite_tensors": composite_entries([composite])}
        name, kind, dtype, shape, size, _parts = composite_rows(entry)[0]
        self.kind, self.shape = kind, shape  # "sparse_coo", "DTensor (wrapper_subclass)"; "4×j×3"
        elements = "ragged" if self.numel is None else f"{self.numel:,}"
        share = f"{composite.nbytes / file_bytes:.1%}" if composite.parts else "—"
        self._base = (name, f" ({kind})", group, dtype, shape, elements, size if composite.parts else "no data", share)
        self.styles = (None, GROUP_COLOURS.get(group))

    def mark(self, severity: str | None) -> None:
        """As TensorRow.mark: the worst finding about the whole or one of its parts."""
        self.flag = severity
        colour = SEVERITY_COLOURS.get(severity or "")
        self.styles = (f"bold {colour}" if colour else None, self.styles[1])

    @property
    def cells(self) -> tuple[str, ...]:  # type: ignore[override]
        name, kind, *rest = self._base
        return (name + kind + FLAG_SIGNS.get(self.flag or "", ""), *rest)

    def sort_key(self, position: int) -> Any:
        c = self.composite
        keys = (natural_key(c.name), self._base[2], c.dtype, c.shape, self.numel or 0, c.nbytes, c.nbytes)
        return keys[position]


def tensor_rows(ckpt: Checkpoint) -> list[Row]:
    """One row per tensor, and one per composite tensor in place of its parts; cheap enough to build in
    the loading thread for any count."""
    from ckinspect.analysis.anatomy import missing_tensors

    file_bytes = max(1, ckpt.file_bytes)
    missing = {t.name for t in missing_tensors(ckpt)}
    parts = owners(ckpt)
    rows: list[Row] = [TensorRow(t, file_bytes, t.name in missing) for t in ckpt.tensors if t.name not in parts]
    rows.extend(CompositeRow(c, file_bytes) for c in ckpt.composites)
    return rows


def owners(ckpt: Checkpoint) -> dict[str, str]:
    """Each composite part's name -> the composite's (the row that stands for it)."""
    return {t.name: c.name for c in ckpt.composites for t in c.parts.values()}


SHAPE_WIDTH = 12  # at 80 columns; wider terminals give the shape column room for its longest shape
SHAPE_WIDTH_MAX = 32


class TensorTable(VirtualTable):
    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(COLUMNS, empty_text="no tensor matches", id=id, classes=classes)
        self.longest_shape = SHAPE_WIDTH

    def set_rows(self, rows: list[Row]) -> None:
        shapes = {r.tensor.shape for r in rows if isinstance(r, TensorRow)}  # few distinct shapes, even in 50,000
        self.longest_shape = max((len(shape_text(s)) for s in shapes), default=SHAPE_WIDTH)
        super().set_rows(rows)
        self.fit_shape_column()

    def fit_shape_column(self) -> None:
        """Half of every column beyond 80 goes to the shape, up to its longest (a shape is not cut when it fits)."""
        room = SHAPE_WIDTH + max(0, self.size.width - 80) // 2
        width = max(SHAPE_WIDTH, min(self.longest_shape, room, SHAPE_WIDTH_MAX))
        index = self.column_index("shape")
        if self.columns[index].width != width:
            self.columns[index] = self.columns[index].replace(width=width)
            self.refresh()

    def _on_resize(self, event: events.Resize) -> None:
        super()._on_resize(event)
        self.fit_shape_column()
