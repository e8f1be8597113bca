"""The tensor listing: name, group, dtype, shape, elements, size, % of file; sortable on every column."""

from __future__ import annotations

from ckinspect.model import Checkpoint
from ckinspect.tui.core import human_bytes, shape_text
from ckinspect.tui.widgets.palette import GROUP_COLOURS
from ckinspect.tui.widgets.virtual_table import Column, Row, VirtualTable

COLUMNS = (
    Column("name", "name", None, min_width=28),
    Column("group", "group", 9, optional=True),
    Column("dtype", "dtype", 8),
    Column("shape", "shape", 12),
    Column("elements", "elements", 11, justify="right", optional=True),
    Column("size", "size", 9, justify="right"),
    Column("share", "% file", 6, justify="right", optional=True),
)


def tensor_rows(ckpt: Checkpoint) -> list[Row]:
    """One row per tensor; plain Python so it can be built in the loading thread."""
    file_bytes = max(1, ckpt.file_bytes)
    rows = []
    for t in ckpt.tensors:
        nbytes, numel = t.nbytes, t.numel
        share = nbytes / file_bytes
        rows.append(
            Row(
                key=t.name,
                cells=(t.name, t.group, t.dtype, shape_text(t.shape), f"{numel:,}", human_bytes(nbytes), f"{share:.1%}"),
                sort_keys=(t.name, t.group, t.dtype, t.shape, numel, nbytes, share),
                styles=(None, GROUP_COLOURS.get(t.group)),
            )
        )
    return rows


class TensorTable(VirtualTable):
    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(COLUMNS, empty_text="no tensor matches", id=id, classes=classes)
