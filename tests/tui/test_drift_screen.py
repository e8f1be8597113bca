"""The drift screen: "worst first" is the drift report's order (one definition, analysis.drift.worst_first),
and sorting is one key per column, as on the inspect screen (the same key again reverses), not `s` cycling."""

from __future__ import annotations

from pathlib import Path

from ckinspect.analysis.drift import weight_drift
from ckinspect.io.remote import as_path
from ckinspect.report.drift_report import _worst
from ckinspect.tui.app import create_app
from ckinspect.tui.widgets.virtual_table import VirtualTable
from tests.tui.apps import PausedBackend, settle

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


def visible_lines(widget) -> list[str]:
    return [strip.text.rstrip() for strip in widget.render_lines(widget.region.reset_offset)[: widget.region.height]]


async def test_at_80x24_the_bf16_logit_line_is_shown_whole():
    """Title, fp16 and bf16 lines all on screen at 80x24, every `label value` pair whole (a line wraps
    between pairs); the table keeps most of the screen."""
    from ckinspect.tui.screens.drift import _pairs

    app = create_app("drift", [SAMPLE], cursor_blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        logits = app.screen.query_one("#logits")
        shown = "\n".join(visible_lines(logits))
        data = app.screen._shown[0]
        assert data is not None, shown  # the sample's model is known: the logit drift ran
        for label in ("fp16", "bf16"):
            assert f"{label}: max |Δlogit|" in shown, shown
            for pair in _pairs(data[label]):
                assert pair in shown, (pair, shown)
        assert all(len(line) <= 80 for line in shown.splitlines())
        assert app.screen.query_one(VirtualTable).size.height >= 12


class SlowLogits:
    """The real backend, but the model run waits until the test lets it finish."""

    def __init__(self) -> None:
        import threading

        from ckinspect.tui.core import Backend

        self.real = Backend()
        self.release = threading.Event()

    def __getattr__(self, name):
        return getattr(self.real, name)

    def logit_drift(self, ckpt, progress=None):
        self.release.wait(60)
        return self.real.logit_drift(ckpt, progress)


async def test_the_logit_step_says_what_runs_and_for_how_long():
    import asyncio
    import time

    from textual.widgets import Static

    from ckinspect.tui.screens.drift import LOGIT_STEP

    backend = SlowLogits()
    app = create_app("drift", [SAMPLE], backend=backend, cursor_blink=False)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            screen = app.screen
            logits = screen.query_one("#logits", Static)
            deadline = time.monotonic() + 60  # a generous wait for the first tick on a loaded machine
            while not str(logits.render()).endswith(" s"):
                assert time.monotonic() < deadline, str(logits.render())
                await asyncio.sleep(0.1)
            assert str(logits.render()).startswith(LOGIT_STEP + " · ")
            assert screen.query_one(VirtualTable).row_count > 0  # the weight drift is shown meanwhile
            assert screen._ticking is not None
            backend.release.set()
            await settle(pilot)
            assert screen._ticking is None  # the timer stops with the step
            assert "bf16: max |Δlogit|" in str(logits.render())
    finally:
        backend.release.set()


class PausedMidModel(PausedBackend):
    """The real backend; the model run stops after its second block until the test lets it go on."""

    def logit_drift(self, ckpt, progress=None):
        def pausing(done: int, total: int) -> None:
            progress(done, total)
            if done == 2:
                self.paused.set()
                self.release.wait(60)

        return self.real.logit_drift(ckpt, progress=pausing)


async def test_the_logit_step_shows_how_many_blocks_have_run():
    """Issue 30, point 5: the logit step says how far it is (blocks run of the model's blocks), not only for
    how long; the count comes from the model run itself (analysis.blockwise's progress)."""
    import asyncio

    from textual.widgets import Static

    from ckinspect.tui.screens.drift import LOGIT_STEP

    backend = PausedMidModel()
    app = create_app("drift", [SAMPLE], backend=backend, cursor_blink=False)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            logits = app.screen.query_one("#logits", Static)
            for _ in range(600):  # a generous wait (no timing assert) for the model to reach its second block
                if backend.paused.is_set() and " 2 of " in str(logits.render()):
                    break
                await asyncio.sleep(0.1)
            shown = str(logits.render())
            blocks = 2 + 2  # the sample's two layers, the embeddings before them and the head after them
            assert shown.startswith(f"{LOGIT_STEP} · 2 of {blocks} blocks run (50%) · "), shown
            backend.release.set()
            await settle(pilot)
            assert "bf16: max |Δlogit|" in str(logits.render())
            assert app.screen._shown[0]["blocks"] == blocks
    finally:
        backend.release.set()
