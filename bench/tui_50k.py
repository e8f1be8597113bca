"""How fast a 50,000-tensor checkpoint appears and sorts in the TUI, against Textual's DataTable.

    /work/venv/bin/python -m bench.tui_50k [--tensors N] [--skip-datatable]

Both tables get the same 50,000 rows in the same process run. "appear" is from the app starting
until the filled table has been drawn; "sort" is from the key press until the re-sorted table is
drawn. Nothing is written to disk.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from textual.app import App, ComposeResult
from textual.widgets import DataTable

from ckinspect.tui.app import create_app
from ckinspect.tui.widgets.tensor_table import TensorTable, tensor_rows

from tests.tui.apps import FixtureBackend
from tests.tui.fixtures import big_checkpoint

SIZE = (120, 40)


async def measure_ckinspect(count: int) -> tuple[float, float, float]:
    big = big_checkpoint(count)
    app = create_app("main", [big.path], backend=FixtureBackend({big.path: big}, use_real=False), cursor_blink=False)
    start = time.perf_counter()
    async with app.run_test(size=SIZE) as pilot:
        while not (app.screen.query(TensorTable) and app.screen.query_one(TensorTable).row_count == count):
            await pilot.pause(0.005)
        await pilot.pause()
        appear = time.perf_counter() - start
        table = app.screen.query_one(TensorTable)
        sorts = []
        for column in ("size", "name", "shape"):
            t0 = time.perf_counter()
            table.sort_by(column)
            await pilot.pause()
            sorts.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        await pilot.press("s")  # through the key binding, as a user would
        await pilot.pause()
        sorts.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        await pilot.press("slash", "w", "1", "2")
        await pilot.pause()
        filtered = time.perf_counter() - t0
    return appear, max(sorts), filtered


async def measure_datatable(count: int) -> tuple[float, float]:
    rows = [r.cells for r in tensor_rows(big_checkpoint(count))]

    class Plain(App):
        def compose(self) -> ComposeResult:
            yield DataTable()

    app = Plain()
    start = time.perf_counter()
    async with app.run_test(size=SIZE) as pilot:
        table = app.query_one(DataTable)
        for key in ("name", "group", "dtype", "shape", "elements", "size", "share"):
            table.add_column(key, key=key)
        table.add_rows(rows)
        await pilot.pause()
        appear = time.perf_counter() - start
        t0 = time.perf_counter()
        table.sort("name")
        await pilot.pause()
        return appear, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=50_000)
    parser.add_argument("--skip-datatable", action="store_true", help="skip the (slow) DataTable baseline")
    args = parser.parse_args()
    appear, sort, filtered = asyncio.run(measure_ckinspect(args.tensors))
    print(f"ckinspect TUI, {args.tensors:,} tensors: table appears in {appear:.2f} s, "
          f"slowest sort {sort:.3f} s, filter while typing {filtered:.3f} s")
    if not args.skip_datatable:
        dt_appear, dt_sort = asyncio.run(measure_datatable(args.tensors))
        print(f"Textual DataTable, same rows: appears in {dt_appear:.2f} s, sort {dt_sort:.3f} s")
        print(f"ratio: appears {dt_appear / appear:.1f}x faster, sorts {dt_sort / sort:.1f}x faster than DataTable")


if __name__ == "__main__":
    main()
