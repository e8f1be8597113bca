"""The diff screen a user can trust: both panes always show the same rows in the same order."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual import events
from textual.timer import Timer
from textual.widgets import Static

from ckinspect.tui.app import create_app
from ckinspect.tui.screens.diff import DiffScreen
from ckinspect.tui.widgets.virtual_table import VirtualTable
from tests.tui.apps import make_app, settle
from tests.tui.fixtures import DEMO_B_PATH, DEMO_PATH

SIZE = (100, 30)


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


async def test_values_beside_the_tensors_are_diffed_too(tmp_path):
    """lr, loss and step changed in a copy: the screen says which, even with differences only."""
    app = make_app("diff", [DEMO_PATH, DEMO_PATH.with_name("copy.pth")], tmp_path)
    a = app.backend.checkpoints[DEMO_PATH]
    b = a.replace(path=DEMO_PATH.with_name("copy.pth"), metadata=dict(a.metadata))
    a.metadata.update(loss=3.13, lr=1e-3)
    b.metadata.update(loss=2.93, lr=3e-4, step=60)
    app.backend.checkpoints[b.path] = b
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        values = screen.query_one("#values", VirtualTable)
        assert values.display
        assert [row.cells for row in values.rows] == [
            ("step", "30", "60"),
            ("loss", "3.13", "2.93"),
            ("lr", "0.001", "0.0003"),
        ]
        await pilot.press("x")
        left, _ = panes(screen)
        assert left.row_count == 0 and left.empty_text == "no tensor differs; the values below do"
        summary = str(screen.query_one("#summary", Static).render())
        assert "values 3" in summary and "DIFFERENT" in summary


async def test_sort_by_delta_and_enter_shows_the_tensors_diff(tmp_path):
    from ckinspect.tui.screens.diff_detail import DiffDetailScreen

    app = make_app("diff", [DEMO_PATH, DEMO_B_PATH], tmp_path)
    async with app.run_test(size=(120, 34)) as pilot:
        await settle(pilot)
        screen = app.screen
        left, right = panes(screen)
        assert [c.key for c in right.columns] == ["status", "delta", "rel", "ndiff", "dtype", "shape"]
        await pilot.press("D")
        await pilot.pause()
        assert left.visible_keys() == right.visible_keys()
        deltas = [screen.pairs[i].max_abs_diff for i in right.view]
        shown = [d for d in deltas if d is not None]
        assert shown == sorted(shown, reverse=True) and shown[0] == float("inf")  # A's NaN against a number
        await pilot.press("down")  # the second largest: a finite change
        name = left.current_row.key
        change = next(c for c in screen.result.changed if c.name == name)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, DiffDetailScreen)
        facts = str(app.screen.query_one("#detail-facts", Static).render())
        assert name in facts and "max rel Δ" in facts
        assert f"{change.n_diff:,} of {change.numel:,}" in facts
        assert "first at   [" in facts
        histogram = str(app.screen.query_one("#detail-histogram", Static).render())
        assert "histogram of B - A" in histogram and "computing" not in histogram
        await pilot.press("escape")
        assert app.screen is screen


# ---------------------------------------------------------------- one scroll position, and idle is idle

SAMPLES = Path(__file__).parents[2] / "samples"


def drawn(table: VirtualTable, y: int) -> str:
    return "".join(segment.text for segment in table.render_line(y))


def assert_aligned(left: VirtualTable, right: VirtualTable) -> None:
    """Each line of the right pane draws the cells of the tensor the left pane draws on that line."""
    top = int(left.scroll_y)
    for y in range(1, left.scrollable_content_region.height):
        position = top + y - 1
        if position >= left.row_count:
            break
        key = left.rows[left.view[position]].key
        expected = right.rows[right.visible_keys().index(key)]
        text = drawn(right, y)
        assert all(cell.strip()[:6] in text for cell in expected.cells if cell.strip()), (y, key, text)


@pytest.mark.parametrize("size", [(80, 24), (120, 35), (200, 50)])
async def test_the_panes_share_one_scroll_position_and_idle_is_idle(size):
    """The real samples (83 tensors, more than a screen): Down Down, End, Home, PageDown keep each tensor's
    Δ beside its own name; then, left alone, the screen processes no message and draws nothing."""
    app = create_app("diff", [SAMPLES / "stopped-30/tiny_resume.pth", SAMPLES / "straight-60/tiny_resume.pth"],
                     cursor_blink=False)  # fmt: skip
    seen: list[str] = []
    async with app.run_test(size=size, message_hook=lambda m: seen.append(type(m).__name__)) as pilot:
        await settle(pilot)
        left, right = panes(app.screen)
        assert left.row_count > size[1]  # more rows than the screen: the panes must scroll
        for keys in (("down", "down"), ("end",), ("home",), ("pagedown", "pagedown"), ("end", "up", "up"), ("home",)):
            await pilot.press(*keys)
            await pilot.pause()
            assert_aligned(left, right)
        for table, event in (
            (left, events.MouseScrollDown),
            (right, events.MouseScrollDown),
            (right, events.MouseScrollUp),
        ):
            for _ in range(3):  # the wheel over either pane
                table.post_message(event(table, 2, 3, 0, 1, 0, False, False, False))
                await pilot.pause()
            assert_aligned(left, right)
        await pilot.resize_terminal(size[0] - 7, size[1] - 3)
        await pilot.pause()
        await pilot.press("end")
        await pilot.pause()
        assert_aligned(left, right)
        await pilot.press("down", "down")
        await settle(pilot)
        drawn_lines = 0
        original = VirtualTable.render_line

        def counting(self, y):
            nonlocal drawn_lines
            drawn_lines += 1
            return original(self, y)

        ticks: list[str] = []
        original_tick = Timer._tick

        async def counting_tick(self, **kw):
            ticks.append(self.name)
            await original_tick(self, **kw)

        seen.clear()
        VirtualTable.render_line = counting  # type: ignore[method-assign]
        Timer._tick = counting_tick  # type: ignore[method-assign]
        try:
            await asyncio.sleep(1.0)  # an idle second: nothing may run in it (no timing is asserted)
        finally:
            VirtualTable.render_line = original  # type: ignore[method-assign]
            Timer._tick = original_tick  # type: ignore[method-assign]
        assert (seen, drawn_lines, sorted(set(ticks))) == ([], 0, [])


@pytest.mark.parametrize("width", [80, 120, 200])
async def test_the_diff_panes_give_a_whole_name_before_a_columns_a_side_repeats(width):
    """The samples' stopped-30 and straight-60 resume files, one name column: at every width each name
    is drawn whole (A's dtype, then A's shape, give way first: B's are on the right and the status says
    when they differ); where there is room, A's columns stay."""
    samples = Path(__file__).parents[2] / "samples"
    paths = [samples / "stopped-30" / "tiny_resume.pth", samples / "straight-60" / "tiny_resume.pth"]
    app = create_app("diff", paths, cursor_blink=False)
    async with app.run_test(size=(width, 35)) as pilot:
        await settle(pilot)
        left, right = panes(app.screen)
        drawn = "\n".join("".join(s.text for s in left.render_line(y)) for y in range(left.size.height))
        assert "…" not in drawn, drawn
        assert "model.layers.0.attn_norm.weight" in drawn
        keys = [c.key for c in left.columns]
        assert keys == {80: ["name"], 120: ["name", "shape"], 200: ["name", "dtype", "shape"]}[width]
        assert "shape" in [c.key for c in right.columns]


