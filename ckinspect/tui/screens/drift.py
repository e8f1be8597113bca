"""fp16/bf16 round-trip error per tensor, worst first, and the logit drift where the model is known."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Label, Static
from textual.worker import Worker, WorkerState

from ckinspect.fmt import terminal_safe
from ckinspect.io.remote import as_path
from ckinspect.model import Checkpoint
from ckinspect.tui.core import format_value
from ckinspect.tui.host import failure_text
from ckinspect.tui.messages import DriftComputed, Progress
from ckinspect.tui.widgets.footer import KeysFooter
from ckinspect.tui.widgets.virtual_table import Column, Row, VirtualTable

if TYPE_CHECKING:
    from ckinspect.analysis.drift import TensorDrift
    from ckinspect.tui.host import Host

LOGIT_STEP = "computing logit drift: running the model in fp32, fp16 and bf16 (tens of seconds on a CPU)"

COLUMNS = (  # optional ones go first to last as the window narrows: highest number first
    Column("name", "tensor", None, min_width=30, keep_end=True),
    Column("dtype", "dtype", 9, optional=4),
    Column("numel", "elements", 10, justify="right", optional=3),
    Column("fp16_max_abs", "fp16 max|Δ|", 11, justify="right"),
    Column("fp16_max_rel", "fp16 max rel", 12, justify="right", optional=5),
    Column("fp16_overflow", "fp16 overflow", 13, justify="right"),
    Column("fp16_underflow", "fp16 underflow", 14, justify="right", optional=6),
    Column("bf16_max_abs", "bf16 max|Δ|", 11, justify="right"),
    Column("bf16_max_rel", "bf16 max rel", 12, justify="right", optional=7),
    Column("bf16_overflow", "bf16 overflow", 13, justify="right", optional=2),
    Column("bf16_underflow", "bf16 underflow", 14, justify="right", optional=8),
)


def drift_rows(drifts: list[TensorDrift]) -> list[Row]:
    """One row per tensor, worst first as the drift report orders them (analysis.drift.worst_first)."""
    from ckinspect.analysis.drift import worst_first

    ordered = sorted(drifts, key=lambda d: worst_first(d.to_json()))  # the drift report's order
    rows = []
    for d in ordered:
        numbers = (
            d.numel,
            d.fp16.max_abs,
            d.fp16.max_rel,
            d.fp16.overflow,
            d.fp16.underflow,
            d.bf16.max_abs,
            d.bf16.max_rel,
            d.bf16.overflow,
            d.bf16.underflow,
        )
        cells = (d.name, d.dtype, *(format_value(n) for n in numbers))
        if d.error:
            cells = (d.name, d.dtype, format_value(d.numel), f"unreadable: {d.error}", *("",) * 7)
        rows.append(Row(d.name, cells, (d.name, d.dtype, *numbers)))
    return rows


def _pairs(part: dict[str, Any]) -> list[str]:
    """`label value` pairs of one format's logit drift (a line wraps between pairs, never inside one)."""
    pairs = [f"max |Δlogit| {format_value(part.get('max_abs'))}", f"mean {format_value(part.get('mean_abs'))}"]
    agreement = part.get("top1_agreement")
    if isinstance(agreement, (int, float)):
        pairs.append(f"top-1 agreement {agreement:.2%}")
    if part.get("kl_mean") is not None:
        pairs.append(f"KL {format_value(part['kl_mean'])}")
    change = part.get("perplexity_change")
    if isinstance(change, (int, float)):
        pairs.append(f"perplexity {change * 100:+.3g}%")
    return pairs


def pack(head: str, pairs: list[str], width: int) -> list[str]:
    """`head` then the pairs, two spaces apart, in lines of at most `width` (a pair never split; the
    following lines indented under the first pair)."""
    lines, line, indent = [], head, " " * len(head)
    for pair in pairs:
        gap = "" if line in (head, indent) else "  "
        if len(line) + len(gap) + len(pair) > width and line not in (head, indent):
            lines.append(line)
            line, gap = indent, ""
        line += gap + pair
    return [*lines, line]


