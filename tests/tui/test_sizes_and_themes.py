"""Issue 30 at the three sizes it was tried at (80x24, 120x35, 200x50) in both themes, on the inspect, diff
and folder screens: every table takes the width it has (point 6), no cell but a name is cut mid-value at
120 and 200 columns and none but a name or a shape at 80 (columns give way first), the footer is whole
with Quit and Help on it (point 8), and each screen's panes are on screen (point 2's lesson: nothing
pushed off at 80x24). The contrast of every text colour is measured in test_theme.py."""

from __future__ import annotations

import pytest

from ckinspect.tui.app import THEMES, create_app
from ckinspect.tui.widgets.virtual_table import VirtualTable
from tests.tui.apps import demo_backend, make_app, settle
from tests.tui.fixtures import DEMO_B_PATH, DEMO_PATH
from tests.tui.test_help import assert_footer_fits

SIZES = [(80, 24), (120, 35), (200, 50)]
MAY_ELIDE = {80: ("name", "shape"), 120: ("name",), 200: ("name",)}  # README: at 80 a shape may end in …


def assert_table_uses_its_width(table: VirtualTable, width: int) -> None:
    widths = table._widths()
    shown = [(c, w) for c, w in zip(table.columns, widths, strict=True) if w]
    used = sum(w + 1 for _, w in shown)  # one space before each column
    flexible = sum(1 for c, _ in shown if c.width is None)
    room = table.scrollable_content_region.width
    # a flexible column takes what the fixed ones leave (less a remainder per flexible column); a pane of
    # fixed columns only (the diff's right pane beside one name column) is as wide as they are, its edge aside
    slack = flexible if flexible else 3
    assert room - slack < used <= room, (table.id, used, room, [(c.key, w) for c, w in shown])
    for position in table.view[: table.size.height]:
        row = table.rows[position]
        for column, cell_width in shown:
            cell = row.cells[table.columns.index(column)]
            if column.key not in MAY_ELIDE[width]:
                assert len(cell) <= cell_width, (table.id, column.key, cell, cell_width)


def screen_apps(tmp_path, theme):
    yield "inspect", make_app("main", [DEMO_PATH], tmp_path, theme=theme)
    yield "diff", make_app("diff", [DEMO_PATH, DEMO_B_PATH], tmp_path, theme=theme)
    backend = demo_backend(tmp_path)
    yield "folder", create_app("main", [DEMO_PATH, DEMO_B_PATH], backend=backend, theme=theme, cursor_blink=False)


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
async def test_every_screen_uses_the_width_and_keeps_its_values_whole(tmp_path, size, theme):
    for name, app in screen_apps(tmp_path, theme):
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            assert app.theme == theme
            assert_footer_fits(app)
            tables = [t for t in app.screen.query(VirtualTable) if t.display and t.rows]
            assert tables, name
            for table in tables:
                assert table.region.right <= size[0] and table.region.bottom <= size[1], (name, table.id)
                assert table.size.height >= min(3, len(table.rows) + 1), (
                    name,
                    table.id,
                )  # header and rows, even at 80x24
                assert_table_uses_its_width(table, size[0])
