"""The TUI on URLs: `ckinspect https://host/x.pt` opens the inspect screen over range reads, `URL/` the folder
screen over the prefix's listing, `diff` takes a URL on either side, and repair (which rewrites files beside
the checkpoint) is refused with one line."""

from __future__ import annotations

import shutil

import pytest

from ckinspect.tui.app import create_app
from ckinspect.tui.screens.diff import DiffScreen
from ckinspect.tui.screens.inspect import InspectScreen
from ckinspect.tui.widgets.tensor_table import TensorTable
from tests.conftest import REPO
from tests.helpers.remote_servers import range_server
from tests.tui.apps import settle

pytestmark = pytest.mark.remote

RESUME = "stopped-30/tiny_resume.pth"


@pytest.fixture
def server(samples_server):
    return samples_server


async def test_a_url_opens_the_inspect_screen_and_refuses_repair(server):
    url = f"{server.url}/{RESUME}"
    app = create_app("main", [url], cursor_blink=False)
    async with app.run_test(size=(110, 30)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, InspectScreen) and str(screen.target) == url
        names = screen.query_one(TensorTable).visible_keys()
        assert len(names) == 83 and "model.tok_embeddings.weight" in names
        depth = len(app.screen_stack)
        await pilot.press("R")
        await pilot.pause()
        assert len(app.screen_stack) == depth  # no repair screen over a remote file
        messages = [str(n.message) for n in app._notifications]
        assert messages == [f"{url}: repair works on local folders only; a remote path is read-only here"]


async def test_diff_of_a_url_and_a_local_file(server):
    app = create_app(
        "diff", [f"{server.url}/{RESUME}", REPO / "samples" / "stopped-30" / "tiny.pth"], cursor_blink=False
    )
    async with app.run_test(size=(110, 30)) as pilot:
        screen = app.screen
        for _ in range(50):  # the comparison starts once both sides are read: a worker after the loader
            await settle(pilot)
            if screen.result is not None:
                break
        assert isinstance(screen, DiffScreen) and screen.result is not None
        b_name = {p.name: p.b.name for p in screen.pairs if p.b is not None}
        assert b_name["model.tok_embeddings.weight"] == "tok_embeddings.weight"
        assert "DIFFERENT" in str(screen.query_one("#summary").render())


async def test_a_missing_url_says_so_on_the_screen_without_a_traceback(server):
    url = f"{server.url}/gone.pth"
    app = create_app("main", [url], cursor_blink=False)
    async with app.run_test(size=(110, 30)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, InspectScreen)
        label = app.screen.query_one("#loading-label")
        for _ in range(600):  # the worker's error reaches the label by a message, after the worker ended
            if "reading" not in str(label.render()):
                break
            await pilot.pause(0.1)
        shown = str(label.render())
        assert "not found (no such object)" in shown, shown


def _rows(app) -> dict[str, tuple[str, ...]]:
    from ckinspect.tui.widgets.virtual_table import VirtualTable

    return {row.key: row.cells for row in app.screen.query_one(VirtualTable).rows}


async def _folder_rows(target: str) -> dict[str, tuple[str, ...]]:
    from ckinspect.tui.screens.folder import FolderScreen

    app = create_app("main", [target], cursor_blink=False, quick=True)
    async with app.run_test(size=(110, 30)) as pilot:
        for _ in range(50):  # each file is read by a worker after the listing
            await settle(pilot)
            rows = _rows(app)
            if rows and all(cells[1] != "…" and cells[4] for cells in rows.values()):
                break
        assert isinstance(app.screen, FolderScreen)
        return _rows(app)


async def test_a_url_prefix_opens_the_folder_screen_with_the_local_folder_rows(server):
    """`ckinspect URL/` (a trailing slash): the folder screen lists the prefix as it lists the folder on disk."""
    local = await _folder_rows(str(REPO / "samples" / "interrupted"))
    remote = await _folder_rows(f"{server.url}/interrupted/")
    assert sorted(remote) == [f"{server.url}/interrupted/tiny.pth", f"{server.url}/interrupted/tiny_resume.pth"]
    assert {key.rsplit("/", 1)[1]: cells for key, cells in remote.items()} == {
        key.rsplit("/", 1)[1]: cells for key, cells in local.items()
    }


async def test_a_prefix_of_dcp_saves_opens_the_folder_screen_with_the_local_rows(ckpts, tmp_path):
    """DCP saves under a prefix (read by range requests) fill the folder screen as the folder on disk does:
    a whole save, and one whose data file is gone."""
    run = tmp_path / "dcp"
    for name in ("step-2", "step-4"):
        shutil.copytree(ckpts["dcp"], run / name)
    next((run / "step-4").glob("*.distcp")).unlink()
    local = await _folder_rows(str(run))
    with range_server(tmp_path) as server:
        remote = await _folder_rows(f"{server.url}/dcp/")
    assert sorted(remote) == [f"{server.url}/dcp/step-2", f"{server.url}/dcp/step-4"]
    # a plain web server's index gives no times: the time column ("-") is the one difference README names
    relative = {key.rsplit("/", 1)[1]: cells[:4] + cells[5:] for key, cells in remote.items()}
    assert relative == {key.rsplit("/", 1)[1]: cells[:4] + cells[5:] for key, cells in local.items()}
    assert relative["step-2"][0] == "★" and relative["step-2"][-1] == "good"
    assert relative["step-4"][-1] == "incomplete"  # its data file is gone
