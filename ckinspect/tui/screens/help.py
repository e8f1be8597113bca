"""What each screen shows and every key, for a user who has not read the source."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Markdown

OVERVIEW = """\
# ckinspect

Opens checkpoints **without executing them** (a restricted unpickler, no `torch.load`).

- **Inspect**: header (path, format, size, step/epoch/world size, safe-load verdict), a bar of
  bytes per group with the optimizer's share, the tensor table (click a header or press `s`
  to sort, `/` to filter by substring or glob such as `model.*.attn.*`, `g` for a tree by
  module path), details of the selected tensor (`v` or Enter computes value statistics), and
  the findings (`f`; Enter on one jumps to its tensor).
- **Diff** (`d`, or `ckinspect diff A B`): both checkpoints side by side, aligned by name;
  `x` shows differences only, `n` goes to the next one.
- **Drift** (`w`): what fp16/bf16 rounding does to each tensor, worst first, and to the logits
  where the model is known.
- **Repair** (`R`): the plan for interrupted saves in the folder; nothing changes until you
  confirm, and the last repair can be undone.

`ctrl+p` opens the command palette: every action is there. `t` switches dark/light, `q` quits.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,question_mark,f1", "dismiss", "Close")]

    def __init__(self, behind: Screen) -> None:
        super().__init__()
        self.behind = behind

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="dialog"):
            yield Markdown(OVERVIEW + "\n" + self._keys())

    def _keys(self) -> str:
        lines = [
            f"## Keys on this screen ({type(self.behind).__name__.removesuffix('Screen').lower()})",
            "",
            "| key | action | what it does |",
            "|---|---|---|",
        ]
        bindings = [*getattr(self.behind, "BINDINGS", []), *self.app.BINDINGS]
        for b in bindings:
            if isinstance(b, Binding) and b.description:
                key = b.key_display or b.key.split(",")[0]
                lines.append(f"| `{key}` | {b.description} | {b.tooltip or ''} |")
        lines.append("| `escape` | Back | back to the previous screen (or clear the filter) |")
        return "\n".join(lines)

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(None)
