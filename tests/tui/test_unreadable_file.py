"""One file the user cannot read (mode 0600, owned by someone else) does not blank the folder view: it is
listed as unreadable, with the reason, beside the others; `last-good` still answers for the folder.

The suite runs as root, who reads any file: these tests become `nobody` (effective uid 65534, restored
after) so that the kernel refuses the open with a real EACCES, as it does for a user who is not root."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckinspect.tui.app import create_app
from ckinspect.tui.widgets.virtual_table import VirtualTable
from tests.analysis.runs.saves import save
from tests.tui.apps import settle

NOBODY = 65534
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")


@contextlib.contextmanager
def as_nobody() -> Iterator[None]:
    os.setegid(NOBODY)
    os.seteuid(NOBODY)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


@pytest.fixture
def folder() -> Iterator[Path]:
    """Saves at steps 10, 20, 30 in a folder `nobody` may list; step 20's file is root's own, mode 0600."""
    root = Path(tempfile.mkdtemp(prefix="ckinspect-unreadable-"))  # not under pytest's 0700 tmp folders
    try:
        root.chmod(0o755)
        for step in (10, 20, 30):
            path = save(root / f"ckpt-{step:04d}.pt", step)
            path.chmod(0o644)
        (root / "ckpt-0020.pt").chmod(0o600)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_file_really_is_unreadable_for_nobody(folder):
    with as_nobody(), pytest.raises(PermissionError):
        (folder / "ckpt-0020.pt").open("rb")


async def test_the_folder_view_lists_the_others_and_names_the_unreadable_one(folder):
    app = create_app("main", [folder], cursor_blink=False, quick=True)
    with as_nobody():
        async with app.run_test(size=(120, 30)) as pilot:
            await settle(pilot)
            table = app.screen.query_one(VirtualTable)
            cells = {Path(row.key).name: row.cells for row in table.rows}
            summary = str(app.screen.query_one("#folder-summary").render())
    assert "failed" not in summary, summary
    assert set(cells) == {"ckpt-0010.pt", "ckpt-0020.pt", "ckpt-0030.pt"}
    assert cells["ckpt-0010.pt"][-1] != "unreadable" and cells["ckpt-0030.pt"][-1] != "unreadable"
    assert "unreadable" in cells["ckpt-0020.pt"] or "cannot read" in " ".join(cells["ckpt-0020.pt"])


def test_last_good_answers_for_the_folder(folder, run_cli):
    with as_nobody():
        result = run_cli("last-good", folder, "--quick")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(folder / "ckpt-0030.pt")
