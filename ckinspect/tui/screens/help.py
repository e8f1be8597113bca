"""What each screen shows and every key, for a user who has not read the source."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, ClassVar

from rich.console import RenderableType
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

OVERVIEW = """\
# ckinspect

Opens checkpoints **without executing them** (a restricted unpickler, no `torch.load`).

- **Inspect**: header (path, format, size, step/epoch/world size, safe-load verdict), a bar of
  bytes per group with the optimizer's share, the tensor table (click a header, or one key per
  column: `s` size, `n` name, `e` elements, `T` dtype, `G` group, `P` shape; `r` reverses),
  `/` to filter by substring or glob such as `model.*.attn.*`, `g` for a tree by module path,
  details of the selected tensor (`v` or Enter computes value statistics; optimizer state names
  its parameter), `m` for the values beside the tensors (config, lr, loss, run settings), the
  findings (`f`; Enter on one jumps to its tensor), `y` copies a name, `o` exports the view.
- **Diff** (`d`, or `ckinspect diff A B`): both checkpoints side by side, aligned by name;
  `x` shows differences only, `n` goes to the next one, `D` sorts by max |Δ|, Enter shows one
  tensor's diff (max rel, count, first index, histogram); values beside the tensors below.
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
        """One Static of Rich renderables (Textual's Markdown widget made ~130 widgets and took most of a
        second to open): this screen's keys first, then the other keys, then what each screen shows."""
        from rich.console import Group
        from rich.markdown import Markdown

        with VerticalScroll(id="dialog"):
            yield Static(Group(*self._keys(), Markdown(OVERVIEW)), id="help-text")

    def key_rows(self) -> list[tuple[str, str, str, str]]:
        """(section, keys, action, what it does) from the bindings in force: the screen's, the focused
        widget's (moving around), the app's; each key once, shown as the footer shows it."""
        from textual.widget import Widget

        from ckinspect.tui.widgets.virtual_table import VirtualTable

        chain: list[Widget] = []
        node: object = self.behind.focused
        while isinstance(node, Widget) and node is not self.behind:
            chain.append(node)
            node = node.parent
        moving = [b for w in chain for b in getattr(w, "BINDINGS", [])] or list(VirtualTable.BINDINGS)
        sections = (
            ("this screen", getattr(self.behind, "BINDINGS", [])),
            ("moving around", moving),
            ("everywhere", self.app.BINDINGS),
        )
        rows: list[tuple[str, str, str, str]] = []
        seen: set[str] = set()
        for section, bindings in sections:
            rows.extend(self._section_rows(section, bindings, seen))
        return rows

    def _section_rows(self, section: str, bindings: Any, seen: set[str]) -> Iterator[tuple[str, str, str, str]]:
        """One section's described bindings, each with its keys not listed before (`seen` grows)."""
        for b in bindings:
            if not isinstance(b, Binding) or not b.description:
                continue
            keys = [k.strip() for k in b.key.split(",") if k.strip() not in seen]
            if not keys:
                continue
            seen.update(keys)
            shown = b.key_display or " ".join(self.app.get_key_display(dataclasses.replace(b, key=k)) for k in keys)
            yield (section, shown, b.description, b.tooltip or "")

    def _keys(self) -> list[RenderableType]:
        """A heading and a table per section: this screen, moving around, everywhere."""
        from rich.table import Table
        from rich.text import Text

        name = type(self.behind).__name__.removesuffix("Screen").lower()
        tables: dict[str, Table] = {}
        for where, keys, action, help_text in self.key_rows():
            if where not in tables:
                tables[where] = table = Table(box=None, show_header=False, padding=(0, 2, 0, 0), expand=False)
                table.add_column(style="bold", no_wrap=True)
                table.add_column(no_wrap=True)
                table.add_column()
            tables[where].add_row(Text(keys), Text(action), Text(help_text))
        out: list[RenderableType] = []
        for where, table in tables.items():
            heading = f"Keys on this screen ({name})" if where == "this screen" else f"Keys {where}"
            out += [Text(heading, style="bold"), table, Text("")]
        return out

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(None)
