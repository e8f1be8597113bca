"""One look for every text renderer (`--report`, `diff --report`, `drift --report`): width, colour, tables.

80 columns in files and pipes (COLUMNS honoured), the terminal's width capped at 200 on a TTY; colour
only on a terminal; light tables whose long tensor names fold instead of pushing columns off screen.
Imported only on the text path: the JSON and Markdown renderers never load rich.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import IO, Any, NamedTuple

from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

TEXT_WIDTH_MAX = 200  # the widest terminal a table spreads over (issue 30: every width used)
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


def wrap_at_breaks(text: str, width: int) -> list[str]:
    """Lines of at most `width` broken after spaces, dots or slashes only, never inside a word or name
    part; a part longer than a line on its own takes that line whole (it overflows: no character is
    dropped, none is moved to the next line)."""
    lines: list[str] = []
    line = ""
    for piece in _PIECES.findall(text):
        if len(line) + len(piece.rstrip(" ")) <= width:
            line += piece
            continue
        if line.strip():
            lines.append(line.rstrip(" "))
        line = piece
    if line.strip() or not lines:
        lines.append(line.rstrip(" "))
    return lines


def wrap_words(text: str, width: int) -> list[str]:
    """Lines broken at spaces only, so a name in a message stays whole (and greppable); a word longer
    than a line takes a line of its own and overflows it."""
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
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
        yield Text("\n".join(lines), style=self.style, no_wrap=True, overflow="fold")


class Cell(NamedTuple):
    text: str
    style: str = ""


class NameTable:
    """A table whose first column holds names that are never split, shortened or folded: a name wider
    than its column takes a line of its own above its row (overflowing the width when it must), so every
    name can be grepped and copied from a log. The other columns take what their widest cell needs.
    Print it with `crop=False` (rich would cut the overflowing line)."""

    GAP = "  "

    def __init__(self, headers: list[tuple[str, str]], rows: list[list[Cell]], title: str = "") -> None:
        self.headers, self.rows, self.title = headers, rows, title  # headers: (label, "left"|"right")

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        widths = [
            max([len(label), *(len(row[i].text) for row in self.rows)]) for i, (label, _) in enumerate(self.headers)
        ]
        fixed = sum(widths[1:]) + len(self.GAP) * (len(widths) - 1)
        widths[0] = max(len(self.headers[0][0]), min(widths[0], options.max_width - fixed))
        if self.title:
            yield Text(self.title)
        yield self._line([Cell(label, "bold") for label, _ in self.headers], widths)
        yield Text("─" * min(options.max_width, sum(widths) + len(self.GAP) * (len(widths) - 1)))
        for row in self.rows:
            if len(row[0].text) > widths[0]:
                yield Text(row[0].text, style=row[0].style, no_wrap=True, overflow="ignore")
                row = [Cell(""), *row[1:]]
            yield self._line(row, widths)

    def _line(self, cells: list[Cell], widths: list[int]) -> Text:
        line = Text(no_wrap=True, overflow="ignore")
        for i, (cell, width) in enumerate(zip(cells, widths, strict=True)):
            if i:
                line.append(self.GAP)
            pad = " " * (width - len(cell.text))
            right = self.headers[i][1] == "right"
            line.append(pad if right else "")
            line.append(cell.text, style=cell.style)
            line.append("" if right else pad)
        line.rstrip()
        return line


def title_line(path: str, *details: str) -> Text:
    """`path  format · detail · size`: how each file (or side of a diff) is introduced."""
    return Text.assemble((path, "bold"), "  ", " · ".join(d for d in details if d))


class Cropped:
    """A rich table drawn within the width, for reports printed with `crop=False` (where a whole name may
    overflow a line): a table never does."""

    def __init__(self, renderable: Any) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in console.render_lines(self.renderable, options, pad=False):
            yield from line
            yield Segment.line()


class Title:
    """`path  format · detail · size` on one line when it fits; else the path alone (whole), then the
    details below it, each detail whole: a value is never cut from its unit (`2.5 KiB`)."""

    def __init__(self, path: str, *details: str) -> None:
        self.path, self.details = path, [d for d in details if d]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        line = title_line(self.path, *self.details)
        if len(line) <= options.max_width or not self.details:
            yield Text(line.plain, spans=line.spans, no_wrap=True, overflow="ignore")
            return
        yield Text(self.path, style="bold", no_wrap=True, overflow="ignore")
        out = Text(no_wrap=True, overflow="ignore")
        width = 2
        for i, detail in enumerate(self.details):
            if i and width + 3 + len(detail) > options.max_width:
                out.append("\n  ")
                width = 2
            elif i:
                out.append(" · ")
                width += 3
            else:
                out.append("  ")
            out.append(detail)
            width += len(detail)
        yield out


def finish(buffer: Any) -> str:
    # rich pads every line to the width; trailing blanks only get in the way of diffs and logs
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"
