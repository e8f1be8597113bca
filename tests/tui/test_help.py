"""Help and footer come from the bindings: every key once, as the footer shows it, navigation included;
the footer fits 80 columns; the palette lists each command once; Esc never quits."""

from __future__ import annotations

import pytest
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from ckinspect.tui.screens.help import HelpScreen
from tests.tui.apps import make_app, settle
from tests.tui.fixtures import DEMO_B_PATH, DEMO_PATH

SCREENS = {"main": [DEMO_PATH], "diff": [DEMO_PATH, DEMO_B_PATH], "drift": [DEMO_PATH]}


def assert_footer_fits(app) -> None:
    footer = app.screen.query_one(Footer)
    keys = [k for k in footer.query(FooterKey) if k.description]
    palette = max(k.region.x for k in footer.query(FooterKey))  # ^p Commands, docked right
    shown = [k for k in keys if k.region.x < palette]
    assert shown and all(k.region.right <= palette for k in shown), [(k.description, k.region) for k in shown]
    assert {"Quit", "Help"} <= {k.description for k in shown}


@pytest.mark.parametrize("command", SCREENS)
async def test_footer_escape_and_help_on_each_screen(tmp_path, command):
    """One session per screen (each app start costs about a second of CPU): the footer is never cut off
    at 80 or 120 columns, Esc at the first screen does not quit, and `?` lists each key once as the
    footer shows it, navigation included."""
    app = make_app(command, SCREENS[command], tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert_footer_fits(app)
        await pilot.resize_terminal(120, 24)
        await settle(pilot)
        assert_footer_fits(app)

        await pilot.resize_terminal(100, 30)
        await settle(pilot)
        first = app.screen
        await pilot.press("escape")
        await pilot.pause()
        assert not app._exit and app.screen is first

        await pilot.press("question_mark")
        help_screen = app.screen
        assert isinstance(help_screen, HelpScreen)
        rows = help_screen.key_rows()
        keys = [k for _, shown, _, _ in rows for k in shown.split()]
        assert len(keys) == len(set(keys)), keys
        assert "slash" not in keys and "escape" not in keys and "question_mark" not in keys
        assert {"esc", "↑", "↓", "pgup", "pgdn", "q", "?"} <= set(keys), keys
        sections = {section for section, *_ in rows}
        assert sections == {"this screen", "moving around", "everywhere"}


async def test_the_palette_lists_quit_and_theme_once(tmp_path):
    app = make_app("main", [DEMO_PATH], tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert titles.count("Quit") == 1 and titles.count("Theme") == 1
        assert len(titles) == len(set(titles)), titles
