"""The live watch screen: the timeline grows as saves finish, the newest checkpoint's findings and changes
are shown, and the sparklines follow the update ratio per group. Plus a snapshot of the screen."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from textual.widgets import DataTable, Sparkline, Static

from ckinspect.tui.app import create_app
from ckinspect.tui.screens.watch import WatchScreen
from tests.analysis.runs.saves import half_written, save


async def until(pilot, condition, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "the watch screen did not show the save in time"
        await pilot.pause(0.05)
    await pilot.pause()


def rows(table: DataTable) -> list[list[str]]:
    return [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]


async def test_the_timeline_grows_as_saves_finish(tmp_path):
    for step in (10, 20, 30):
        save(tmp_path / f"ckpt-{step:04d}.pt", step)
    app = create_app("watch", [tmp_path], cursor_blink=False, watch={"settle": 600.0, "interval": 0.05, "poll": True})
    async with app.run_test(size=(140, 36)) as pilot:
        screen = app.screen
        assert isinstance(screen, WatchScreen)
        await until(pilot, lambda: len(screen.events) == 3)
        table = screen.query_one("#timeline", DataTable)
        assert [r[:6] for r in rows(table)] == [
            ["1", "10", "ckpt-0010.pt", "good", "", ""],
            ["2", "20", "ckpt-0020.pt", "good", "", "10"],
            ["3", "30", "ckpt-0030.pt", "good", "", "10"],
        ]
        half_written(tmp_path / "ckpt-0040.pt", 40)  # being written: no row for it yet
        await pilot.pause(0.3)
        assert table.row_count == 3
        (tmp_path / "ckpt-0040.pt.tmp").unlink()
        save(tmp_path / "ckpt-0040.pt", 40, nan=True)
        await until(pilot, lambda: len(screen.events) == 4)
        last = rows(table)[-1]
        assert last[:4] == ["4", "40", "ckpt-0040.pt", "damaged"]
        assert last[4] == "NONFINITE, NONFINITE_ONSET"
        newest = str(screen.query_one("#newest", Static).render())
        assert "ckpt-0040.pt  step 40" in newest
        assert "NONFINITE_ONSET: NaN/Inf first appears at step 40 (ckpt-0040.pt)" in newest
        # a ratio per comparison: the model's NaN save has none, its finite optimizer state has one
        assert len(screen.query_one("#spark-model", Sparkline).data) == 2
        assert len(screen.query_one("#spark-optimizer", Sparkline).data) == 3
        status = str(screen.query_one("#watch-status", Static).render())
        assert status == "4 checkpoint(s) judged, 1 not good; newest at step 40 — following by polling (asked for)"


def test_watch_screen_snapshot(snap_compare, tmp_path, monkeypatch):
    run = tmp_path / "run"
    for step in range(10, 70, 10):
        save(run / f"ckpt-{step:04d}.pt", step, frozen_from={"layers.1.wk": 40})
    monkeypatch.chdir(tmp_path)  # the title shows the path as given: relative, the same on every machine
    app = create_app(
        "watch", [Path("run")], cursor_blink=False, watch={"settle": 600.0, "interval": 0.05, "poll": True}
    )

    async def run_before(pilot) -> None:
        deadline = time.monotonic() + 60
        while len(app.screen.events) < 6:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(150, 36), run_before=run_before)
