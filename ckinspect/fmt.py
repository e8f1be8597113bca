"""How numbers and names are written for people: the one home of the formatters that the reports,
the commands and the TUI share. JSON keeps exact values; these are for text, Markdown and the screen.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any


# ---------------------------------------------------------------- values from a file, bounded


def _bounded_reprlib() -> Any:
    import reprlib

    r = reprlib.Repr()
    r.maxlevel = 4  # at most 8^4 items looked at, however deep or shared the structure behind the value
    r.maxtuple = r.maxlist = r.maxarray = r.maxdict = r.maxset = r.maxfrozenset = r.maxdeque = 8
    r.maxstring, r.maxlong, r.maxother = 200, 60, 200
    return r


_REPR: Any = None


def bounded_repr(value: Any, limit: int = 80) -> str:
    """repr(value) in at most `limit` characters, at a cost bounded by what it prints, not by the structure
    behind it: a pickle's memo can share one list a billion times over (repr() would never end) and an
    int can have a million digits. Anything a file decodes to goes through this (or bounded_str) before
    it is formatted into a message."""
    global _REPR
    if _REPR is None:
        _REPR = _bounded_reprlib()
    try:
        text = _REPR.repr(value)
    except Exception:  # noqa: BLE001 - a repr that fails (an int past str()'s digit limit): say what it is
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def bounded_str(value: Any, limit: int = 200) -> str:
    """str(value) for a str (cut to `limit`), bounded_repr for anything else: what a device name, a storage
    key or a path part should be, whatever a hostile file put there instead."""
    if type(value) is str:
        return value if len(value) <= limit else value[: max(0, limit - 1)] + "…"
    return bounded_repr(value, limit)


# ---------------------------------------------------------------- numbers


_BINARY_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB", "RiB", "QiB")
_BINARY_STEPS = tuple(1024.0**k for k in range(1, len(_BINARY_UNITS) + 1))


def human_bytes(nbytes: int | float) -> str:
    """Binary units (KiB, MiB, GiB), as `ls -h` shows them, one decimal: 12 B, 1.5 KiB, 1.2 MiB.

    The same text as humanize.naturalsize(binary=True, format="%.1f"), with "B" for "Bytes" (narrower
    at 80 columns); written out here because the TUI formats 50,000 sizes at once."""
    size = float(nbytes)
    magnitude = abs(size)
    if magnitude < 1024:
        return f"{int(size)} B"
    exp, last = 1, len(_BINARY_UNITS)
    while exp < last and magnitude >= _BINARY_STEPS[exp]:
        exp += 1
    if (
        exp < last
        and magnitude / _BINARY_STEPS[exp - 1] >= 1023.9
        and float(f"{magnitude / _BINARY_STEPS[exp - 1]:.1f}") >= 1024
    ):
        exp += 1  # 1023.96 KiB would read "1024.0 KiB": say "1.0 MiB"
    return f"{size / _BINARY_STEPS[exp - 1]:.1f} {_BINARY_UNITS[exp - 1]}"


def percent(fraction: float) -> str:
    """One decimal; "<0.1%" for a share that is not nothing, ">99.9%" for one that is not everything."""
    if 0 < fraction < 0.001:
        return "<0.1%"
    return ">99.9%" if 0.999 < fraction < 1 else f"{fraction * 100:.1f}%"  # "100.0%" only when it is all


def shape_text(shape: Sequence[int]) -> str:
    """3×4, 10, or "scalar" for a 0-d tensor."""
    return "×".join(map(str, shape)) or "scalar"


# ---------------------------------------------------------------- names from a file, made safe to show
# A tensor, file or member name is chosen by whoever made the file. On a terminal a raw ESC starts a
# control sequence (cursor moves, window title, OSC 52 clipboard writes), C1 bytes do the same, and
# bidi overrides reorder what is shown; in Markdown a backtick or `</details>` breaks out of the block.

_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_TABLES: dict[str, dict[int, str]] = {}


def _table(kind: str) -> dict[int, str]:
    """str.translate's table for "terminal", "document" or "markdown", built on first use: its 2,100
    entries cost 0.6 ms, which a process that shows only plain names (a JSON report) never pays."""
    table = _TABLES.get(kind)
    if table is None:
        terminal = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
        terminal.update({c: f"\\u{c:04x}" for c in (*_BIDI, *range(0xD800, 0xE000))})
        document = {c: v for c, v in terminal.items() if c not in (0x09, 0x0A)}
        markdown = {**terminal, **{ord(k): v for k, v in _MD_SPECIAL.items()}}
        _TABLES.update(terminal=terminal, document=document, markdown=markdown)  # all three at once (threads)
        table = _TABLES[kind]
    return table


def terminal_safe(text: object, *, keep_lines: bool = False) -> str:
    """`text` with every control character (C0, DEL, C1 incl. the 8-bit CSI), bidi override and lone
    surrogate (an undecodable byte of a file name) shown as an escape (`\\x1b`, `\\u202e`): nothing in it
    can move the cursor, set a title or reach the clipboard, nor fail to encode. `keep_lines` lets tabs
    and newlines through, for documents (SARIF, JUnit) whose reader shows them as layout."""
    text = str(text)
    if text.isascii() and text.isprintable():  # the common name: nothing to escape, and no per-character lookups
        return text
    return text.translate(_table("document" if keep_lines else "terminal"))


def value_text(value: object, limit: int = 48) -> str:
    """A non-tensor value from a checkpoint (lr, loss, a config entry) in one short, printable line:
    floats to 6 significant digits, strings through terminal_safe."""
    if isinstance(value, bool) or value is None:
        text = str(value)
    elif isinstance(value, float):
        text = f"{value:.6g}"
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, (bytes, bytearray)):
        text = f"<{len(value):,} bytes>"
    elif isinstance(value, str):
        text = terminal_safe(value)
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------- Markdown

_MD_SPECIAL = {"\\": "\\\\", "`": "\\`", "|": "\\|", "[": "\\[", "]": "\\]", "<": "&lt;", ">": "&gt;", "\n": " "}


def md_text(text: object) -> str:
    """`text` for Markdown prose or a table cell, on one line: what could break out escaped (a backtick
    opening code, a pipe splitting a cell, `[` making a link or image, `<` opening or closing a tag such
    as `</details>`), controls made visible as in `terminal_safe`."""
    return str(text).translate(_table("markdown"))


def md_code(text: object) -> str:
    """`text` as an inline code span no content can end early: fenced by more backticks than it holds
    (padded then, so a backtick at either end stays inside), pipes escaped (a table cell splits on them
    even in code), on one line. Backslashes stay as they are: a code span shows them literally."""
    body = terminal_safe(str(text).replace("\n", " ")).replace("|", "\\|")
    longest = run = 0
    for ch in body:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    pad = " " if longest or not body.strip() else ""
    return f"{fence}{pad}{body}{pad}{fence}"
