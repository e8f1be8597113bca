"""A bar of the bytes per group (model / optimizer / rng / other), with the optimizer share in numbers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from ckinspect.fmt import human_bytes
from ckinspect.tui.widgets.palette import GROUP_COLOURS, SEVERITY_COLOURS, themed
from ckinspect.vocab import GROUPS

if TYPE_CHECKING:
    from ckinspect.analysis.anatomy import Anatomy


class GroupBar(Widget):
    DEFAULT_CSS = """
    GroupBar { height: 2; padding: 0 1; }
    """

    anatomy: reactive[Anatomy | None] = reactive(None)
    missing: reactive[int] = reactive(0)  # tensors whose bytes the file lacks
    declared: dict[str, int] | None = None  # bytes per group as the tensors declare them (set with `missing`)

    def render(self) -> Content:
        width = max(10, self.content_region.width or self.size.width)
        if self.anatomy is None:
            return themed(Text("reading…", style="italic"))
        a = self.anatomy
        sizes = {name: a.groups[name].bytes for name in GROUPS}
        total = max(1, a.tensor_bytes)
        bar = Text()
        used = 0
        present = [name for name in GROUPS if sizes[name]]
        for i, name in enumerate(present):
            cells = width - used if i == len(present) - 1 else max(1, round(width * sizes[name] / total))
            cells = min(cells, width - used)
            bar.append("█" * cells, style=GROUP_COLOURS[name])
            used += cells
        if used < width:
            bar.append("░" * (width - used), style="dim")
        legend = Text()
        for name in GROUPS:
            if not sizes[name] and name != "optimizer":
                continue
            if legend:
                legend.append("  ")
            legend.append("■ ", style=GROUP_COLOURS[name])
            legend.append(f"{name} {human_bytes(sizes[name])}")
        legend.append("  optimizer share ", style="bold")
        if self.missing and self.declared:
            # what is present says little about a file cut short: the share of what it declares
            share = self.declared["optimizer"] / max(1, sum(self.declared.values()))
            legend.append(f"{share:.1%} of the declared sizes", style="bold")
            legend.append(f"  {self.missing:,} tensors missing", style=f"bold {SEVERITY_COLOURS['error']}")
        else:
            legend.append(f"{a.optimizer_share:.1%}", style="bold")
        legend.no_wrap = True
        legend.overflow = "ellipsis"
        return themed(Text("\n").join([bar, legend]))
