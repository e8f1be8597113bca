"""One tensor of a diff in detail (Enter on a row): both sides, max |Δ|, max relative Δ, how many
elements differ, the first that does, and a histogram of B - A."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from ckinspect.fmt import percent, shape_text
from ckinspect.model import Checkpoint
from ckinspect.tui.host import failure_text
from ckinspect.tui.widgets.details_pane import histogram_text
from ckinspect.tui.widgets.palette import STATUS_COLOURS, themed

if TYPE_CHECKING:
    from ckinspect.analysis.diff import DeltaHistogram, TensorChange
    from ckinspect.tui.host import Host
    from ckinspect.tui.pairs import Pair


def _number(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.6g}"


def detail_text(pair: Pair, change: TensorChange | None) -> Text:
    """What the report's changed-tensor table says about this tensor, one fact a line."""
    text = Text()
    text.append(pair.name + "\n", style="bold")
    text.append(pair.status, style=f"bold {STATUS_COLOURS.get(pair.status) or ''}")
    text.append("\n")
    for side, t in (("A", pair.a), ("B", pair.b)):
        text.append(f"{side}  ", style="bold")
        text.append(f"{t.name} · {t.dtype} · {shape_text(t.shape)}\n" if t is not None else "—\n")
    if change is None:
        text.append("\nno value differs" if pair.status == "same" else "")
        return text
    numel = change.numel or 1
    rows = [
        ("max |Δ|", _number(change.max_abs_diff)),
        ("max rel Δ", _number(change.max_rel_diff)),
        (
            "differing",
            "-"
            if change.n_diff is None
            else f"{change.n_diff:,} of {change.numel:,} ({percent(change.n_diff / numel)})",
        ),
        ("first at", "-" if change.first_index is None else "[" + ", ".join(map(str, change.first_index)) + "]"),
    ]
    text.append("\n")
    for label, value in rows:
        text.append(f"{label:<11}", style="bold")
        text.append(value + "\n")
    return text


class DiffDetailScreen(ModalScreen[None]):
    app: Host  # for the type checker: textual types `app` as App[Any]
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,enter,q", "close", "Close")]

    @dataclass
    class HistogramReady(Message):
        histogram: DeltaHistogram

    def __init__(self, a: Checkpoint, b: Checkpoint, pair: Pair, change: TensorChange | None) -> None:
        super().__init__()
        self.a, self.b, self.pair, self.change = a, b, pair, change

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="dialog"):
            yield Static(themed(detail_text(self.pair, self.change)), id="detail-facts")
            yield Static("", id="detail-histogram")

    def on_mount(self) -> None:
        self.query_one("#dialog").border_title = "diff of one tensor · Esc closes"
        change = self.change
        if change is not None and change.reason != "shape" and self.pair.a is not None and self.pair.b is not None:
            self.query_one("#detail-histogram", Static).update(Text("\nhistogram of B - A: computing…", style="italic"))
            self.histogram()

    @work(thread=True, exclusive=True, exit_on_error=False, group="delta", description="histogram of B - A")
    def histogram(self) -> None:
        assert self.pair.a is not None and self.pair.b is not None
        result = self.app.backend.delta_histogram(self.a, self.pair.a, self.b, self.pair.b)
        self.post_message(self.HistogramReady(result))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            note = f"\nhistogram of B - A {failure_text(event.worker.error)}"
            self.query_one("#detail-histogram", Static).update(Text(note, style="italic"))

    def on_diff_detail_screen_histogram_ready(self, message: HistogramReady) -> None:
        h = message.histogram
        text = Text("\nhistogram of B - A\n", style="bold")
        text.append_text(histogram_text(h.counts, rows=4))
        text.append(f"\n{_number(h.lo)} … {_number(h.hi)}", style="dim")
        if h.nonfinite:
            text.append(f"\n{h.nonfinite:,} element(s) differ by NaN or ∞ (not drawn)", style="$ck-error")
        self.query_one("#detail-histogram", Static).update(themed(text))

    def action_close(self) -> None:
        self.dismiss(None)
