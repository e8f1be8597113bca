"""How fast a 50,000-tensor checkpoint appears and sorts in the TUI, against Textual's DataTable.

    python -m bench.tui_50k [--tensors N] [--skip-datatable] [--real]

Both tables get the same 50,000 rows in the same process run. "appear" is from the app starting
until the filled table has been drawn; "sort" is from the key press until the re-sorted table is
drawn. With --real, a 50,000-tensor safetensors file is written under /tmp (deleted afterwards) and
opened through the real readers (`inspect_path`), as `ckinspect FILE` would.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from textual.app import App, ComposeResult
from textual.widgets import DataTable

from ckinspect.tui.app import create_app
from ckinspect.tui.widgets.tensor_table import TensorTable, tensor_rows
from tests.tui.apps import FixtureBackend
from tests.tui.fixtures import big_checkpoint

SIZE = (120, 40)


async def measure_ckinspect(count: int, real_file: Path | None = None) -> tuple[float, float, float]:
    if real_file is None:
        big = big_checkpoint(count)
        app = create_app("main", [big.path], backend=FixtureBackend({big.path: big}), cursor_blink=False)
    else:
        app = create_app("main", [real_file], cursor_blink=False, quick=True)
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


def write_safetensors(count: int, folder: Path) -> Path:
    import numpy as np
    from safetensors.numpy import save_file

    tensors = {
        f"model.layers.{i // 10}.block.w{i % 10}.weight": np.full((4, 4), i, dtype=np.float32) for i in range(count)
    }
    path = folder / "big.safetensors"
    save_file(tensors, str(path))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=50_000)
    parser.add_argument("--skip-datatable", action="store_true", help="skip the (slow) DataTable baseline")
    parser.add_argument("--real", action="store_true", help="also open a real 50,000-tensor safetensors file")
    args = parser.parse_args()
    appear, sort, filtered = asyncio.run(measure_ckinspect(args.tensors))
    print(
        f"ckinspect TUI, {args.tensors:,} tensors: table appears in {appear:.2f} s, "
        f"slowest sort {sort:.3f} s, filter while typing {filtered:.3f} s"
    )
    if args.real:
        with tempfile.TemporaryDirectory(prefix="ckinspect-bench-") as tmp:
            path = write_safetensors(args.tensors, Path(tmp))
            real_appear, real_sort, _ = asyncio.run(measure_ckinspect(args.tensors, path))
        print(
            f"ckinspect TUI on a real {args.tensors:,}-tensor safetensors file (readers + anatomy): "
            f"table appears in {real_appear:.2f} s, slowest sort {real_sort:.3f} s"
        )
    if not args.skip_datatable:
        dt_appear, dt_sort = asyncio.run(measure_datatable(args.tensors))
        print(f"Textual DataTable, same rows: appears in {dt_appear:.2f} s, sort {dt_sort:.3f} s")
        print(f"ratio: appears {dt_appear / appear:.1f}x faster, sorts {dt_sort / sort:.1f}x faster than DataTable")


if __name__ == "__main__":
    main()
