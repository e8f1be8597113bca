"""The selected tensor: layout facts at once, value statistics and a histogram when asked for."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ckinspect.analysis.value_stats import ValueStats
from ckinspect.fmt import human_bytes, shape_text, terminal_safe
from ckinspect.model import Checkpoint, CompositeTensor, TensorInfo
from ckinspect.tui.widgets.palette import GROUP_COLOURS, SEVERITY_COLOURS, themed


def _storage_text(text: Text, ckpt: Checkpoint, tensor: TensorInfo) -> None:
    """Where its bytes live: the storage, its offset and size, and how many other tensors share it
    (counted up to 20,000 tensors: beyond, the count would cost more than the pane is worth)."""
    storage = ckpt.storages.get(tensor.storage_key)
    text.append(f"storage {terminal_safe(tensor.storage_key)} @ {tensor.storage_offset}")
    if storage is not None:
        text.append(f" of {human_bytes(storage.nbytes)}")
    shared = sum(1 for t in ckpt.tensors if t.storage_key == tensor.storage_key) if len(ckpt.tensors) < 20_000 else 0
    if shared > 1:
        text.append(f"\nshares its storage with {shared - 1} other tensor(s)", style="italic")


def _number(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.6g}"


class DetailsPane(VerticalScroll):
    DEFAULT_CSS = """
    DetailsPane { height: 1fr; padding: 0 1; }
    DetailsPane > #facts { height: auto; }
    DetailsPane > #stats { height: auto; }
    """

    def compose(self) -> ComposeResult:
        yield Static("select a tensor", id="facts")
        yield Static("", id="stats")

    tensor_name: str | None = None

    def show_tensor(self, ckpt: Checkpoint, tensor: TensorInfo | None, param: str = "") -> bool:
        """Show a tensor's layout facts; False (nothing redrawn) when it is already shown."""
        name = tensor.name if tensor is not None else None
        if name == self.tensor_name and name is not None:
            return False
        self.tensor_name = name
        facts = self.query_one("#facts", Static)
        self.show_stats_note("")
        if tensor is None:
            facts.update("select a tensor")
            return True
        text = Text()
        text.append(terminal_safe(tensor.name) + "\n", style="bold")
        text.append(tensor.group, style=GROUP_COLOURS.get(tensor.group, ""))
        text.append(f" · {tensor.dtype} · {shape_text(tensor.shape)}\n")
        text.append(f"{tensor.numel:,} elements · {human_bytes(tensor.nbytes)}\n")
        if param:  # optimizer state: the parameter it belongs to; a parameter: where its state is
            text.append("state of " if tensor.group == "optimizer" else "optimizer state ", style="bold")
            text.append(param + "\n")
        text.append(f"stride {tuple(tensor.stride)}{'' if tensor.is_contiguous else ' (not contiguous)'}\n")
        _storage_text(text, ckpt, tensor)
        facts.update(themed(text))
        return True

    def show_composite(self, composite: CompositeTensor, kind: str, shape: str) -> bool:
        """A composite tensor's row (sparse, nested, meta ...): the whole, then each part as a tensor of its
        own (the value scan and the findings name the parts); False when it is already shown."""
        if composite.name == self.tensor_name:
            return False
        self.tensor_name = composite.name
        self.show_stats_note("")
        text = Text()
        text.append(terminal_safe(composite.name) + "\n", style="bold")
        text.append(f"{terminal_safe(kind)} · {composite.dtype} · {shape}\n")
        if not composite.parts:
            text.append("no data: a shape and a dtype only\n", style="italic")
        else:
            text.append(f"{len(composite.parts)} parts · {human_bytes(composite.nbytes)}\n")
        for role, part in composite.parts.items():
            text.append(f"  {terminal_safe(role)}", style="bold")
            text.append(f"  {part.dtype} · {shape_text(part.shape)} · {human_bytes(part.nbytes)}\n")
        if composite.parts:
            text.append(f"parts are named {terminal_safe(composite.name)}.<part> in findings and exports", style="dim")
        self.query_one("#facts", Static).update(themed(text))
        return True

    def show_module(self, path: str, tensors: int, nbytes: int) -> None:
        """A module of the tree view: what it holds (the tensor shown before is no longer selected)."""
        self.tensor_name = None
        self.show_stats_note("")
        text = Text()
        text.append(terminal_safe(path) + "\n", style="bold")
        text.append(f"{tensors:,} tensor(s) · {human_bytes(nbytes)}\n")
        text.append("space or Enter opens it", style="dim")
        self.query_one("#facts", Static).update(themed(text))

    def show_stats_note(self, note: str) -> None:
        self.query_one("#stats", Static).update(Text("\n" + note, style="italic") if note else "")

    def show_stats(self, stats: ValueStats, note: str = "") -> None:
        text = Text("\n")
        # two figures a line: at 80x24 the pane is 9 lines tall and the histogram must still fit
        for pair in ((("min", stats.minimum), ("max", stats.maximum)), (("mean", stats.mean), ("std", stats.std))):
            for i, (label, value) in enumerate(pair):
                text.append(f"{label:<5}" if i == 0 else f"  {label} ", style="bold")
                text.append(f"{_number(value):<11}" if i == 0 else _number(value))
            text.append("\n")
        text.append("non-finite ", style="bold")
        text.append(f"{stats.nonfinite:,}", style=SEVERITY_COLOURS["error"] if stats.nonfinite else "")
        text.append("  > fp16 max ", style="bold")
        text.append(f"{stats.fp16_overflow:,}", style=SEVERITY_COLOURS["warning"] if stats.fp16_overflow else "")
        if stats.histogram:
            lo, hi = stats.hist_range
            text.append("\n")
            text.append_text(histogram_text(stats.histogram))
            text.append(f"\n{_number(lo)} … {_number(hi)}" + (" (sampled)" if stats.sampled else ""), style="dim")
        if note:
            text.append(f"\n{note}", style="italic dim")
        self.query_one("#stats", Static).update(themed(text))


_EIGHTHS = " ▁▂▃▄▅▆▇█"


def histogram_text(counts: list[int], rows: int = 3) -> Text:
    """Vertical bars, `rows` lines tall, one column per bin (a non-empty bin shows at least ▁)."""
    top = max(counts) or 1
    heights = [0 if c == 0 else max(1, round(c / top * rows * 8)) for c in counts]
    lines = []
    for level in range(rows - 1, -1, -1):
        line = ""
        for h in heights:
            filled = h - level * 8
            line += _EIGHTHS[max(0, min(8, filled))]
        lines.append(line)
    return Text("\n".join(lines), style="$ck-info")
