"""What the folder view shows agrees with what opening a file shows, before and after a repair."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Input, Static

from ckinspect.model import Finding
from ckinspect.tui.app import create_app
from ckinspect.tui.core import ScanOutcome
from ckinspect.tui.screens.folder import FolderScreen
from ckinspect.tui.screens.inspect import InspectScreen
from ckinspect.tui.widgets.findings_panel import FindingsPanel
from ckinspect.tui.widgets.virtual_table import VirtualTable
from tests.tui.apps import FixtureBackend, demo_backend, settle
from tests.tui.fixtures import DEMO_B_PATH, DEMO_PATH

SIZE = (100, 30)
NAN = Finding("NONFINITE", "model.norm.weight: 3 NaN", "model.norm.weight")


class ScanningBackend(FixtureBackend):
    """The value scan finds a NaN in B, which its structure alone cannot show."""

    def __init__(self, base: FixtureBackend) -> None:
        super().__init__(base.checkpoints)
        self.scanned: list[Path] = []

    def scan(self, ckpt, progress=None) -> ScanOutcome:
        self.scanned.append(Path(ckpt.path))
        return ScanOutcome([NAN] if ckpt.path == DEMO_B_PATH else [], {})


def cells(app) -> dict[str, tuple[str, ...]]:
    return {row.key: row.cells for row in app.screen.query_one(VirtualTable).rows}


async def test_folder_badges_include_the_value_scan_and_opening_agrees(tmp_path):
    backend = ScanningBackend(demo_backend(tmp_path))
    app = create_app("main", [DEMO_PATH, DEMO_B_PATH], backend=backend, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, FolderScreen)
        assert cells(app)[str(DEMO_B_PATH)][4] == "1E"
        assert "not scanned" not in str(app.screen.query_one("#folder-summary", Static).render())
        await pilot.press("down", "enter")
        await settle(pilot)
        assert isinstance(app.screen, InspectScreen)
        panel = app.screen.query_one(FindingsPanel)
        assert panel.border_title == "findings 1E"
        assert backend.scanned == [DEMO_PATH, DEMO_B_PATH]  # opening did not scan it again


async def test_quick_folder_badges_say_values_were_not_scanned(tmp_path):
    backend = ScanningBackend(demo_backend(tmp_path))
    app = create_app("main", [DEMO_PATH, DEMO_B_PATH], backend=backend, cursor_blink=False, quick=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert cells(app)[str(DEMO_B_PATH)][4] == "ok*"
        assert cells(app)[str(DEMO_PATH)][4] == "1E 2W 1I*"
        summary = str(app.screen.query_one("#folder-summary", Static).render())
        assert "* structure only (--quick): values not scanned" in summary
        assert backend.scanned == []


async def test_a_repair_from_the_folder_view_refreshes_the_list_and_the_files(tmp_path):
    from ckinspect.tui.screens.repair import RepairScreen

    backend = ScanningBackend(demo_backend(tmp_path))
    app = create_app("main", [DEMO_PATH, DEMO_B_PATH], backend=backend, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert cells(app)[str(DEMO_PATH)][4] == "1E 2W 1I"
        await pilot.press("R")
        await settle(pilot)
        assert isinstance(app.screen, RepairScreen)
        assert "dry run until you apply" in str(app.screen.query_one("#repair-title").render())
        await pilot.press("a", "y")
        await settle(pilot)
        assert len(backend.applied) == 1
        title = str(app.screen.query_one("#repair-title").render())
        assert "dry run" not in title and "applied: u undoes it" in title
        # the repair removed the leftover: reading the file again gives a checkpoint without the finding
        old = backend.checkpoints[DEMO_PATH]
        backend.checkpoints[DEMO_PATH] = old.replace(findings=[f for f in old.findings if f.code != "LEFTOVER_TMP"])
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, FolderScreen)
        assert cells(app)[str(DEMO_PATH)][4] == "1E 1W 1I"
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, InspectScreen) and app.screen.target == DEMO_PATH
        assert "LEFTOVER_TMP" not in {f.code for f in app.screen.query_one(FindingsPanel).findings}


class SlowBackend(FixtureBackend):
    """Reading waits until the test lets it go (or fails, for an unreadable file)."""

    def __init__(self, base: FixtureBackend, fail: bool = False) -> None:
        import threading

        super().__init__(base.checkpoints)
        self.release = threading.Event()
        self.fail = fail

    def load(self, target):
        if self.fail:
            raise OSError("unexpected end of data")
        self.release.wait(10)
        return super().load(target)


@pytest.mark.parametrize("command", ["main", "diff"])
async def test_q_quits_while_a_file_is_still_loading(tmp_path, command):
    backend = SlowBackend(demo_backend(tmp_path))
    paths = [DEMO_PATH] if command == "main" else [DEMO_PATH, DEMO_B_PATH]
    app = create_app(command, paths, backend=backend, cursor_blink=False)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            assert not isinstance(app.focused, Input)
            await pilot.press("q")
            await pilot.pause()
            assert [i.value for i in app.screen.query(Input)] == [""]
            assert app._exit
    finally:
        backend.release.set()


@pytest.mark.parametrize("command", ["main", "diff"])
async def test_q_quits_on_an_unreadable_file(tmp_path, command):
    backend = SlowBackend(demo_backend(tmp_path), fail=True)
    paths = [DEMO_PATH] if command == "main" else [DEMO_PATH, DEMO_B_PATH]
    app = create_app(command, paths, backend=backend, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert "unexpected end of data" in str(app.screen.query_one("#loading-label, #summary").render())
        await pilot.press("q")
        await pilot.pause()
        assert [i.value for i in app.screen.query(Input)] == [""]
        assert app._exit
