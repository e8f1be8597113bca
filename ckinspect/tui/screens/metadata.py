"""Everything a checkpoint holds beside its tensors, as a tree: config, optimizer param_groups (lr,
betas, weight decay), loss, step, run settings."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Label, Tree
from textual.widgets.tree import TreeNode

from ckinspect.fmt import value_text
from ckinspect.model import Checkpoint
from ckinspect.tui.core import natural_key
from ckinspect.tui.widgets.footer import KeysFooter

LEAVES_SHOWN = 16  # a list of 5,000 parameter ids shows its first ones and a count


def nest(values: dict[str, Any]) -> dict[str, Any]:
    """Dotted paths (`optimizer.param_groups.0.lr`) as nested dicts."""
    root: dict[str, Any] = {}
    for path, value in values.items():
        node = root
        *parents, leaf = path.split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):  # a value and a container at one path: keep both
                child = node[part] = {"": child}
            node = child
        node[leaf] = value
    return root


class MetadataScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,m", "back", "Back", tooltip="Back to the tensors"),
        Binding("e", "expand_all", "Expand all", tooltip="Open every branch"),
    ]

    def __init__(self, ckpt: Checkpoint) -> None:
        super().__init__()
        self.ckpt = ckpt

    def compose(self) -> ComposeResult:
        yield Label(f"beside the tensors: {self.ckpt.path}", classes="title-line")
        yield Tree("values", id="values-tree")
        yield KeysFooter()

    def on_mount(self) -> None:
        from ckinspect.analysis.diff import non_tensor_values

        tree = self.query_one(Tree)
        values = non_tensor_values(self.ckpt)
        if not values:
            tree.root.add_leaf("no values beside the tensors")
        self._add(tree.root, nest(values))
        tree.root.expand()
        for child in tree.root.children:
            if len(child.children) <= LEAVES_SHOWN:
                child.expand()
        tree.focus()

    def _add(self, node: TreeNode[None], branch: dict[str, Any]) -> None:
        leaves = 0
        for key in sorted(branch, key=lambda k: (isinstance(branch[k], dict), natural_key(k))):
            value = branch[key]
            if isinstance(value, dict):
                self._add(node.add(key), value)
                continue
            leaves += 1
            if leaves > LEAVES_SHOWN:
                continue
            node.add_leaf(f"{key}: {value_text(value)}" if key else value_text(value))
        if leaves > LEAVES_SHOWN:
            node.add_leaf(f"… and {leaves - LEAVES_SHOWN:,} more")

    def action_expand_all(self) -> None:
        self.query_one(Tree).root.expand_all()

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 1:
            self.app.pop_screen()