class DriftScreen(Screen[None]):
    app: Host  # for the type checker: textual types `app` as App[Any]
    # one key per sort column, as on the inspect screen (again: reverse); `w` puts the worst first again
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("w", "worst_first", "Worst", tooltip="Worst first, as the drift report orders them"),
        Binding("n", "sort_by('name')", "Name", tooltip="Sort by tensor name"),
        Binding("f", "sort_by('fp16_max_abs')", "fp16 Δ", tooltip="Sort by fp16 max |Δ|, largest first"),
        Binding("b", "sort_by('bf16_max_abs')", "bf16 Δ", tooltip="Sort by bf16 max |Δ|, largest first"),
        Binding("o", "sort_by('fp16_overflow')", "Overflow", tooltip="Sort by values that become inf in fp16"),
        Binding("e", "sort_by('numel')", "Elements", tooltip="Sort by element count", show=False),
        Binding("r", "sort_reverse", "Reverse", tooltip="Reverse the sort order", show=False),
        Binding("escape", "back", "Back", show=False),
    ]

    def __init__(self, target: Path, ckpt: Checkpoint | None = None) -> None:
        super().__init__()
        self.target, self.ckpt = as_path(target), ckpt
        self._ticking: Timer | None = None  # while the model runs: the elapsed seconds, each second
        self._started = 0.0  # when the model began to run
        self._blocks = (0, 0)  # blocks of the model run in every format, of how many (0 of 0: not known yet)

    def compose(self) -> ComposeResult:
        yield Label(
            Text.assemble(("drift ", "bold"), terminal_safe(self.target), " — fp16/bf16 vs the stored values"),
            classes="title-line",
        )
        yield Static("computing rounding errors…", id="logits")  # as many lines as the logit drift needs
        yield VirtualTable(COLUMNS, id="drift-table", empty_text="computing…")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.compute()

    @work(thread=True, exclusive=True, exit_on_error=False, group="drift", description="drift")
    def compute(self) -> None:
        backend = self.app.backend
        ckpt = self.ckpt or backend.load(self.target)
        self.ckpt = ckpt
        weights = backend.weight_drift(ckpt, progress=lambda f: self.post_message(Progress("drift", f)))
        self.post_message(DriftComputed(weights, None, LOGIT_STEP))

        def blocks(done: int, total: int) -> None:
            self.post_message(Progress("logits", done / total if total else 0.0, done, total))

        try:
            logits, reason = backend.logit_drift(ckpt, progress=blocks)
        except Exception as exc:  # running the model can fail: the weight drift above still stands
            logits, reason = None, f"failed: {type(exc).__name__}: {exc}"
        self.post_message(DriftComputed(weights, logits, f"logit drift: {reason}" if reason else ""))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            self.query_one("#logits", Static).update(f"weight drift {failure_text(event.worker.error)}")
            self.query_one(VirtualTable).empty_text = "nothing to show"
            self.query_one(VirtualTable).refresh()

    def on_progress(self, message: Progress) -> None:
        if message.task == "drift":
            self.query_one("#logits", Static).update(f"computing rounding errors… {message.fraction:.0%}")
        elif message.task == "logits" and self._ticking is not None:
            self._blocks = (message.done, message.total)
            self._show_step()

    def on_drift_computed(self, message: DriftComputed) -> None:
        self.query_one("#logits", Static).update(self._logit_text(message.logits, message.logits_note))
        if message.logits_note == LOGIT_STEP:  # the model runs: how far and for how long, each second, until it ends
            self._started, self._blocks = time.monotonic(), (0, 0)
            self._ticking = self.set_interval(1.0, self._show_step)
        elif self._ticking is not None:
            self._ticking.stop()
            self._ticking = None
        if message.weights is getattr(self, "_weights", None):
            return  # the logit drift arrived after the weights: the table stands
        self._weights = message.weights
        table = self.query_one(VirtualTable)
        table.empty_text = "no floating model tensors"
        table.set_rows(drift_rows(message.weights))
        table.focus()

    def on_resize(self) -> None:
        shown = getattr(self, "_shown", None)
        if shown is not None and shown[0] is not None:
            self.query_one("#logits", Static).update(self._logit_text(*shown))

    def _show_step(self) -> None:
        done, total = self._blocks
        far = f" · {done} of {total} blocks run ({done / total:.0%})" if total else ""
        self.query_one("#logits", Static).update(
            Text(f"{LOGIT_STEP}{far} · {time.monotonic() - self._started:.0f} s", style="italic")
        )

    def _logit_text(self, logits: dict[str, Any] | None, note: str) -> Text:
        self._shown = (logits, note)  # drawn again for another width
        from ckinspect.report.drift_report import logit_inputs, logit_title

        if logits is None:
            return Text(note, style="italic")
        width = max(40, (self.size.width or self.app.size.width) - 2)  # the panel's padding
        text = Text(logit_title(logits), style="bold")
        for label in logits.get("formats", ("fp16", "bf16")):
            part = logits.get(label)
            if not isinstance(part, dict):
                continue
            for i, line in enumerate(pack(f"{label}: ", _pairs(part), width)):
                text.append("\n")
                text.append(line[: len(label) + 2], style="bold" if i == 0 else "")
                text.append(line[len(label) + 2 :])
        for line in logit_inputs(logits):
            text.append(f"\n{line}", style="dim")
        return text

    def action_sort_by(self, column: str) -> None:
        """Sort on one column: numbers largest first, names A to Z; the same key again reverses."""
        table = self.query_one(VirtualTable)
        if table.sort_column == column:
            table.sort_by(column, reverse=not table.sort_reverse)
        else:
            table.sort_by(column, reverse=column != "name")

    def action_sort_reverse(self) -> None:
        table = self.query_one(VirtualTable)
        table.sort_by(table.sort_column or "name", reverse=not table.sort_reverse)

    def action_worst_first(self) -> None:
        table = self.query_one(VirtualTable)
        if getattr(self, "_weights", None) is not None:
            table.sort_column = None
            table.set_rows(drift_rows(self._weights))

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 1:  # at the first screen, as everywhere: q quits, Esc does not
            self.app.pop_screen()
