"""Names from a file never reach the screen as control sequences: every screen draws them escaped."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from ckinspect.tui.app import create_app

SIZE = (140, 40)
HOSTILE = ["w\x1b]0;pwned\x07", "w\x1b[2J\x1b[1;1H", "w\x9b2J", "w\u202egpj.exe"]
RAW = ("\x1b", "\x07", "\x9b", "\u202e")

pytestmark = pytest.mark.slow  # five real apps over real files: ~15 s each on 2 busy cores


def _hostile_folder(tmp_path):
    folder = tmp_path / "run\x1b[31m"
    folder.mkdir()
    path = folder / "names\x1b]0;t\x07.safetensors"
    save_file({name: torch.ones(2) for name in HOSTILE}, path)
    other = folder / "other.safetensors"
    save_file({"w": torch.ones(2)}, other)
    torch.save({"w": torch.ones(2), "step": 1}, folder / "r\x1b[5m.pt")
    (folder / "r\x1b[5m.pt.tmp").write_bytes((folder / "r\x1b[5m.pt").read_bytes()[:100])
    return folder, path, other


@pytest.mark.parametrize("command", ["main", "diff", "drift", "folder", "repair"])
async def test_every_screen_draws_hostile_names_escaped(tmp_path, command):
    folder, path, other = _hostile_folder(tmp_path)
    paths = {"main": [path], "diff": [path, other], "drift": [path], "folder": [folder], "repair": [folder]}[command]
    kind = command if command in ("diff", "drift") else "main"
    app = create_app(kind, paths, theme="textual-dark", cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        if command == "main":
            await pilot.press("g")  # the module tree draws names too
            await pilot.pause()
        if command == "repair":
            await pilot.press("R")
            await pilot.pause()
            await app.workers.wait_for_complete()
            await pilot.pause()
        shown = app.export_screenshot()  # every character the screen draws
    assert not any(c in shown for c in RAW), command
    assert "\\x1b" in shown, command  # the names are there, made visible
