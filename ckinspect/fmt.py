"""Sizes for people: binary units (KiB, MiB, GiB), as `ls -h` and the TUI show them. JSON keeps exact bytes."""

from __future__ import annotations


def human_bytes(nbytes: int) -> str:
    import humanize  # deferred: ~3 ms at start-up that a JSON report of a clean file never needs

    text = humanize.naturalsize(nbytes, binary=True, format="%.1f")
    return text.replace(" Bytes", " B").replace(" Byte", " B")  # narrower columns at 80 wide


def percent(fraction: float) -> str:
    if fraction and fraction < 0.001:
        return "<0.1%"
    return f"{fraction * 100:.1f}%"


# --- Names from a file, made safe to show -----------------------------------------------------------
# A tensor, file or member name is chosen by whoever made the file. On a terminal a raw ESC starts a
# control sequence (cursor moves, window title, OSC 52 clipboard writes), C1 bytes do the same, and
# bidi overrides reorder what is shown; in Markdown a backtick or `</details>` breaks out of the block.

_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_TERMINAL_TABLE = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_TERMINAL_TABLE.update({c: f"\\u{c:04x}" for c in _BIDI})


def terminal_safe(text: object) -> str:
    """`text` with every control character (C0, DEL, C1 incl. the 8-bit CSI) and bidi override shown as an
    escape (`\\x1b`, `\\u202e`): nothing in it can move the cursor, set a title or reach the clipboard."""
    return str(text).translate(_TERMINAL_TABLE)


_MD_SPECIAL = {"\\": "\\\\", "`": "\\`", "|": "\\|", "[": "\\[", "]": "\\]", "<": "&lt;", ">": "&gt;"}
_MD_TEXT_TABLE = {**_TERMINAL_TABLE, **{ord(k): v for k, v in _MD_SPECIAL.items()}}


def md_text(text: object) -> str:
    """`text` for Markdown prose or a table cell: what could break out escaped (a backtick opening code,
    a pipe splitting a cell, `[` making a link or image, `<` opening or closing a tag such as `</details>`)."""
    return str(text).translate(_MD_TEXT_TABLE)


def md_code(text: object) -> str:
    """`text` as an inline code span no content can end early: fenced by more backticks than it holds,
    padded when it starts or ends with one, pipes escaped (a table cell splits on them even in code)."""
    body = terminal_safe(text).replace("|", "\\|")
    longest = run = 0
    for ch in body:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    pad = " " if body.startswith("`") or body.endswith("`") or not body.strip() else ""
    return f"{fence}{pad}{body}{pad}{fence}"
