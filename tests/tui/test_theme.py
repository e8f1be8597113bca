"""Status text is readable in both themes: WCAG contrast measured from the themes' actual colours."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from textual.color import Color

from ckinspect.tui.app import THEMES, CkinspectApp, ckinspect_theme
from ckinspect.tui.widgets.palette import GROUP_COLOURS, SEVERITY_COLOURS, STATUS_COLOURS
from tests.tui.apps import make_app
from tests.tui.fixtures import DEMO_PATH

TUI = Path(__file__).parents[2] / "ckinspect" / "tui"


def luminance(colour: Color) -> float:
    def channel(value: int) -> float:
        x = value / 255
        return x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(colour.r) + 0.7152 * channel(colour.g) + 0.0722 * channel(colour.b)


def contrast(fg: Color, bg: Color) -> float:
    hi, lo = sorted((luminance(fg), luminance(bg)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def theme_colours(name: str) -> dict[str, Color]:
    theme = ckinspect_theme(name)
    variables = {**theme.to_color_system().generate(), **theme.variables}  # as App.get_css_variables builds them
    out = {}
    for key, value in variables.items():
        try:
            out[key] = Color.parse(value)
        except Exception:  # text styles (bold), "auto 87%" and the like are no colours
            continue
    return out


def backgrounds(c: dict[str, Color]) -> dict[str, Color]:
    """Where status text is drawn: tables (plain and striped rows), title lines, summary lines, the footer."""
    return {
        "surface": c["surface"],
        "striped row": c["surface"].blend(c["surface-lighten-1"], 0.5),
        "panel": c["panel"],
        "summary line": c["surface"] + c["boost"],
        "footer": c["footer-background"],
    }


STATUS_VARIABLES = sorted(
    {v[1:] for v in (*GROUP_COLOURS.values(), *SEVERITY_COLOURS.values(), *STATUS_COLOURS.values()) if v}
)


@pytest.mark.parametrize("theme", THEMES)
def test_status_colours_have_at_least_4_5_to_1_contrast(theme):
    c = theme_colours(theme)
    worst = min((contrast(c[var], bg), var, where) for var in STATUS_VARIABLES for where, bg in backgrounds(c).items())
    assert worst[0] >= 4.5, worst


@pytest.mark.parametrize("theme", THEMES)
def test_footer_keys_and_text_have_at_least_4_5_to_1_contrast(theme):
    c = theme_colours(theme)
    assert contrast(c["footer-key-foreground"], c["footer-background"]) >= 4.5
    assert contrast(c["foreground"], c["surface"]) >= 4.5


def test_no_hex_colour_in_the_tui_python_code():
    """Colours come from theme variables; only the palette defines their values per theme."""
    offenders = [
        f"{path.name}:{n}"
        for path in TUI.rglob("*.py")
        if path.name != "palette.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"#[0-9a-fA-F]{6}\b", line)
    ]
    assert offenders == []


async def test_rows_take_the_light_themes_colours(tmp_path):
    app: CkinspectApp = make_app("main", [DEMO_PATH], tmp_path, theme="ckinspect-light")
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        table = app.screen.query_one("#tensors")
        table.sort_by("group")  # model rows first: the first row under the cursor-less second line

        def group_colour() -> str:
            cells = [s for s in table.render_line(2) if s.text.strip() == "model"]
            return cells[0].style.color.triplet.hex.upper()

        assert group_colour() == "#0B4F9C"
        await pilot.press("t")
        await pilot.pause()
        assert app.theme == "ckinspect-dark" and group_colour() == "#7AB2FF"


def drawn_contrast(strip, text: str) -> float:
    """Contrast of the segment that draws `text`, from the colours Textual resolved for it."""
    for segment in strip:
        if text in segment.text and segment.style is not None:
            fg, bg = segment.style.color, segment.style.bgcolor
            assert fg is not None and bg is not None, segment
            as_colour = [Color(*c.get_truecolor()) for c in (fg, bg)]
            return contrast(*as_colour)
    raise AssertionError(f"{text!r} not drawn in {''.join(s.text for s in strip)!r}")


@pytest.mark.parametrize("theme", THEMES)
async def test_the_sorted_header_and_the_findings_title_are_readable(tmp_path, theme):
    """As drawn: the sorted column's header (was 1.27:1 in the light theme) and the findings panel's title
    with its count (was 1.37:1)."""
    from textual.geometry import Region

    app: CkinspectApp = make_app("main", [DEMO_PATH], tmp_path, theme=theme)
    async with app.run_test(size=(120, 34)) as pilot:
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("s")
        await pilot.pause()
        table = app.screen.query_one("#tensors")
        assert drawn_contrast(table.render_line(0), "▼") >= 4.5
        panel = app.screen.query_one("#findings")
        (top,) = panel.render_lines(Region(0, 0, panel.size.width + 2, 1))
        assert drawn_contrast(top, "findings") >= 4.5


async def test_the_theme_chosen_is_remembered_in_the_users_config_folder(tmp_path, monkeypatch):
    from ckinspect.tui.app import create_app

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    first = create_app("main", [DEMO_PATH], backend=make_app("main", [DEMO_PATH], tmp_path).backend,
                       cursor_blink=False, remember_theme=True)  # fmt: skip
    assert first.theme == "ckinspect-dark"
    async with first.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("t")
        await pilot.pause()
    assert (tmp_path / "config" / "ckinspect" / "tui.json").read_text() == '{"theme": "ckinspect-light"}\n'
    again = create_app("main", [DEMO_PATH], backend=first.backend, cursor_blink=False, remember_theme=True)
    assert again.theme == "ckinspect-light"
