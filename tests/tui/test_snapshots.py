"""Snapshot tests of each screen at fixed sizes; fixture paths are relative and fixed, cursor blink
is off, and no clock or host detail is drawn. Update with `pytest tests/tui --snapshot-update`."""

from __future__ import annotations

from ckinspect.tui.widgets.tensor_table import TensorTable
from tests.tui.apps import make_app, settle
from tests.tui.fixtures import DEMO_B_PATH, DEMO_PATH


def _select(name: str, stats: bool = True):
    async def run_before(pilot) -> None:
        await settle(pilot)
        pilot.app.screen.jump_to(name)
        if stats:
            pilot.app.screen.action_value_stats()
        await settle(pilot)

    return run_before


def test_inspect_100x30(snap_compare, tmp_path):
    app = make_app("main", [DEMO_PATH], tmp_path)
    assert snap_compare(app, terminal_size=(100, 30), run_before=_select("model.layers.0.attn.wo.weight"))


def test_inspect_wide_light_theme(snap_compare, tmp_path):
    app = make_app("main", [DEMO_PATH], tmp_path, theme="ckinspect-light")
    assert snap_compare(app, terminal_size=(130, 36), run_before=_select("model.layers.1.mlp.w2.weight"))


def test_inspect_80x24_sorted_by_size(snap_compare, tmp_path):
    async def run_before(pilot) -> None:
        await settle(pilot)
        pilot.app.screen.query_one(TensorTable).sort_by("size", reverse=True)
        await settle(pilot)

    app = make_app("main", [DEMO_PATH], tmp_path)
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_inspect_tree(snap_compare, tmp_path):
    app = make_app("main", [DEMO_PATH], tmp_path)
    assert snap_compare(app, terminal_size=(100, 30), run_before=settle, press=["g", "enter", "down", "enter"])


def test_diff_100x30(snap_compare, tmp_path):
    app = make_app("diff", [DEMO_PATH, DEMO_B_PATH], tmp_path)
    assert snap_compare(app, terminal_size=(100, 30), run_before=settle)


def test_diff_80x24_differences_only(snap_compare, tmp_path):
    app = make_app("diff", [DEMO_PATH, DEMO_B_PATH], tmp_path)
    assert snap_compare(app, terminal_size=(80, 24), run_before=settle, press=["x", "end"])


def test_drift_100x30(snap_compare, tmp_path):
    app = make_app("drift", [DEMO_PATH], tmp_path)
    assert snap_compare(app, terminal_size=(100, 30), run_before=settle)


def test_repair_confirmation_100x30(snap_compare, tmp_path):
    app = make_app("main", [DEMO_PATH], tmp_path)

    async def run_before(pilot) -> None:
        await settle(pilot)
        await pilot.press("R")
        await settle(pilot)
        await pilot.press("down", "a")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(100, 30), run_before=run_before)


def test_unreadable_file_80x24(snap_compare, tmp_path):
    from ckinspect.tui.app import create_app
    from tests.tui.apps import demo_backend

    class Unreadable(type(demo_backend(tmp_path))):
        def load(self, target):
            raise OSError("unexpected end of data: the file is cut short at 300,000 bytes")

    app = create_app("main", [DEMO_PATH], backend=Unreadable({}), cursor_blink=False)
    assert snap_compare(app, terminal_size=(80, 24), run_before=settle)


def test_folder_80x24(snap_compare, tmp_path):
    from ckinspect.tui.app import create_app
    from tests.tui.apps import demo_backend

    app = create_app("main", [DEMO_PATH, DEMO_B_PATH], backend=demo_backend(tmp_path), cursor_blink=False)
    assert snap_compare(app, terminal_size=(80, 24), run_before=settle)


def test_help_100x30(snap_compare, tmp_path):
    app = make_app("main", [DEMO_PATH], tmp_path)
    assert snap_compare(app, terminal_size=(100, 30), run_before=settle, press=["question_mark"])


def test_diff_detail_100x30(snap_compare, tmp_path):
    app = make_app("diff", [DEMO_PATH, DEMO_B_PATH], tmp_path)

    async def run_before(pilot) -> None:
        await settle(pilot)
        pilot.app.screen.query_one("#left").move_to_key("model.layers.0.attn.wq.weight")
        await pilot.press("enter")
        await settle(pilot)

    assert snap_compare(app, terminal_size=(100, 30), run_before=run_before)


def test_inspect_light_theme_80x24(snap_compare, tmp_path):
    app = make_app("main", [DEMO_PATH], tmp_path, theme="ckinspect-light")
    assert snap_compare(app, terminal_size=(80, 24), run_before=_select("model.layers.1.mlp.w2.weight"))


def test_diff_light_theme_80x24(snap_compare, tmp_path):
    app = make_app("diff", [DEMO_PATH, DEMO_B_PATH], tmp_path, theme="ckinspect-light")
    assert snap_compare(app, terminal_size=(80, 24), run_before=settle)
