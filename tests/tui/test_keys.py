"""Keys as in the apps users know: one key per sort column, natural name order, no notice over the rows."""

from __future__ import annotations

from pathlib import Path

from ckinspect.tui.widgets.tensor_table import TensorTable
from tests.tui.apps import make_app, settle
from tests.tui.fixtures import DEMO_PATH

SIZE = (100, 30)


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


async def test_y_copies_the_name_and_o_exports_the_view(tmp_path, monkeypatch):
    import csv
    import json

    monkeypatch.chdir(tmp_path)
    app = make_app("main", [DEMO_PATH], tmp_path / "data")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.screen.jump_to("model.norm.weight")
        await pilot.press("y")
        assert app.clipboard == "model.norm.weight"
        await pilot.press("Y")
        assert app.clipboard == str(tmp_path / DEMO_PATH) and Path(app.clipboard).is_absolute()  # pastes anywhere
        await pilot.press("slash", *"exp_avg_sq", "enter", "s")
        await pilot.press("o", "O")
        rows = list(csv.DictReader((tmp_path / "step_30_resume.pth-tensors.csv").open()))
        assert len(rows) == 20 and rows[0]["name"] == "optimizer.state.0.exp_avg_sq"  # the largest first, as shown
        assert rows[0]["shape"] == "256x64" and rows[0]["param"] == "model.tok_embeddings.weight"
        entries = json.loads((tmp_path / "step_30_resume.pth-tensors.json").read_text())["tensors"]
        assert [e["name"] for e in entries] == [r["name"] for r in rows]
        await pilot.press("o")
        assert (tmp_path / "step_30_resume.pth-tensors-1.csv").is_file()  # never over an earlier export


async def test_a_screenshot_without_a_downloads_folder_lands_in_the_current_one(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    app = make_app("main", [DEMO_PATH], tmp_path / "data")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.action_screenshot("shot.svg")
        await pilot.pause()
        await app.workers.wait_for_complete()
        assert (tmp_path / "shot.svg").read_text().startswith("<svg")


async def test_the_palettes_screenshot_without_a_downloads_folder_says_where_it_went(tmp_path, monkeypatch):
    """The command palette's "Save screenshot" calls deliver_screenshot() with no folder: Textual's default is
    ~/Downloads, which fails where there is none; it lands in the current folder and the notice says where."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    app = make_app("main", [DEMO_PATH], tmp_path / "data")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.deliver_screenshot()
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        shots = list(tmp_path.glob("*.svg"))
        assert len(shots) == 1 and shots[0].read_text().startswith("<svg")
        assert any(str(shots[0]) in n.message for n in app._notifications)


async def test_at_120_columns_the_tensor_table_takes_the_width_names_keep_their_prefix():
    """The samples' resume file at 120x35: the table is as wide as the terminal (the details and findings
    below it), so no name loses its start and no shape is cut."""
    from ckinspect.tui.app import create_app

    sample = Path(__file__).parents[2] / "samples" / "resumed-60" / "tiny_resume.pth"
    app = create_app("main", [sample], cursor_blink=False, quick=True)
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(TensorTable)
        assert table.size.width >= 118
        lines = ["".join(s.text for s in table.render_line(y)) for y in range(1, table.size.height)]
        drawn = "\n".join(lines)
        assert "…" not in drawn, drawn
        assert "model.layers.0.attn.wq.weight" in drawn or "optimizer.state" in drawn
