"""What a new user can find without the source (issue 30, point 8): the footer shows more keys as the
terminal widens and never cuts one off; a screen opened from another says "esc Back" and `q` backs out
there; help is one cheap widget that starts with the current screen's keys; every palette entry of a
key names it; the diff file picker completes paths with Tab."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Footer, Input, OptionList
from textual.widgets._footer import FooterKey

from ckinspect.tui.app import create_app
from ckinspect.tui.screens.folder import FolderScreen
from ckinspect.tui.screens.help import HelpScreen
from ckinspect.tui.screens.inspect import InspectScreen
from ckinspect.tui.screens.metadata import MetadataScreen
from ckinspect.tui.screens.pick_file import PickFileScreen
from tests.tui.apps import demo_backend, make_app, settle
from tests.tui.fixtures import DEMO_B_PATH, DEMO_PATH
from tests.tui.test_help import assert_footer_fits


def footer_keys(app) -> list[tuple[str, str]]:
    """(key shown, description) left of the palette key, in order."""
    footer = app.screen.query_one(Footer)
    keys = sorted(footer.query(FooterKey), key=lambda k: k.region.x)
    return [(k.key_display, k.description) for k in keys if "-command-palette" not in k.classes]


async def test_the_footer_shows_more_keys_as_the_terminal_widens(tmp_path):
    app = make_app("main", [DEMO_PATH], tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        narrow = footer_keys(app)
        assert_footer_fits(app)
        await pilot.resize_terminal(200, 40)
        await settle(pilot)
        wide = footer_keys(app)
        assert_footer_fits(app)
        assert set(narrow) < set(wide), (narrow, wide)
        assert {"Values", "Findings", "Drift", "Export"} <= {d for _, d in wide} - {d for _, d in narrow}
        await pilot.resize_terminal(80, 24)
        await settle(pilot)
        assert footer_keys(app) == narrow  # narrower again: the extra keys go, nothing is cut off


async def test_a_screen_opened_from_the_folder_view_says_esc_back_and_q_backs_out(tmp_path):
    app = create_app("main", [DEMO_PATH, DEMO_B_PATH], backend=demo_backend(tmp_path), cursor_blink=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, FolderScreen)
        assert ("esc", "Back") not in footer_keys(app) and ("q", "Quit") in footer_keys(app)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, InspectScreen)
        keys = footer_keys(app)
        assert keys[0] == ("esc", "Back"), keys
        assert ("q", "Quit") not in keys  # q backs out here
        assert_footer_fits_without_quit(app)
        await pilot.press("m")
        await settle(pilot)
        assert isinstance(app.screen, MetadataScreen) and footer_keys(app)[0] == ("esc", "Back")
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, InspectScreen) and not app._exit
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, FolderScreen) and not app._exit
        await pilot.press("q")
        await pilot.pause()
        assert app._exit


def assert_footer_fits_without_quit(app) -> None:
    footer = app.screen.query_one(Footer)
    palette = max(k.region.x for k in footer.query(FooterKey))
    shown = [k for k in footer.query(FooterKey) if k.region.x < palette]
    assert all(k.region.right <= palette for k in shown), [(k.description, k.region) for k in shown]


async def test_help_is_one_widget_and_starts_with_this_screens_keys(tmp_path):
    app = make_app("diff", [DEMO_PATH, DEMO_B_PATH], tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        widgets = list(app.screen.walk_children())
        assert len(widgets) <= 3, widgets  # Textual's Markdown made ~130 widgets: most of a second to open
        lines = [line.text for line in app.screen.query_one("#help-text").render_lines(app.screen.region)[:3]]
        first = next(line.strip() for line in lines if line.strip())
        assert first == "Keys on this screen (diff)", lines
        assert "Diffs only" in "\n".join(
            s.text for s in app.screen.query_one("#help-text").render_lines(app.screen.region)[:8]
        )


@pytest.mark.parametrize("command", ["main", "diff", "drift"])
async def test_every_palette_entry_of_a_key_names_the_key(tmp_path, command):
    paths = [DEMO_PATH, DEMO_B_PATH] if command == "diff" else [DEMO_PATH]
    app = make_app(command, paths, tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        commands = {c.title: c.help for c in app.get_system_commands(app.screen)}
        screen = app.screen
        for binding in [*screen.BINDINGS, *app.BINDINGS]:
            if not binding.description or binding.action in ("command_palette", "back"):
                continue
            title = next(t for t in commands if t.lower().endswith(binding.description.lower()))
            shown = binding.key_display or app.get_key_display(binding)
            assert commands[title].startswith(f"key {shown}"), (title, commands[title])
        assert commands["Quit"].startswith("key q")


def test_complete_path_extends_as_far_as_the_matches_agree(tmp_path, monkeypatch):
    from ckinspect.tui.screens.pick_file import complete_path

    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "step_30.pth").write_bytes(b"")
    (tmp_path / "runs" / "step_60.pth").write_bytes(b"")
    (tmp_path / "runs" / ".hidden").write_bytes(b"")
    (tmp_path / "readme.txt").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    assert complete_path("ru") == ("runs/", [Path("runs")])
    assert complete_path("runs/") == ("runs/step_", [Path("runs/step_30.pth"), Path("runs/step_60.pth")])
    assert complete_path("runs/step_6") == ("runs/step_60.pth", [Path("runs/step_60.pth")])
    assert complete_path("runs/.h") == ("runs/.hidden", [Path("runs/.hidden")])
    assert complete_path("nothing/x") == ("nothing/x", [])
    assert complete_path(f"{tmp_path}/rea") == (f"{tmp_path}/readme.txt", [tmp_path / "readme.txt"])


async def test_tab_completes_the_path_in_the_diff_file_picker(tmp_path, monkeypatch):
    (tmp_path / "other").mkdir()
    for step in (10, 20):
        (tmp_path / "other" / f"ckpt_{step}.pth").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    app = make_app("main", [DEMO_PATH], tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("d")
        await settle(pilot)
        assert isinstance(app.screen, PickFileScreen)
        await pilot.press("o", "t", "tab")
        await pilot.pause()
        box = app.screen.query_one(Input)
        assert box.value == "other/" and box.has_focus
        await pilot.press("tab")
        await pilot.pause()
        assert box.value == "other/ckpt_" and box.has_focus
        listed = [str(o.prompt) for o in app.screen.query_one(OptionList).options]
        assert listed == ["other/ckpt_10.pth", "other/ckpt_20.pth"]
        await pilot.press("2", "tab")
        await pilot.pause()
        assert box.value == "other/ckpt_20.pth"