@pytest.mark.parametrize("quick", [False, True])
async def test_diff_quick_in_the_tui_compares_structure_only_and_never_says_same(tmp_path, quick):
    """`ckinspect diff A B --quick` opens the TUI: it compares dtype, shape and layout only, as the CLI
    does, so two files whose only difference is a value read "same structure", never "same" or
    IDENTICAL; without --quick the value is compared and found."""
    torch = pytest.importorskip("torch")
    a, b = tmp_path / "a.pth", tmp_path / "b.pth"
    torch.save({"w": torch.zeros(4), "v": torch.ones(3)}, a)
    torch.save({"w": torch.zeros(4), "v": torch.tensor([1.0, 2.0, 1.0])}, b)
    app = create_app("diff", [a, b], cursor_blink=False, quick=quick)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        screen = app.screen
        summary = str(screen.query_one("#summary", Static).render())
        statuses = {p.name: p.status for p in screen.pairs}
        if quick:
            assert statuses == {"w": "same structure", "v": "same structure"}
            assert "SAME STRUCTURE, values not compared (--quick)" in summary and "IDENTICAL" not in summary
            await pilot.press("x")  # differences only: nothing is known to differ
            left, _ = panes(screen)
            assert left.row_count == 0
        else:
            assert statuses == {"w": "same", "v": "changed"}
            assert "DIFFERENT" in summary
