"""Exports a user asks for (the TUI's `o`: the tensors shown, as CSV or JSON): a new file in the folder,
written atomically (io.atomic), never over an existing one. What goes in it is rendered by report/."""

from __future__ import annotations

from pathlib import Path

from ckinspect.io.atomic import atomic_write_text


def write_new(folder: Path, stem: str, suffix: str, text: str) -> Path:
    """`text` written to `folder/stem.suffix`, or `stem-1.suffix`, `stem-2.suffix` ... when that name is
    taken (an earlier export is never replaced). Returns the path written."""
    target = folder / f"{stem}.{suffix}"
    n = 1
    while target.exists():
        target = folder / f"{stem}-{n}.{suffix}"
        n += 1
    atomic_write_text(target, text)
    return target
