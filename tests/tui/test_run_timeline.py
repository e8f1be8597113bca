"""The folder screen on a run: a timeline of its checkpoints with each one's verdict, the last good one marked."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ckinspect.analysis.runs.model import Run, RunCheckpoint
from ckinspect.model import Finding
from ckinspect.tui.app import create_app
from ckinspect.tui.screens.folder import FolderScreen
from ckinspect.tui.screens.inspect import InspectScreen
from ckinspect.tui.widgets.virtual_table import VirtualTable
from tests.analysis.runs.test_runs import ds_tag
from tests.tui.apps import PausedBackend, demo_backend, settle


async def test_a_deepspeed_run_as_a_timeline(tmp_path):
    run = tmp_path / "ds"
    for step in (10, 20, 30):
        ds_tag(run, step)
    (run / "global_step30" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    app = create_app("main", [run], cursor_blink=False)
    async with app.run_test(size=(110, 30)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, FolderScreen)
        table = screen.query_one(VirtualTable)
        cells = [row.cells for row in table.rows]
        assert [(c[0], c[1], c[2], c[3], c[6]) for c in cells] == [
            ("", "global_step10", "deepspeed", "10", "good"),
            ("★", "global_step20", "deepspeed", "20", "good"),
            ("", "global_step30", "deepspeed", "30", "incomplete"),
        ]
        # the cursor starts on the last good checkpoint; the pane below says why the newest is not
        assert table.current_row.cells[1] == "global_step20"
        await pilot.press("down")
        reasons = str(screen.query_one("#run-reasons").render())
        assert "global_step30: incomplete" in reasons
        assert "MISSING_PARTS: zero_pp_rank_1_mp_rank_00_optim_states.pt is missing (dp world size 2" in reasons
        await pilot.press("up", "enter")
        await settle(pilot)
        assert isinstance(app.screen, InspectScreen)
        assert app.screen.target == run / "global_step20" / "mp_rank_00_model_states.pt"
        await pilot.press("escape")
        assert isinstance(app.screen, FolderScreen)


def fixture_run() -> Run:
    """A run with fixed relative paths and times: nothing about this machine is drawn."""
    root = Path("runs/hf")
    t0 = 1_780_000_000.0
    checkpoints = []
    for index, (step, verdict, reasons) in enumerate(
        [
            (500, "good", []),
            (1000, "good", []),
            (1500, "incomplete", ["MISSING_PARTS: rng_state_3.pth missing (rng_state_4.pth is there)"]),
            (2000, "damaged", ["CORRUPT: model.safetensors: buffer cut short: 0 of 53248 bytes"]),
        ]
    ):
        ckpt = RunCheckpoint(root / f"checkpoint-{step}", "hf-trainer", step, verdict=verdict, reasons=reasons)
        ckpt.time, ckpt.size = t0 + 600 * index, 3_276_800 + index
        ckpt.part(root / f"checkpoint-{step}" / "model.safetensors", "model")
        checkpoints.append(ckpt)
    return Run(root, checkpoints, [Finding("MISSING_PARTS", "hf/latest names tag global_step2500, which is not there")])


@pytest.fixture
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_run_timeline_snapshot(snap_compare, tmp_path, utc):
    backend = demo_backend(tmp_path)
    backend.run = lambda paths, progress: fixture_run()  # type: ignore[method-assign]
    app = create_app("main", [Path("runs/hf"), Path("runs/other")], backend=backend, cursor_blink=False)

    async def run_before(pilot) -> None:
        await settle(pilot)

    assert snap_compare(app, terminal_size=(100, 24), run_before=run_before)


class PausedJudging(PausedBackend):
    """The real backend; judging the run stops after two checkpoints until the test lets it go on."""

    def run(self, paths, progress):
        def pausing(done: int, total: int) -> None:
            progress(done, total)
            if done == 2:
                self.paused.set()
                self.release.wait(60)

        return self.real.run(paths, progress=pausing)


async def test_a_long_run_says_how_many_checkpoints_are_judged(tmp_path):
    """Issue 30, point 5: while a run's checkpoints are judged the folder view says n of N (from
    analysis.runs.judge_run itself), not a bare 'looking for checkpoints…'."""
    import asyncio

    from textual.widgets import Static

    run = tmp_path / "ds"
    for step in (10, 20, 30, 40, 50):
        ds_tag(run, step)
    backend = PausedJudging()
    app = create_app("main", [run], backend=backend, cursor_blink=False)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            summary = app.screen.query_one("#folder-summary", Static)
            for _ in range(600):  # a generous wait (no timing assert) for the second checkpoint to be judged
                if backend.paused.is_set() and "2 of 5" in str(summary.render()):
                    break
                await asyncio.sleep(0.1)
            assert str(summary.render()) == "judging checkpoints: 2 of 5 done…"
            backend.release.set()
            await settle(pilot)
            assert [row.cells[1] for row in app.screen.query_one(VirtualTable).rows] == [
                f"global_step{step}" for step in (10, 20, 30, 40, 50)
            ]
            assert "judging" not in str(summary.render())
    finally:
        backend.release.set()
