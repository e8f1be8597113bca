"""Keys as in the apps users know: one key per sort column, natural name order, no notice over the rows."""

from __future__ import annotations

from ckinspect.tui.widgets.tensor_table import TensorTable
from tests.tui.apps import make_app
from tests.tui.fixtures import DEMO_PATH

SIZE = (100, 30)


async def settle(pilot) -> None:
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


async def test_one_key_per_sort_column_in_natural_order(tmp_path):
    app = make_app("main", [DEMO_PATH], tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(TensorTable)
        await pilot.press("s")  # size: one press, largest first
        sizes = [table.rows[i].tensor.nbytes for i in table.view]
        assert table.sort_column == "size" and sizes == sorted(sizes, reverse=True)
        await pilot.press("n")
        names = [table.rows[i].key for i in table.view]
        assert names.index("optimizer.state.2.exp_avg") < names.index("optimizer.state.10.exp_avg")
        await pilot.press("e")
        counts = [table.rows[i].tensor.numel for i in table.view]
        assert table.sort_column == "elements" and counts == sorted(counts, reverse=True)
        await pilot.press("e")
        assert [table.rows[i].tensor.numel for i in table.view] == sorted(counts)
        assert not app._notifications  # the header's arrow says it; nothing pops over the rows


async def test_the_shape_column_grows_with_the_terminal(tmp_path):
    from ckinspect.model import Checkpoint, TensorInfo
    from ckinspect.tui.app import create_app
    from tests.tui.apps import FixtureBackend

    big = TensorInfo("model.embed.weight", "bfloat16", (32000, 10240, 3), (30720, 3, 1), "0", 0, "model")
    ckpt = Checkpoint(DEMO_PATH, "torch-zip", 2_000_000_000, tensors=[big])
    for size, shown in (((200, 50), "32000×10240×3"), ((80, 24), "32000×10240…")):
        app = create_app("main", [DEMO_PATH], backend=FixtureBackend({DEMO_PATH: ckpt}), cursor_blink=False)
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            line = "".join(segment.text for segment in app.screen.query_one(TensorTable).render_line(1))
            assert f" {shown} " in line, line
