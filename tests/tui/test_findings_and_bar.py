"""Findings read without scrolling, rows with findings are marked, and the size bar is the whole file."""

from __future__ import annotations

from ckinspect.tui.widgets.findings_panel import FindingsPanel
from ckinspect.tui.widgets.group_bar import GroupBar
from ckinspect.tui.widgets.tensor_table import TensorTable
from tests.tui.apps import make_app, settle
from tests.tui.fixtures import DEMO_PATH


async def test_rows_named_by_findings_are_marked(tmp_path):
    app = make_app("main", [DEMO_PATH], tmp_path)
    async with app.run_test(size=(120, 34)) as pilot:
        await settle(pilot)
        rows = {row.key: row for row in app.screen.query_one(TensorTable).rows}
        nan = rows["model.layers.1.mlp.w2.weight"]  # NONFINITE (error) and FP16_OVERFLOW (warning): the worst shows
        assert nan.cells[0] == "model.layers.1.mlp.w2.weight ✗" and nan.styles[0] == "bold $ck-error"
        overflow = rows["model.layers.0.attn.wo.weight"]
        assert overflow.cells[0].endswith(" !") and overflow.styles[0] == "bold $ck-warning"
        assert rows["model.norm.weight"].cells[0] == "model.norm.weight"


async def test_the_bar_covers_the_whole_file_and_findings_get_room(tmp_path):
    app = make_app("main", [DEMO_PATH], tmp_path)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(pilot)
        bar = app.screen.query_one(GroupBar)
        anatomy = bar.anatomy
        rest = anatomy.file_bytes - anatomy.storage_bytes
        assert rest == 9_214
        lines = str(bar.render()).splitlines()
        assert lines[1].startswith("optimizer share 66.1%") and "░ not tensors 9.0 KiB" in lines[1]
        drawn = lines[0].count("░")
        assert abs(drawn - len(lines[0]) * rest / anatomy.file_bytes) <= 1 and drawn > 0
        panel = app.screen.query_one(FindingsPanel)
        assert panel.size.width > 40  # the findings take a share of a wide screen, not 40 columns
        assert panel.max_scroll_y == 0  # every finding in view, no scrolling
