"""50,000 tensors: the table must appear and sort without drawing every row (bench/tui_50k.py has the
timing against Textual's DataTable; here a count of the rows drawn catches a regression to eager filling,
without a timing assert that a busy machine could fail)."""

from __future__ import annotations

import time

from ckinspect.tui.app import create_app
from ckinspect.tui.widgets.tensor_table import TensorTable
from ckinspect.tui.widgets.tensor_tree import TensorTree
from ckinspect.tui.widgets.virtual_table import VirtualTable
from tests.tui.apps import FixtureBackend
from tests.tui.fixtures import big_checkpoint

COUNT = 50_000


async def test_fifty_thousand_tensors_appear_and_sort_drawing_only_what_is_on_screen(monkeypatch):
    drawn: set[int] = set()
    render_line = VirtualTable.render_line

    def counting_render_line(self: VirtualTable, y: int):  # type: ignore[no-untyped-def]
        if isinstance(self, TensorTable) and y > 0:
            drawn.add(int(self.scroll_y) + y - 1)
        return render_line(self, y)

    monkeypatch.setattr(VirtualTable, "render_line", counting_render_line)
    big = big_checkpoint(COUNT)
    app = create_app("main", [big.path], backend=FixtureBackend({big.path: big}), cursor_blink=False)
    start = time.perf_counter()
    async with app.run_test(size=(120, 40)) as pilot:
        while not (app.screen.query(TensorTable) and app.screen.query_one(TensorTable).row_count == COUNT):
            await pilot.pause(0.005)
        await pilot.pause()
        appear = time.perf_counter() - start
        table = app.screen.query_one(TensorTable)
        t0 = time.perf_counter()
        table.sort_by("size", reverse=True)
        await pilot.pause()
        sort = time.perf_counter() - t0
        sizes = [table.rows[i].tensor.nbytes for i in table.view[:1000]]
        assert sizes == sorted(sizes, reverse=True)
        await pilot.press("g")
        await pilot.pause()
        assert len(app.screen.query_one(TensorTree).root.children) == 2  # model, optimizer
    print(f"\n50k tensors: table appears in {appear:.2f} s, sorts in {sort:.3f} s")
    # A 40-line screen shows under 40 rows at a time (a few screens as it settles); eager filling draws 50,000.
    assert 0 < len(drawn) <= 4 * 40
