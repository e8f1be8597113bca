"""Colours come from the theme: widgets name a theme variable (`$ck-error`), never a hex value, so that
each theme, light included, can keep status text readable (tests/tui/test_theme.py measures >= 4.5:1).

`THEME_VARIABLES` holds each theme's values; `themed` turns rich Text styled with variables into
Textual Content, which resolves them when drawn (and again when the theme changes).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from rich.style import Style
from rich.text import Text
from textual.content import Content, Span

from ckinspect.vocab import SAME_STRUCTURE

GROUP_COLOURS = {"model": "$ck-model", "optimizer": "$ck-optimizer", "rng": "$ck-rng", "other": "$ck-other"}
SEVERITY_COLOURS = {"error": "$ck-error", "warning": "$ck-warning", "info": "$ck-info", "ok": "$ck-ok"}
STATUS_COLOURS = {
    "same": "",
    SAME_STRUCTURE: "",
    "changed": "$ck-warning",
    "only in A": "$ck-error",
    "only in B": "$ck-ok",
    "shape changed": "$ck-reshaped",
    "dtype changed": "$ck-reshaped",
    "comparing": "",
    "unreadable": "$ck-error",
}

# Contrast >= 4.5:1 on each theme's surface, panel, striped rows and footer (WCAG AA for text).
THEME_VARIABLES = {
    "ckinspect-dark": {
        "ck-error": "#FF7B85",
        "ck-warning": "#F2B84B",
        "ck-ok": "#5BD08E",
        "ck-info": "#7AB2FF",
        "ck-model": "#7AB2FF",
        "ck-optimizer": "#F2B84B",
        "ck-rng": "#5BD08E",
        "ck-other": "#C9A6F5",
        "ck-reshaped": "#F07CC0",
        "footer-key-foreground": "#FFA62B",
    },
    "ckinspect-light": {
        "ck-error": "#A3142B",
        "ck-warning": "#7A4300",
        "ck-ok": "#1A6334",
        "ck-info": "#0B4F9C",
        "ck-model": "#0B4F9C",
        "ck-optimizer": "#7A4300",
        "ck-rng": "#1A6334",
        "ck-other": "#6B3FA0",
        "ck-reshaped": "#9C1F6E",
        "footer-key-foreground": "#004F8C",
    },
}
BASE_THEMES = {"ckinspect-dark": "textual-dark", "ckinspect-light": "textual-light"}


def _style_text(style: Any) -> str:
    return style if isinstance(style, str) else str(style) if isinstance(style, Style) else ""


def themed(text: Text | str) -> Content:
    """rich Text whose styles may name theme variables, as Content (resolved when drawn)."""
    if isinstance(text, str):
        return Content(text)
    spans = [Span(s.start, s.end, _style_text(s.style)) for s in text.spans if _style_text(s.style)]
    base = _style_text(text.style)
    if base:
        spans.insert(0, Span(0, len(text.plain), base))
    return Content(text.plain, spans)


@lru_cache(maxsize=512)
def resolve(style: str, variables: tuple[tuple[str, str], ...]) -> Style:
    """A style string naming theme variables (`bold $ck-warning`) as a rich Style of this theme."""
    lookup = dict(variables)
    words = [lookup.get(word[1:], "") if word.startswith("$") else word for word in style.split()]
    return Style.parse(" ".join(w for w in words if w))
