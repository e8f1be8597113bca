"""A bar of the bytes per group (model / optimizer / rng / other), with the optimizer share in numbers."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from ckinspect.model import GROUPS
from ckinspect.tui.core import GroupBytes, human_bytes
from ckinspect.tui.widgets.palette import GROUP_COLOURS


class GroupBar(Widget):
    DEFAULT_CSS = """
    GroupBar { height: 2; padding: 0 1; }
    """

    groups: reactive[GroupBytes | None] = reactive(None)
    note: reactive[str] = reactive("reading…")

    def render(self) -> Text:
        width = max(10, self.content_region.width or self.size.width)
        if self.groups is None:
            return Text(self.note, style="italic")
        g = self.groups
        total = max(1, g.tensor_bytes or sum(g.bytes.values()))
        bar = Text()
        used = 0
        present = [name for name in GROUPS if g.bytes.get(name)]
        for i, name in enumerate(present):
            cells = width - used if i == len(present) - 1 else max(1, round(width * g.bytes[name] / total))
            cells = min(cells, width - used)
            bar.append("█" * cells, style=GROUP_COLOURS[name])
            used += cells
        if used < width:
            bar.append("░" * (width - used), style="dim")
        legend = Text()
        for name in GROUPS:
            if not g.bytes.get(name) and name != "optimizer":
                continue
            if legend:
                legend.append("  ")
            legend.append("■ ", style=GROUP_COLOURS[name])
            legend.append(f"{name} {human_bytes(g.bytes.get(name, 0))}")
        legend.append("  optimizer share ", style="bold")
        legend.append(f"{g.optimizer_share:.1%}", style="bold")
        legend.no_wrap = True
        legend.overflow = "ellipsis"
        return Text("\n").join([bar, legend])
