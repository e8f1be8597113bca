"""The drift screen: "worst first" is the drift report's order (one definition, analysis.drift.worst_first),
and sorting is one key per column, as on the inspect screen (the same key again reverses), not `s` cycling."""

from __future__ import annotations

from pathlib import Path

from ckinspect.analysis.drift import weight_drift
from ckinspect.io.remote import as_path
from ckinspect.report.drift_report import _worst
from ckinspect.tui.app import create_app
from ckinspect.tui.widgets.virtual_table import VirtualTable
from tests.tui.apps import settle

SAMPLE = Path(__file__).parents[2] / "samples" / "resumed-60" / "tiny_resume.pth"


async def test_worst_first_is_the_reports_order_and_each_key_sorts_one_column():
    app = create_app("drift", [SAMPLE], cursor_blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(VirtualTable)
        shown = table.visible_keys()
        drifts = weight_drift(app.screen.ckpt)
        report = [w["name"] for w in _worst({"weights": [d.to_json() for d in drifts]})]
        assert shown[: len(report)] == report  # the CLI's worst and the TUI's worst are the same tensors
        await pilot.press("f")
        assert (table.sort_column, table.sort_reverse) == ("fp16_max_abs", True)
        await pilot.press("f")
        assert (table.sort_column, table.sort_reverse) == ("fp16_max_abs", False)
        await pilot.press("n")
        assert (table.sort_column, table.sort_reverse) == ("name", False)
        await pilot.press("s")  # no longer cycles through the columns
        assert table.sort_column == "name"
        await pilot.press("w")
        assert table.visible_keys() == shown
    assert as_path(SAMPLE) == SAMPLE
