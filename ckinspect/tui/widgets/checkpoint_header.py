"""Two lines on what the file is: path, format, size; step/epoch/world_size, layout, safe-load verdict."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ckinspect.fmt import human_bytes, terminal_safe
from ckinspect.model import Checkpoint
from ckinspect.tui.core import safe_load_verdict
from ckinspect.tui.widgets.palette import SEVERITY_COLOURS, themed


class CheckpointHeader(Static):
    DEFAULT_CSS = """
    CheckpointHeader { height: 2; padding: 0 1; background: $panel; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def show_loading(self, path: str) -> None:
        self.update(Text.assemble((terminal_safe(path), "bold"), "\n", ("reading…", "italic")))

    def show(self, ckpt: Checkpoint, missing: int = 0) -> None:
        meta = ckpt.metadata
        verdict, level = safe_load_verdict(ckpt)
        facts = [f"{key} {meta[key]}" for key in ("step", "epoch", "world_size") if meta.get(key) is not None] or [
            "no step/epoch recorded"
        ]
        layout = f" · {ckpt.layout}" if ckpt.layout and ckpt.layout != "unknown" else ""
        first = Text.assemble(
            (terminal_safe(ckpt.path), "bold"),
            "  ",
            (ckpt.format + layout, "bold"),
            f"  {human_bytes(ckpt.file_bytes)}",
            f"  {len(ckpt.tensors):,} tensors",
        )
        second = Text.assemble((verdict, f"bold {SEVERITY_COLOURS.get(level, '')}"), "  ", " · ".join(facts))
        if missing:  # a save cut short: say so first, and what recovers the rest
            second = Text.assemble(
                (f"{missing:,} tensors missing (cut short)", f"bold {SEVERITY_COLOURS['error']}"),
                f" · ckinspect salvage {ckpt.path.name} OUT keeps the whole ones  ",
                second,
            )
        self.update(themed(Text("\n").join([first, second])))  # two lines whatever the width: the CSS cuts, never wraps
