"""The README's screenshots are the TUI as it is: regenerated here, they come out the same as the ones
committed (`python docs/make_screenshots.py` regenerates them after a change to the screens)."""

from __future__ import annotations

import asyncio
import importlib.util
import re

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def _make_screenshots():
    spec = importlib.util.spec_from_file_location("make_screenshots", REPO / "docs" / "make_screenshots.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _comparable(svg: str) -> str:
    return re.sub(r"terminal-\d+", "terminal-N", svg)  # a hash of the content, in every class name


@pytest.mark.parametrize("name", ["inspect", "diff"])
def test_the_readme_screenshot_is_the_current_tui(name, tmp_path, monkeypatch):
    shots = _make_screenshots()
    monkeypatch.chdir(REPO)  # the paths on screen are relative to the repository, as the script runs
    assert f"docs/screenshots/{name}.svg" in (REPO / "README.md").read_text(encoding="utf-8")
    command, paths, select = shots.SHOTS[name]
    made = asyncio.run(shots.shoot(name, command, paths, select, tmp_path))
    committed = (REPO / "docs" / "screenshots" / f"{name}.svg").read_text(encoding="utf-8")
    assert _comparable(made.read_text(encoding="utf-8")) == _comparable(committed), (
        f"docs/screenshots/{name}.svg is stale: run `python docs/make_screenshots.py`"
    )
