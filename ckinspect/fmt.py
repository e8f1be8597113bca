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


def printable(text: str) -> str:
    """Text from a file or folder name, safe to print: control characters (ANSI/OSC escapes, newlines) as \\xNN."""
    if text.isprintable():
        return text
    return "".join(
        ch if ch.isprintable() else f"\\x{ord(ch):02x}" if ord(ch) < 256 else f"\\u{ord(ch):04x}" for ch in text
    )
