"""The TUI over the real core and the bundled samples, as a new user meets it (skipped until the
readers/anatomy/diff land in this checkout)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ckinspect.tui.app import create_app
from ckinspect.tui.screens.diff import DiffScreen
from ckinspect.tui.widgets.group_bar import GroupBar
from ckinspect.tui.widgets.tensor_table import TensorTable
from ckinspect.tui.widgets.virtual_table import VirtualTable
from tests.conftest import REPO
from tests.tui.apps import settle

RESUME = Path("samples/stopped-30/tiny_resume.pth")
WEIGHTS = Path("samples/stopped-30/tiny.pth")


def _needs_samples() -> None:
    if not (REPO / RESUME).exists():
        pytest.skip("samples/ missing (python -m trainer samples)")


@pytest.fixture(autouse=True)
def _in_repo():
    here = os.getcwd()
    os.chdir(REPO)  # sample paths are shown as given: relative
    yield
    os.chdir(here)


async def test_a_resume_sample_shows_names_sizes_and_the_optimizer_share():
    _needs_samples()
    app = create_app("main", [RESUME], cursor_blink=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(TensorTable)
        names = table.visible_keys()
        assert "model.tok_embeddings.weight" in names and any(n.endswith("exp_avg_sq") for n in names)
        row = next(r for r in table.rows if r.key == "model.tok_embeddings.weight")
        assert row.cells[5].endswith("KiB")
        bar = app.screen.query_one(GroupBar)
        assert bar.anatomy is not None and 0.5 < bar.anatomy.optimizer_share < 0.8  # AdamW: two moments per weight
        assert f"optimizer share {bar.anatomy.optimizer_share:.1%}" in str(bar.render())


async def test_diff_of_a_resume_file_and_its_weights_aligns_renamed_tensors():
    _needs_samples()
    app = create_app("diff", [RESUME, WEIGHTS], cursor_blink=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, DiffScreen)
        left, right = screen.query_one("#left", VirtualTable), screen.query_one("#right", VirtualTable)
        status = {row.key: row.cells[0] for row in right.rows}
        b_name = {p.name: p.b.name for p in screen.pairs if p.b is not None}
        # model.x in the resume file is x in the fp16 weights file: one row, dtype changed
        assert status["model.tok_embeddings.weight"] == "dtype changed"
        assert b_name["model.tok_embeddings.weight"] == "tok_embeddings.weight"
        assert status["optimizer.state.0.exp_avg"] == "only in A"
        # the name is shown once, in full, and the summary says how B's names differ
        assert left.columns[0].label == "A: name" and "name" not in [c.key for c in right.columns]
        assert left.rows[0].cells[0] == "model.tok_embeddings.weight" and left._widths()[0] >= len(
            "model.layers.0.attn_norm.weight"
        )
        summary = str(screen.query_one("#summary").render())
        assert "DIFFERENT" in summary and "prefix 'model.' dropped" in summary


async def test_repair_of_an_interrupted_save_applies_after_yes_and_undoes(tmp_path):
    _needs_samples()
    import shutil

    from ckinspect.tui.screens.confirm import ConfirmScreen
    from ckinspect.tui.screens.repair import RepairScreen

    folder = tmp_path / "interrupted"
    shutil.copytree(REPO / "samples" / "interrupted", folder)
    tmp_file = folder / "tiny_resume.pth.tmp"
    app = create_app("main", [folder / "tiny_resume.pth"], cursor_blink=False, quick=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("R")
        await settle(pilot)
        assert isinstance(app.screen, RepairScreen)
        table = app.screen.query_one(VirtualTable)
        assert table.rows[0].cells[:2] == ("set-aside", "tiny_resume.pth.tmp")
        await pilot.press("a")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("escape")  # cancel: nothing moves
        await settle(pilot)
        assert tmp_file.exists()
        await pilot.press("a", "y")
        await settle(pilot)
        assert not tmp_file.exists() and any((folder / ".ckinspect-quarantine").rglob("tiny_resume.pth.tmp"))
        assert "press u to undo" in str(app.screen.query_one("#repair-summary").render())
        await pilot.press("u", "y")
        await settle(pilot)
        assert tmp_file.exists()


async def test_a_save_that_died_before_its_rename_is_shown_in_the_folder_and_leads_to_repair(tmp_path):
    import torch

    from ckinspect.tui.screens.folder import FolderScreen
    from ckinspect.tui.screens.repair import RepairScreen

    torch.save({"model": {"w": torch.ones(4)}, "step": 30}, tmp_path / "a.pth")
    torch.save({"model": {"w": torch.ones(4)}, "step": 60}, tmp_path / "x.pth.tmp")  # complete, never renamed
    app = create_app("main", [tmp_path], cursor_blink=False, quick=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, FolderScreen)  # one whole checkpoint, but not opened: the listing has news
        assert [row.key for row in app.screen.query_one(VirtualTable).rows] == [str(tmp_path / "a.pth")]
        summary = str(app.screen.query_one("#folder-summary").render())
        assert "missing (the save died before its rename): x.pth · R plans the repair" in summary
        await pilot.press("R")
        await settle(pilot)
        assert isinstance(app.screen, RepairScreen)
        cells = app.screen.query_one(VirtualTable).rows[0].cells
        assert cells[0].startswith("promote") and cells[1] == "x.pth.tmp"
    assert (tmp_path / "x.pth.tmp").exists() and not (tmp_path / "x.pth").exists()  # nothing applied


async def test_a_folder_holding_only_a_tmp_says_so_instead_of_empty(tmp_path):
    import torch

    torch.save({"model": {"w": torch.ones(4)}}, tmp_path / "only.pth.tmp")
    app = create_app("main", [tmp_path], cursor_blink=False, quick=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(VirtualTable)
        assert (
            table.rows == [] and table.empty_text == "no whole checkpoint here: R shows what the interrupted save left"
        )
        assert "only.pth" in str(app.screen.query_one("#folder-summary").render())
