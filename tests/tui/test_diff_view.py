"""The diff screen a user can trust: both panes always show the same rows in the same order."""

from __future__ import annotations

from textual.widgets import Static

from ckinspect.tui.screens.diff import DiffScreen
from ckinspect.tui.widgets.virtual_table import VirtualTable
from tests.tui.apps import make_app
from tests.tui.fixtures import DEMO_B_PATH, DEMO_PATH

SIZE = (100, 30)


async def settle(pilot) -> None:
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def panes(screen: DiffScreen) -> tuple[VirtualTable, VirtualTable]:
    return screen.query_one("#left", VirtualTable), screen.query_one("#right", VirtualTable)


async def test_clicking_a_header_sorts_both_panes_alike(tmp_path):
    app = make_app("diff", [DEMO_PATH, DEMO_B_PATH], tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        left, right = panes(screen)
        # the left pane's header: the name column starts at x=1 (one space before each column)
        await pilot.click("#left", offset=(2, 0))
        await pilot.click("#left", offset=(2, 0))
        await pilot.pause()
        assert left.sort_column == "name" and left.sort_reverse
        assert left.visible_keys() == right.visible_keys()
        assert left.visible_keys()[0] == "rng.torch"  # reversed natural order of names
        # the right pane's first header is the status: sorting there orders the left pane too
        await pilot.click("#right", offset=(2, 0))
        await pilot.pause()
        assert right.sort_column == "status"
        assert left.visible_keys() == right.visible_keys()
        status = {row.key: row.cells[0] for row in right.rows}
        assert status[right.visible_keys()[0]] == "only in A"
        # each name stands next to its own numbers, row by row
        for index in range(left.row_count):
            lrow, rrow = left.rows[left.view[index]], right.rows[right.view[index]]
            assert lrow.key == rrow.key
        assert "DIFFERENT" in str(screen.query_one("#summary", Static).render())
