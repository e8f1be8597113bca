"""Issue 30, point 5: the first paint of a huge file says what is being read and how many so far (the
readers' own counts, ckinspect.steps), not a bare "reading…" for the ten seconds 200,000 tensors take.

Each test reads a real file through the real readers and pauses the read at one of its steps (a
listener of its own, after the screen's: ckinspect.steps.watching), so the screen is looked at mid-read
without a timing assert; the read then goes on and the rows appear.
"""

from __future__ import annotations

import asyncio
import threading
import warnings
from pathlib import Path

import torch
from textual.widgets import Label, ProgressBar, Static

from ckinspect import steps
from ckinspect.tui.app import create_app
from ckinspect.tui.core import Backend
from ckinspect.tui.widgets.tensor_table import TensorTable
from tests.tui.apps import settle


class PausedRead(Backend):
    """The real backend; a read stops at the first step whose `what` starts with `at` until released."""

    def __init__(self, at: str) -> None:
        super().__init__()
        self.at = at
        self.paused = threading.Event()
        self.release = threading.Event()

    def _pausing(self, what: str, done: int, total: int | None) -> None:
        if what.startswith(self.at) and done and not self.paused.is_set():
            self.paused.set()
            self.release.wait(60)

    def load(self, target: Path):
        with steps.watching(self._pausing):
            return super().load(target)

    def run(self, paths, progress):
        with steps.watching(self._pausing):
            return super().run(paths, progress)


async def wait_for(pilot, backend: PausedRead, shown) -> None:
    for _ in range(600):  # a generous wait (no timing assert) for the read to reach its step
        if backend.paused.is_set() and shown():
            return
        await asyncio.sleep(0.05)


async def test_a_file_of_many_tensors_shows_what_is_read_and_how_many(tmp_path, monkeypatch):
    monkeypatch.setattr(steps, "EVERY", 100)  # 250 tensors stand for 200,000: a count every 100, not 4,096
    path = tmp_path / "many.pt"
    torch.save({f"model.layers.{i}.w": torch.zeros(2) for i in range(250)}, path)
    backend = PausedRead("storages")
    app = create_app("main", [path], backend=backend, cursor_blink=False, quick=True)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            label = app.screen.query_one("#loading-label", Label)
            await wait_for(pilot, backend, lambda: "storages" in str(label.render()))
            assert str(label.render()) == f"reading {path} …\nstorages named by the pickle: 100"
            backend.release.set()
            await settle(pilot)
            assert app.screen.query_one(TensorTable).row_count == 250
    finally:
        backend.release.set()


def dcp_save(folder: Path, entries: int) -> None:
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no process group: DCP says it saves as one process
        dcp.save({f"layers.{i}.w": torch.full((2,), float(i)) for i in range(entries)}, checkpoint_id=str(folder))


async def test_a_big_dcp_folder_shows_its_entries_n_of_n_while_it_is_judged(tmp_path, monkeypatch):
    """`ckinspect FOLDER` on a DCP save: the folder view judges it as a run; meanwhile it says how many
    of its entries are listed, from the DCP reader itself."""
    monkeypatch.setattr(steps, "EVERY", 100)
    folder = tmp_path / "step000030"
    dcp_save(folder, 250)
    backend = PausedRead("entries of")
    app = create_app("main", [folder], backend=backend, cursor_blink=False, quick=True)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            summary = app.screen.query_one("#folder-summary", Static)
            await wait_for(pilot, backend, lambda: "100 of 250" in str(summary.render()))
            assert str(summary.render()) == (
                "judging checkpoints: 0 of 1 done…\nentries of step000030/.metadata: 100 of 250"
            )
            backend.release.set()
            await settle(pilot)
            assert "judging" not in str(summary.render())
    finally:
        backend.release.set()


async def test_the_loading_bar_fills_when_the_reader_knows_the_total(tmp_path, monkeypatch):
    """Opened as a file (its own screen), a DCP folder's listing drives the bar: 100 of 250."""
    monkeypatch.setattr(steps, "EVERY", 100)
    folder = tmp_path / "step000030"
    dcp_save(folder, 250)
    backend = PausedRead("entries of")
    from ckinspect.tui.app import CkinspectApp
    from ckinspect.tui.screens.inspect import InspectScreen

    app = CkinspectApp(InspectScreen(folder), backend=backend, cursor_blink=False, quick=True)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            label = app.screen.query_one("#loading-label", Label)
            await wait_for(pilot, backend, lambda: "100 of 250" in str(label.render()))
            assert str(label.render()).endswith("\nentries of step000030/.metadata: 100 of 250")
            bar = app.screen.query_one("#loading-progress", ProgressBar)
            assert (bar.progress, bar.total) == (100, 250)
            backend.release.set()
            await settle(pilot)
            assert app.screen.query_one(TensorTable).row_count == 250
    finally:
        backend.release.set()
