"""How numbers and names are written for people: the one home of the formatters that the reports,
the commands and the TUI share. JSON keeps exact values; these are for text, Markdown and the screen.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence


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


def value_text(value: object, limit: int = 48) -> str:
    """A non-tensor value from a checkpoint (lr, loss, a config entry) in one short, printable line:
    floats to 6 significant digits, strings quoted and escaped when they hold control characters."""
    if isinstance(value, bool) or value is None:
        text = str(value)
    elif isinstance(value, float):
        text = f"{value:.6g}"
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, (bytes, bytearray)):
        text = f"<{len(value):,} bytes>"
    elif isinstance(value, str):
        text = value if value.isprintable() else repr(value)
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------- Markdown


def md_text(text: object) -> str:
    """Text safe in a Markdown line or table cell: backslashes and pipes escaped, no line breaks."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def md_code(text: object) -> str:
    """A Markdown code span of `text`, safe in a table cell: a longer fence when the text holds a
    backtick, pipes escaped (GitHub's tables split on them even inside code), no line breaks.
    Backslashes stay as they are: a code span shows them literally."""
    text = str(text).replace("|", "\\|").replace("\n", " ")
    fence = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{fence}{pad}{text}{pad}{fence}"
