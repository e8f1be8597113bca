"""A bar of the bytes per group (model / optimizer / rng / other), with the optimizer share in numbers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.content import Content
from textual.reactive import reactive
from textual.widget import Widget

from ckinspect.analysis.anatomy import declared_optimizer_share
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
        # the whole file: tensors by group, storage bytes no tensor uses (STORAGE_BLOAT), and the rest
        # (pickle, zip headers, metadata), so that a file of 19.6 MiB with 13.5 MiB of tensors looks it
        unused = max(0, a.unused_bytes)
        rest = max(0, a.file_bytes - a.storage_bytes)
        parts = [(sizes[name], "█", GROUP_COLOURS[name]) for name in GROUPS if sizes[name]]
        parts += [(n, char, "dim") for n, char in ((unused, "▒"), (rest, "░")) if n]
        return themed(Text("\n").join([bar_text(parts, width), self._legend(a.optimizer_share, sizes, unused, rest)]))

    def _legend(self, optimizer_share: float, sizes: dict[str, int], unused: int, rest: int) -> Text:
        legend = self._share(optimizer_share)  # the share first: at 80 columns the legend's end is what gets cut
        for name in GROUPS:
            if sizes[name] or name == "optimizer":
                legend.append("  ■ ", style=GROUP_COLOURS[name])
                legend.append(f"{name} {human_bytes(sizes[name])}")
        for label, char, nbytes in (("unused", "▒", unused), ("not tensors", "░", rest)):
            if nbytes:
                legend.append(f"  {char} ", style="dim")
                legend.append(f"{label} {human_bytes(nbytes)}")
        legend.no_wrap = True
        legend.overflow = "ellipsis"
        return legend

    def _share(self, optimizer_share: float) -> Text:
        legend = Text("optimizer share ", style="bold")
        if self.missing and self.declared:
            # what is present says little about a file cut short: the share of what it declares
            share = declared_optimizer_share(self.declared)
            legend.append(f"{share:.1%} of the declared sizes", style="bold")
            legend.append(f"  {self.missing:,} tensors missing", style=f"bold {SEVERITY_COLOURS['error']}")
        else:
            legend.append(f"{optimizer_share:.1%}", style="bold")
        return legend


def bar_text(parts: list[tuple[int, str, str]], width: int) -> Text:
    """(bytes, character, style) parts as one bar `width` cells long, each part at least one cell."""
    total = max(1, sum(n for n, _, _ in parts))
    bar = Text()
    used = 0
    for i, (nbytes, char, style) in enumerate(parts):
        cells = width - used if i == len(parts) - 1 else max(1, round(width * nbytes / total))
        cells = min(cells, width - used)
        bar.append(char * cells, style=style)
        used += cells
    return bar
