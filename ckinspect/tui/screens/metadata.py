"""Everything a checkpoint holds beside its tensors, as a tree: config, optimizer param_groups (lr,
betas, weight decay, and the parameters by name where the optimizer state maps to them), loss, step,
run settings, and a safetensors file's `__metadata__`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Label, Tree
from textual.widgets.tree import TreeNode

from ckinspect.fmt import terminal_safe, value_text
from ckinspect.model import Checkpoint
from ckinspect.tui.core import natural_key
from ckinspect.tui.widgets.footer import KeysFooter

LEAVES_SHOWN = 16  # a list of 5,000 parameter ids shows its first ones and a count
_PARAM_ID = re.compile(r"^(?P<prefix>(?:.*\.)?)param_groups\.\d+\.params\.\d+$")


@dataclass(frozen=True)
class ParamRef:
    """A parameter index in `param_groups[i]["params"]` and the parameter it stands for."""

    index: int
    name: str


def name_params(values: dict[str, Any], params: dict[str, str]) -> dict[str, Any]:
    """`param_groups.N.params.K: 16` becomes `16 model.layers.1.ffn.w2.weight` where the optimizer state
    `state.16.*` is mapped to a parameter (analysis/params.py); other indices stay numbers."""
    from ckinspect.analysis.params import names_by_index

    names = names_by_index(params)
    if not names:
        return values
    out = dict(values)
    for path, value in values.items():
        m = _PARAM_ID.match(path)
        if m and isinstance(value, int) and (m["prefix"], value) in names:
            out[path] = ParamRef(value, names[(m["prefix"], value)])
    return out


def header_metadata(ckpt: Checkpoint) -> tuple[str, dict[str, Any]] | None:
    """(branch title, values) of what the reader found beside a tree of tensors only: a safetensors
    header's `__metadata__` (the reports show it; the tree holds none of it)."""
    if ckpt.tree is None or not ckpt.metadata or ckpt.format not in ("safetensors", "sharded"):
        return None
    return ("__metadata__" if ckpt.format == "safetensors" else "metadata"), dict(ckpt.metadata)


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

    def __init__(self, ckpt: Checkpoint, params: dict[str, str] | None = None) -> None:
        super().__init__()
        self.ckpt = ckpt
        self.params = params or {}  # optimizer state -> its parameter (the inspect screen's mapping)

    def compose(self) -> ComposeResult:
        yield Label(Text(f"beside the tensors: {terminal_safe(self.ckpt.path)}"), classes="title-line")
        yield Tree("values", id="values-tree")
        yield KeysFooter()

    def on_mount(self) -> None:
        from ckinspect.analysis.diff import non_tensor_values

        tree = self.query_one(Tree)
        values = name_params(non_tensor_values(self.ckpt), self.params)
        branches = nest(values)
        header = header_metadata(self.ckpt)
        if header is not None:
            branches[header[0]] = header[1]  # its keys as written: a dot in one is not a level
        if not branches:
            tree.root.add_leaf("no values beside the tensors")
        self._add(tree.root, branches)
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
                self._add(node.add(Text(terminal_safe(key))), value)
                continue
            leaves += 1
            if leaves > LEAVES_SHOWN:
                continue
            shown = f"{value.index} {terminal_safe(value.name)}" if isinstance(value, ParamRef) else value_text(value)
            node.add_leaf(Text(f"{terminal_safe(key)}: {shown}" if key else shown))
        if leaves > LEAVES_SHOWN:
            node.add_leaf(f"… and {leaves - LEAVES_SHOWN:,} more")

    def action_expand_all(self) -> None:
        self.query_one(Tree).root.expand_all()

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 1:
            self.app.pop_screen()
