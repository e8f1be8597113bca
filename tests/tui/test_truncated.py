"""A file cut short never looks healthy: its missing tensors, the share of what it declares, and salvage."""

from __future__ import annotations

import shutil

from ckinspect.tui.app import create_app
from ckinspect.tui.widgets.checkpoint_header import CheckpointHeader
from ckinspect.tui.widgets.group_bar import GroupBar
from ckinspect.tui.widgets.tensor_table import TensorTable
from tests.tui.apps import settle


async def test_a_truncated_file_shows_its_missing_tensors_and_points_to_salvage(tmp_path, samples):
    whole = tmp_path / "whole.pth"
    shutil.copy(samples / "stopped-30" / "tiny_resume.pth", whole)
    cut = tmp_path / "tiny_resume.pth"
    cut.write_bytes(whole.read_bytes()[:300_000])  # 49 of its 82 storages are whole
    app = create_app("main", [cut], cursor_blink=False)
    async with app.run_test(size=(120, 34)) as pilot:
        await settle(pilot)
        rows = app.screen.query_one(TensorTable).rows
        missing = [row for row in rows if row.cells[5] == "missing"]
        assert len(missing) == 33 and len(rows) == 83
        assert all(row.cells[6] == "—" and row.styles[0] == "$ck-error" for row in missing)
        legend = str(app.screen.query_one(GroupBar).render())
        # the whole file's optimizer share (65.0%), not the 53.6% of the bytes that survived
        assert "optimizer share 65.0% of the declared sizes" in legend and "33 tensors missing" in legend
        header = str(app.screen.query_one(CheckpointHeader).render())
        assert "33 tensors missing (cut short)" in header
        assert "ckinspect salvage tiny_resume.pth OUT" in header


async def test_the_parts_beside_the_tensors_are_visible(samples):
    """Loss, config, param_groups (lr, betas, weight decay), run settings; optimizer state names its parameter."""
    from textual.widgets import Tree

    from ckinspect.tui.screens.metadata import MetadataScreen
    from ckinspect.tui.widgets.details_pane import DetailsPane

    app = create_app("main", [samples / "stopped-30" / "tiny_resume.pth"], cursor_blink=False)
    async with app.run_test(size=(120, 34)) as pilot:
        await settle(pilot)
        app.screen.jump_to("optimizer.state.16.exp_avg")
        await pilot.pause()
        facts = str(app.screen.query_one(DetailsPane).query_one("#facts").render())
        assert "state of model.layers.1.ffn.w1.weight" in facts
        app.screen.jump_to("model.layers.1.ffn.w1.weight")
        await pilot.pause()
        facts = str(app.screen.query_one(DetailsPane).query_one("#facts").render())
        assert "optimizer state optimizer.state.16.*" in facts
        await pilot.press("m")
        await pilot.pause()
        assert isinstance(app.screen, MetadataScreen)
        await pilot.press("e")
        labels = set()

        def collect(node) -> None:
            labels.add(str(node.label))
            for child in node.children:
                collect(child)

        collect(app.screen.query_one(Tree).root)
        for expected in ("loss: 3.13209", "lr: 0.00196133", "weight_decay: 0.1", "0: 0.9", "1: 0.95"):
            assert expected in labels, expected
        assert {"config", "run", "param_groups", "dim: 32", "steps: 60"} <= labels
        assert "… and 4 more" in labels  # 20 parameter ids: the first 16 and a count
        await pilot.press("escape")
        assert not isinstance(app.screen, MetadataScreen)
