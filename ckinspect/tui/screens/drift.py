"""fp16/bf16 round-trip error per tensor, worst first, and the logit drift where the model is known."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, Label, Static
from textual.worker import Worker, WorkerState

from ckinspect.model import Checkpoint
from ckinspect.tui.core import NotAvailable, as_record, as_records, flatten, format_value
from ckinspect.tui.messages import DriftComputed, Progress
from ckinspect.tui.screens.inspect import failure_text
from ckinspect.tui.widgets.virtual_table import Column, Row, VirtualTable

_NAME_KEYS = ("name", "tensor")
_WORST_KEYS = ("fp16_max_abs", "max_abs", "fp16_max_rel", "max_rel")
_HIDDEN = ("fp16_changed", "bf16_changed", "error")  # kept for the details line, not a column


def drift_table(records: list[dict[str, Any]]) -> tuple[list[Column], list[Row]]:
    """Columns from the records' own fields (name first), rows worst first."""
    if not records:
        return [Column("name", "tensor", None)], []
    records = [flatten(r) for r in records]
    name_key = next((k for k in _NAME_KEYS if k in records[0]), None)
    fields = [k for k in records[0] if k != name_key and k not in _HIDDEN and not isinstance(records[0][k], (dict, list))]
    worst = next((k for k in _WORST_KEYS if k in fields), next((k for k in fields if isinstance(records[0][k], (int, float))), None))

    def badness(r: dict[str, Any]) -> tuple[float, float]:
        # values that overflow to inf are worse than any finite rounding error
        overflow = r.get("fp16_overflow") or 0
        value = r.get(worst) if worst else 0.0
        return (-float(overflow), -float(value) if isinstance(value, (int, float)) else 0.0)

    records = sorted(records, key=badness)
    columns = [Column("name", "tensor", None, min_width=20, keep_end=True)]
    for k in fields:
        essential = k in (worst, "fp16_overflow", "bf16_max_abs")
        label = k.replace("_max_abs", " max|Δ|").replace("_max_rel", " max rel").replace("_", " ")
        columns.append(Column(k, label, max(9, min(13, len(label))), justify="right", optional=not essential))
    rows = []
    for index, r in enumerate(records):
        name = str(r.get(name_key, index)) if name_key else str(index)
        cells = (name, *(format_value(r.get(k)) for k in fields))
        keys = (name, *((r.get(k) if isinstance(r.get(k), (int, float)) else str(r.get(k))) for k in fields))
        rows.append(Row(f"{name}#{index}", cells, keys))
    return columns, rows


class DriftScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "sort_next", "Sort", tooltip="Sort on the next column"),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self, target: Path, ckpt: Checkpoint | None = None) -> None:
        super().__init__()
        self.target, self.ckpt = Path(target), ckpt

    def compose(self) -> ComposeResult:
        yield Label(Text.assemble(("drift ", "bold"), str(self.target), " — fp16/bf16 vs the stored values"), classes="title-line")
        yield Static("computing rounding errors…", classes="summary-line", id="logits")
        yield VirtualTable([Column("name", "tensor", None)], id="drift-table", empty_text="computing…")
        yield Footer()

    def on_mount(self) -> None:
        self.compute()

    @work(thread=True, exclusive=True, exit_on_error=False, group="drift", description="drift")
    def compute(self) -> None:
        backend = self.app.backend
        ckpt = self.ckpt or backend.load(self.target)
        self.ckpt = ckpt
        weights = backend.weight_drift(ckpt, progress=lambda f: self.post_message(Progress("drift", f)))
        self.post_message(DriftComputed(weights, None, "computing logit drift…"))
        try:
            logits, note = backend.logit_drift(ckpt)
        except NotAvailable as exc:
            logits, note = None, f"logit drift not available yet ({exc})"
        except Exception as exc:  # the model may be unknown: the weights still count
            logits, note = None, f"logit drift: {exc}"
        self.post_message(DriftComputed(weights, logits, note or "logit drift: the model is not known"))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            self.query_one("#logits", Static).update(f"weight drift {failure_text(event.worker.error)}")
            self.query_one(VirtualTable).empty_text = "nothing to show"
            self.query_one(VirtualTable).refresh()

    def on_progress(self, message: Progress) -> None:
        if message.task == "drift":
            self.query_one("#logits", Static).update(f"computing rounding errors… {message.fraction:.0%}")

    def on_drift_computed(self, message: DriftComputed) -> None:
        self.query_one("#logits", Static).update(self._logit_text(message.logits, message.logits_note))
        if message.weights is getattr(self, "_weights", None):
            return  # the logit drift arrived after the weights: the table stands
        self._weights = message.weights
        records = as_records(message.weights, "tensors", "per_tensor", "rows", "items")
        columns, rows = drift_table(records)
        table = self.query_one(VirtualTable)
        table.columns = columns
        table.empty_text = "no floating tensors"
        table.set_rows(rows)
        table.focus()

    def _logit_text(self, logits: Any, note: str) -> Text:
        if logits is None:
            return Text(note, style="italic")
        record = as_record(logits)
        text = Text("logits vs fp32", style="bold")
        model = record.get("model")
        if model:
            text.append(f" ({model}, seed {record.get('seed', '?')})", style="dim")
        for label in ("fp16", "bf16"):
            part = record.get(label)
            if not isinstance(part, dict):
                continue
            text.append(f"\n{label}: ", style="bold")
            text.append(f"max |Δlogit| {format_value(part.get('max_abs'))}  mean {format_value(part.get('mean_abs'))}")
            agreement = part.get("top1_agreement")
            if isinstance(agreement, (int, float)):
                text.append(f"  top-1 agreement {agreement:.2%}")
        return text

    def action_sort_next(self) -> None:
        table = self.query_one(VirtualTable)
        keys = [c.key for c in table.columns]
        current = table.sort_column
        following = keys[(keys.index(current) + 1) % len(keys)] if current in keys else keys[min(1, len(keys) - 1)]
        table.sort_by(following, reverse=following != "name")

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 1:
            self.app.pop_screen()
        else:
            self.app.exit(0)
