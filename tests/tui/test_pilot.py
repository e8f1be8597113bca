"""What a user does in the TUI, driven by Textual's Pilot over hand-built checkpoints."""

from __future__ import annotations

import pytest

from ckinspect.tui.core import Backend, natural_key
from ckinspect.tui.screens.confirm import ConfirmScreen
from ckinspect.tui.screens.diff import DiffScreen
from ckinspect.tui.screens.help import HelpScreen
from ckinspect.tui.screens.inspect import InspectScreen
from ckinspect.tui.screens.repair import RepairScreen
from ckinspect.tui.widgets.details_pane import DetailsPane
from ckinspect.tui.widgets.findings_panel import FindingsPanel
from ckinspect.tui.widgets.group_bar import GroupBar
from ckinspect.tui.widgets.tensor_table import TensorTable
from ckinspect.tui.widgets.tensor_tree import TensorTree
from ckinspect.tui.widgets.virtual_table import VirtualTable
from ckinspect.vocab import CkinspectError
from tests.tui.apps import make_app, settle
from tests.tui.fixtures import DEMO_B_PATH, DEMO_PATH

SIZE = (100, 30)


async def test_open_shows_names_sizes_and_the_optimizer_share(tmp_path):
    app = make_app("main", [DEMO_PATH], tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(TensorTable)
        assert table.row_count == 83
        first = table.rows[table.view[0]]
        assert first.cells[0] == "model.tok_embeddings.weight" and first.cells[5] == "64.0 KiB"
        bar = app.screen.query_one(GroupBar)
        # 2 moments of every fp32 weight (the tied output counted once) + the step scalars
        assert bar.anatomy.groups["optimizer"].bytes == 2 * bar.anatomy.groups["model"].bytes + 20 * 4
        assert "optimizer share 66.1%" in str(bar.render())


async def test_sort_by_key_and_by_clicking_a_header(tmp_path):
    app = make_app("main", [DEMO_PATH], tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(TensorTable)
        await pilot.press("n")  # by name, in natural order
        names = [table.rows[i].key for i in table.view]
        assert names == sorted(names, key=natural_key)
        await pilot.press("r")
        assert [table.rows[i].key for i in table.view] == sorted(names, key=natural_key, reverse=True)
        size_x = (
            sum(
                w + 1
                for w, c in zip(table._widths(), table.columns, strict=True)
                if c.key != "size" and table.columns.index(c) < table.column_index("size")
            )
            + 2
        )
        await pilot.click(TensorTable, offset=(size_x, 0))
        sizes = [table.rows[i].sort_key(5) for i in table.view]
        assert table.sort_column == "size" and sizes == sorted(sizes)
        await pilot.click(TensorTable, offset=(size_x, 0))
        assert [table.rows[i].sort_key(5) for i in table.view] == sorted(sizes, reverse=True)


async def test_filter_by_substring_and_by_glob(tmp_path):
    app = make_app("main", [DEMO_PATH], tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(TensorTable)
        await pilot.press("slash", *"exp_avg_sq")
        assert table.row_count == 20 and all(k.endswith("exp_avg_sq") for k in table.visible_keys())
        await pilot.press("ctrl+a", "ctrl+k", *"model.*.attn.w?.weight", "enter")
        assert table.row_count == 8 and table.has_focus
        await pilot.press("escape")  # clears the filter
        assert table.row_count == 83


async def test_select_computes_value_statistics_in_a_worker(tmp_path):
    app = make_app("main", [DEMO_PATH], tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.screen.jump_to("model.layers.1.mlp.w2.weight")
        await pilot.press("enter")
        await settle(pilot)
        stats = str(app.screen.query_one(DetailsPane).query_one("#stats").render())
        assert "non-finite 2" in stats  # one NaN, one Inf
        assert "> fp16 max 1" in stats  # 70000 > 65504
        assert "▁" in stats or "█" in stats  # the histogram is drawn


async def test_choosing_a_finding_jumps_to_its_tensor(tmp_path):
    app = make_app("main", [DEMO_PATH], tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("f")
        assert app.screen.query_one(FindingsPanel).has_focus
        await pilot.press("home", "enter")  # worst first: the NONFINITE error
        table = app.screen.query_one(TensorTable)
        assert table.has_focus and table.current_row.key == "model.layers.1.mlp.w2.weight"


async def test_tree_groups_by_module_path(tmp_path):
    app = make_app("main", [DEMO_PATH], tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("g")
        tree = app.screen.query_one(TensorTree)
        assert tree.has_focus
        assert [str(n.label).split()[0] for n in tree.root.children] == ["model", "optimizer", "rng"]
        await pilot.press("enter")  # open "model": layers, norm, output, tok_embeddings
        await pilot.pause()
        assert [str(n.label).split()[0] for n in tree.root.children[0].children] == [
            "layers",
            "norm",
            "output",
            "tok_embeddings",
        ]
        await pilot.press("g")
        assert app.screen.query_one(TensorTable).has_focus


async def test_diff_aligns_rows_and_toggles_differences_only(tmp_path):
    app = make_app("diff", [DEMO_PATH, DEMO_B_PATH], tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, DiffScreen)
        left, right = screen.query_one("#left", VirtualTable), screen.query_one("#right", VirtualTable)
        assert left.visible_keys() == right.visible_keys() and left.row_count == 84
        status = {row.key: row.cells[0] for row in right.rows}
        assert status["model.layers.1.ffn_norm.weight"] == "only in A"
        assert status["model.lm_bias"] == "only in B"
        assert status["optimizer.state.0.step"] == "same"
        assert status["model.layers.0.attn.wq.weight"] == "changed"
        gap = next(r for r in left.rows if r.key == "model.lm_bias")
        # names agree on both sides, so each is shown once: a B-only tensor's row has its name, dimmed, and no A shape
        assert (gap.cells[0], gap.cells[-1], gap.styles[0]) == ("model.lm_bias", "", "dim")
        assert "DIFFERENT" in str(screen.query_one("#summary").render())
        await pilot.press("x")
        assert left.row_count == right.row_count == 62
        assert all(status[k] != "same" for k in right.visible_keys())
        await pilot.press("down", "down", "down")
        assert right.cursor == left.cursor == 3
        await pilot.press("pagedown", "pagedown")
        assert right.leader is left and right.top_row() == left.top_row() > 0  # one scroll position, the left's
        await pilot.press("x")
        assert left.row_count == 84


async def test_repair_applies_only_after_confirmation_and_offers_undo(tmp_path):
    app = make_app("main", [DEMO_PATH], tmp_path)
    backend = app.backend
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("R")
        await settle(pilot)
        assert isinstance(app.screen, RepairScreen)
        assert app.screen.query_one(VirtualTable).row_count == 2
        await pilot.press("a")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await settle(pilot)
        assert isinstance(app.screen, RepairScreen) and backend.applied == []
        await pilot.press("a", "y")
        await settle(pilot)
        assert len(backend.applied) == 1
        assert "press u to undo" in str(app.screen.query_one("#repair-summary").render())
        await pilot.press("u", "y")
        await settle(pilot)
        assert backend.undone == 1
        await pilot.press("escape")
        assert isinstance(app.screen, InspectScreen)


async def test_help_palette_theme_and_quit(tmp_path):
    app = make_app("main", [DEMO_PATH], tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        assert isinstance(app.screen, InspectScreen)
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert {
            "Filter",
            "Sort by size",
            "Sort by name",
            "Tree",
            "Values",
            "Findings",
            "Diff",
            "Drift",
            "Repair",
            "Help",
            "Theme",
            "Quit",
            "Sort by % file",
        } <= titles
        await pilot.press("t")
        assert app.theme == "ckinspect-light"
        await pilot.press("q")
    assert app.return_code == 0


async def test_a_worker_failure_is_one_line_in_the_ui(tmp_path):
    class Unreadable(Backend):
        def load(self, target):
            raise CkinspectError(f"{target}: permission denied")

    from ckinspect.tui.app import create_app

    app = create_app("main", [DEMO_PATH], backend=Unreadable(), cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        label = str(app.screen.query_one("#loading-label").render())
        assert label == f"cannot open {DEMO_PATH}: failed: {DEMO_PATH}: permission denied"


@pytest.mark.parametrize("command", ["main", "diff"])
async def test_narrow_terminal_still_shows_the_table(tmp_path, command):
    paths = [DEMO_PATH] if command == "main" else [DEMO_PATH, DEMO_B_PATH]
    app = make_app(command, paths, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        table = app.screen.query(VirtualTable).first()
        assert table.size.height >= 8 and table._widths()[0] >= 20


async def test_folder_lists_checkpoints_with_badges_and_enter_opens_one(tmp_path):
    from ckinspect.tui.app import create_app
    from ckinspect.tui.screens.folder import FolderScreen
    from tests.tui.apps import demo_backend

    app = create_app("main", [DEMO_PATH, DEMO_B_PATH], backend=demo_backend(tmp_path), cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, FolderScreen)
        table = app.screen.query_one(VirtualTable)
        cells = {row.key: row.cells for row in table.rows}
        assert cells[str(DEMO_PATH)][1:] == ("torch-zip", "1.2 MiB", "30", "1E 2W 1I")
        assert cells[str(DEMO_B_PATH)][3:] == ("60", "ok")
        await pilot.press("down", "enter")
        await settle(pilot)
        assert isinstance(app.screen, InspectScreen) and app.screen.target == DEMO_B_PATH
        await pilot.press("escape")
        assert isinstance(app.screen, FolderScreen)


async def test_diff_with_a_neighbour_chosen_from_the_inspect_screen(tmp_path):
    from ckinspect.tui.screens.pick_file import PickFileScreen

    app = make_app("main", [DEMO_PATH], tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("d")
        await settle(pilot)
        assert isinstance(app.screen, PickFileScreen)
        await pilot.press("enter")  # the only other checkpoint
        await settle(pilot)
        assert isinstance(app.screen, DiffScreen)
        assert (app.screen.a_path, app.screen.b_path) == (DEMO_PATH, DEMO_B_PATH)


async def test_mouse_click_selects_a_row_and_quick_skips_the_scan(tmp_path):
    from ckinspect.tui.app import create_app
    from tests.tui.apps import demo_backend

    app = create_app("main", [DEMO_PATH], backend=demo_backend(tmp_path), cursor_blink=False, quick=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(TensorTable)
        await pilot.click(TensorTable, offset=(5, 4))  # header is line 0: the 4th tensor
        assert table.cursor == 3
        assert app.screen.query_one(DetailsPane).tensor_name == table.current_row.key
        assert "--quick" in app.screen.scan_note


async def test_command_palette_runs_a_screen_action(tmp_path):
    app = make_app("main", [DEMO_PATH], tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+p", *"sort by size")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause(0.2)
        table = app.screen.query_one(TensorTable)
        assert table.sort_column == "size"


async def test_a_folder_with_one_checkpoint_opens_it_directly(tmp_path):
    from ckinspect.tui.app import create_app
    from tests.tui.apps import FixtureBackend
    from tests.tui.fixtures import demo_checkpoint

    backend = FixtureBackend({DEMO_PATH: demo_checkpoint(tmp_path)})
    app = create_app("main", [tmp_path], backend=backend, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, InspectScreen) and app.screen.target == DEMO_PATH
        assert app.screen.query_one(TensorTable).row_count == 83


async def test_typing_in_the_file_picker_starts_a_path(tmp_path):
    from ckinspect.tui.screens.pick_file import PickFileScreen

    app = make_app("main", [DEMO_PATH], tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("d")
        await settle(pilot)
        assert isinstance(app.screen, PickFileScreen)
        await pilot.press(*"runs/other.pth")  # the list has focus: the keys still end up in the path box
        assert app.screen.query_one("#path").value == "runs/other.pth"


async def test_an_interrupted_save_leads_from_its_finding_to_the_repair_and_back(tmp_path):
    app = make_app("main", [DEMO_PATH], tmp_path)
    backend = app.backend
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        panel = app.screen.query_one(FindingsPanel)
        await pilot.press("f")
        leftover = next(i for i, f in enumerate(panel.findings) if f.code == "LEFTOVER_TMP")
        panel.highlighted = leftover
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, RepairScreen)
        await pilot.press("a", "y")
        await settle(pilot)
        assert len(backend.applied) == 1
        backend.checkpoints[DEMO_PATH].findings = [
            f for f in backend.checkpoints[DEMO_PATH].findings if f.code != "LEFTOVER_TMP"
        ]
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, InspectScreen)  # and it read the file again: the finding is gone
        assert "LEFTOVER_TMP" not in {f.code for f in app.screen.query_one(FindingsPanel).findings}
