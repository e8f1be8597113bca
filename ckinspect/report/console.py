"""One look for every text renderer (`--report`, `diff --report`, `drift --report`): width, colour, tables.

80 columns in files and pipes (COLUMNS honoured), the terminal's width capped at 120 on a TTY; colour
only on a terminal; light tables whose long tensor names fold instead of pushing columns off screen.
Imported only on the text path: the JSON and Markdown renderers never load rich.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import IO, Any

from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

TEXT_WIDTH_MAX = 120  # wider tables are harder to read, not easier
PIPE_WIDTH = 80


def text_width(terminal: bool) -> int:
    """The terminal's width (capped so tables stay readable); 80 in files and pipes unless COLUMNS says."""
    if terminal:
        return min(shutil.get_terminal_size().columns, TEXT_WIDTH_MAX)
    columns = os.environ.get("COLUMNS", "")
    return min(int(columns), TEXT_WIDTH_MAX) if columns.isdigit() and int(columns) >= 40 else PIPE_WIDTH


def make_console(buffer: IO[str], width: int = PIPE_WIDTH, color: bool = False) -> Console:
    return Console(
        file=buffer,
        width=width,
        force_terminal=color,
        no_color=not color,
        color_system="standard" if color else None,
        highlight=False,
        emoji=False,
        soft_wrap=False,
    )


def make_table(title: str | None = None, **options: Any) -> Table:
    """The table style all reports share: a rule under the header, no outer frame, titles on the left."""
    return Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        title=title,
        title_justify="left",
        title_style="",
        **options,
    )


_PIECES = re.compile(r"[^ ./]*[ ./]+|[^ ./]+$")
_NAME_MIN_WIDTH = 12


def shorten_middle(text: str, width: int) -> str:
    """`model.layers.0.attention` -> `model.la…ttention`: both ends kept, the middle marked as cut."""
    if len(text) <= width:
        return text
    if width < 3:
        return text[:width]
    tail = (width - 1) // 2
    return text[: width - 1 - tail] + "…" + text[len(text) - tail :]


def wrap_at_breaks(text: str, width: int) -> list[str]:
    """Lines of at most `width` broken after spaces, dots or slashes only, never inside a word or name
    part; a part longer than a line on its own is shortened in the middle."""
    lines: list[str] = []
    line = ""
    for piece in _PIECES.findall(text):
        if len(line) + len(piece.rstrip(" ")) <= width:
            line += piece
            continue
        if line.strip():
            lines.append(line.rstrip(" "))
        line = piece if len(piece.rstrip(" ")) <= width else shorten_middle(piece.rstrip(" "), width) + " "
    if line.strip() or not lines:
        lines.append(line.rstrip(" "))
    return lines


class Wrapped:
    """Text (a tensor name, a finding's message) that wraps at spaces, dots and slashes, never mid-word."""

    def __init__(self, text: str, style: str = "") -> None:
        self.text = text
        self.style = style

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        longest = max((len(p.rstrip(" ")) for p in _PIECES.findall(self.text)), default=0)
        return Measurement(min(longest, _NAME_MIN_WIDTH), len(self.text)).clamp(max_width=options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = wrap_at_breaks(self.text, max(options.max_width, 1))
        yield Text("\n".join(lines), style=self.style, no_wrap=True, overflow="ignore")


def title_line(path: str, *details: str) -> Text:
    """`path  format · detail · size`: how each file (or side of a diff) is introduced."""
    return Text.assemble((path, "bold"), "  ", " · ".join(d for d in details if d))


def finish(buffer: Any) -> str:
    # rich pads every line to the width; trailing blanks only get in the way of diffs and logs
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"
