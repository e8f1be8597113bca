"""The tensors grouped by module path, filled as nodes are opened (50,000 leaves stay cheap)."""

from __future__ import annotations

from collections import defaultdict

from rich.text import Text
from textual.message import Message
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from ckinspect.fmt import human_bytes, shape_text, terminal_safe
from ckinspect.model import Checkpoint, TensorInfo


class TensorTree(Tree[str]):
    DEFAULT_CSS = """
    TensorTree { height: 1fr; }
    """

    class TensorChosen(Message):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

    class ModuleChosen(Message):
        """A module path is highlighted: the details show it, never the tensor highlighted before."""

        def __init__(self, path: str, tensors: int, nbytes: int) -> None:
            super().__init__()
            self.path = path
            self.tensors = tensors
            self.nbytes = nbytes

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("checkpoint", id=id)
        self._children: dict[tuple[str, ...], list[str]] = {}
        self._leaves: dict[tuple[str, ...], list[TensorInfo]] = {}
        self._bytes: dict[tuple[str, ...], int] = {}
        self._counts: dict[tuple[str, ...], int] = {}
        self.show_root = False

    def load(self, ckpt: Checkpoint, names: set[str] | None = None) -> None:
        """Index the (filtered) tensors by module prefix; nodes are made when opened."""
        children: dict[tuple[str, ...], set[str]] = defaultdict(set)
        leaves: dict[tuple[str, ...], list[TensorInfo]] = defaultdict(list)
        sizes: dict[tuple[str, ...], int] = defaultdict(int)
        counts: dict[tuple[str, ...], int] = defaultdict(int)
        counted: set[tuple[tuple[str, ...], str, int, int]] = (
            set()
        )  # tied weights: their bytes once, as the bar counts them
        for t in ckpt.tensors:
            if names is not None and t.name not in names:
                continue
            parts = tuple(t.name.split("."))
            module = parts[:-1]
            leaves[module].append(t)
            for depth in range(len(module) + 1):
                counts[module[:depth]] += 1
                same_bytes = (module[:depth], t.storage_key, t.storage_offset, t.nbytes)
                if same_bytes not in counted:
                    counted.add(same_bytes)
                    sizes[module[:depth]] += t.nbytes
                if depth < len(module):
                    children[module[:depth]].add(module[depth])
        self._children = {k: sorted(v, key=_natural) for k, v in children.items()}
        self._leaves = dict(leaves)
        self._bytes = dict(sizes)
        self._counts = dict(counts)
        self.clear()
        self.root.data = ""
        self._fill(self.root, ())
        self.root.expand()
        self.cursor_line = 0

    def _fill(self, node: TreeNode[str], prefix: tuple[str, ...]) -> None:
        for part in self._children.get(prefix, []):
            path = prefix + (part,)
            label = Text.assemble((terminal_safe(part), "bold"), (f"  {human_bytes(self._bytes.get(path, 0))}", "dim"))
            node.add(label, data=".".join(path), allow_expand=True)
        for t in self._leaves.get(prefix, []):
            leaf = t.name.split(".")[-1]
            label = Text.assemble(
                terminal_safe(leaf), (f"  {t.dtype} {shape_text(t.shape)} {human_bytes(t.nbytes)}", "dim")
            )
            node.add_leaf(label, data=t.name)

    def on_tree_node_expanded(self, event: Tree.NodeExpanded[str]) -> None:
        node = event.node
        if node is self.root or node.children:
            return
        prefix = tuple(node.data.split(".")) if node.data else ()
        self._fill(node, prefix)

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted[str]) -> None:
        node = event.node
        if node.data and not node.allow_expand:
            self.post_message(self.TensorChosen(node.data))
        elif node.data:
            path = tuple(node.data.split("."))
            self.post_message(self.ModuleChosen(node.data, self._counts.get(path, 0), self._bytes.get(path, 0)))


def _natural(part: str) -> tuple[int, int | str]:
    return (0, int(part)) if part.isdigit() else (1, part)
