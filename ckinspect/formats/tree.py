"""Walking a decoded checkpoint tree: dotted names for everything in it, tensors first of all.

Shared by every reader. A tree is what the restricted unpickler returns: dicts, lists, tuples,
scalars, `TensorInfo` leaves and `Opaque` records (whose attributes are walked like a dict).
"""

from __future__ import annotations

import contextlib
import gc
from functools import partial
from itertools import chain, compress
from operator import attrgetter, is_

from ckinspect.fmt import bounded_str
from ckinspect.model import CompositeTensor, TensorInfo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

ROOT_TENSOR_NAME = "tensor"  # torch.save(tensor) has no key to name it by
MAX_TREE_DEPTH = 1000  # containers nested deeper are not entered: no checkpoint nests so, a hostile pickle may
MAX_KEY_CHARS = 1000  # past NAME_BUDGET, a longer key is cut in names, so that building paths stays bounded
# characters of dotted paths one flatten() builds with every key whole (tensor names are what users look up:
# a real checkpoint's names add up to far less); a pickle whose memo shares one long key at every level of
# a deep nest would make them quadratic, so past this budget keys are cut at MAX_KEY_CHARS
NAME_BUDGET = 64 << 20


def _named_composite(node: CompositeTensor, name: str, composites: list[CompositeTensor] | None) -> dict[str, Any]:
    """A composite tensor named where it is first met (listed in `composites`), walked as its parts."""
    if node.name == "":
        node.name = name
        if composites is not None:
            composites.append(node)
    elif node.name != name and composites is not None:
        composites.append(node.replace(name=name))  # the same tensor saved under a second name
    return node.parts


def _key(k: Any) -> str:
    """A dict key as a name: a str as it is, anything else (an int, a tuple a pickle's memo may share a
    billion times over) at a cost bounded by MAX_KEY_CHARS."""
    return k if type(k) is str else str(k) if type(k) is int else bounded_str(k, MAX_KEY_CHARS)


def _children(node: Any) -> list[tuple[str, Any]] | None:
    """(key, child) pairs of a container, or None for a leaf."""
    if isinstance(node, dict):
        return [(_key(k), v) for k, v in node.items()]
    if isinstance(node, (list, tuple)):
        return [(str(i), v) for i, v in enumerate(node)]
    fields = getattr(node, "fields", None)  # Opaque records (argparse.Namespace, dataclasses ...)
    if isinstance(fields, dict) and hasattr(node, "qualname"):
        pairs = [(_key(k), v) for k, v in fields.items()]
        pairs += [(_key(k), v) for k, v in getattr(node, "mapping", {}).items()]
        pairs += [(str(i), v) for i, v in enumerate(getattr(node, "items", []))]
        return pairs
    return None


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{_cut(key)}" if prefix else _cut(key)


def _cut(key: str) -> str:
    return key if len(key) <= MAX_KEY_CHARS else key[:MAX_KEY_CHARS] + "…"


def walk(tree: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every node, pre-order, as (dotted path, value); the root comes first with path `prefix`.

    Each container is entered once, so shared or self-referencing structures (which a pickle can
    build with its memo) cannot make the walk loop or explode; leaves are reported at every path.
    """
    entered: set[int] = set()
    stack: list[tuple[str, Any, int]] = [(prefix, tree, 0)]
    while stack:
        path, node, depth = stack.pop()
        yield path, node
        if depth >= MAX_TREE_DEPTH:
            continue
        children = _children(node)
        if children is None or id(node) in entered:
            continue
        entered.add(id(node))
        for key, child in reversed(children):
            stack.append((_join(path, key), child, depth + 1))


def scalar_leaves(tree: Any, kinds: tuple[type, ...], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """The (dotted path, value) pairs of walk() whose value is an instance of `kinds`, in walk()'s order,
    with no path built for a tensor: a diff of 640,000 tensors wants the few hundred scalars beside them."""
    entered: set[int] = set()
    stack: list[tuple[str, Any, int]] = [(prefix, tree, 0)]
    while stack:
        path, node, depth = stack.pop()
        if isinstance(node, kinds):
            yield path, node
        if depth >= MAX_TREE_DEPTH or type(node) is TensorInfo or type(node) in _SCALARS or id(node) in entered:
            continue
        pairs = _scalar_pairs(node)
        if pairs is None:
            continue
        entered.add(id(node))
        dot = path + "." if path else ""
        if all(type(v) in _SCALARS for _, v in pairs):  # leaves only (a list of ints): in order, past the stack
            for key, value in pairs:
                if isinstance(value, kinds):
                    yield dot + (key if len(key) <= MAX_KEY_CHARS else _cut(key)), value
            continue
        for key, child in reversed(pairs):
            stack.append((dot + (key if len(key) <= MAX_KEY_CHARS else _cut(key)), child, depth + 1))


def _scalar_pairs(node: Any) -> list[tuple[str, Any]] | None:
    """The (key, child) pairs scalar_leaves enters a container by, in order; None for a leaf. Most of a big tree is
    left out here: no pair for a tensor, nor for a dict of tensors alone (an optimizer's state of 213,000 params),
    which entered would yield nothing."""
    if isinstance(node, dict):
        return [(_key(k), v) for k, v in _dict_children(node)]
    if isinstance(node, (list, tuple)):
        return [(str(i), v) for i, v in enumerate(node) if type(v) is not TensorInfo]
    children = _children(node)
    return None if children is None else [(k, v) for k, v in children if type(v) is not TensorInfo]


def _dict_children(node: dict[Any, Any]) -> list[tuple[Any, Any]]:
    """A dict's (key as stored, child) pairs that scalar_leaves enters (_scalar_pairs)."""
    return [(k, v) for k, v in node.items() if type(v) is not TensorInfo and not _tensors_only(v)]


def scalar_changes(a: Any, b: Any, kinds: tuple[type, ...],
                   same: Callable[[Any, Any], bool]) -> list[tuple[str, Any, Any]] | None:  # fmt: skip
    """The leaves scalar_leaves would give two trees at the same paths, where `same` says they differ: (path, a's
    value, b's value), in scalar_leaves' order. Worked out by walking both trees at once, with no path built for a
    leaf that has not changed (a list of 213,000 parameter ids is compared in one go). None where the trees are not
    alike enough for that to be the whole answer (another shape or other keys anywhere, a container met twice, a
    record, or a key by which two leaves could share a path: holding a dot, empty, cut, an int past 64 bits or keys
    of two kinds in one dict): the caller then pairs the two trees' leaves by path."""
    if not set(kinds) >= _SCALAR_TYPES:
        return None  # a scalar scalar_leaves would skip could differ here
    return _TwoTrees(kinds, same).changes(a, b)


class _TwoTrees:
    """scalar_changes' walk: scalar_leaves' order over two trees at once."""

    def __init__(self, kinds: tuple[type, ...], same: Callable[[Any, Any], bool]) -> None:
        self.kinds, self.same = kinds, same
        self.out: list[tuple[str, Any, Any]] = []
        self.entered: tuple[set[int], set[int]] = (set(), set())
        self.stack: list[tuple[Any, Any, Any, int]] = []  # (path: None or (parent's, key), a, b, depth)

    def changes(self, a: Any, b: Any) -> list[tuple[str, Any, Any]] | None:
        self.stack.append((None, a, b, 0))
        while self.stack:
            if not self.visit(*self.stack.pop()):
                return None
        return self.out

    def visit(self, path: Any, x: Any, y: Any, depth: int) -> bool:
        """One pair of nodes: a pair of leaves compared, a pair of containers entered; False where they differ in
        kind."""
        leaf_x, leaf_y = isinstance(x, self.kinds), isinstance(y, self.kinds)
        if leaf_x or leaf_y:
            if leaf_x and leaf_y and not self.same(x, y):
                self.out.append((_path_of(path), x, y))
            return leaf_x and leaf_y  # a leaf has no children
        if depth >= MAX_TREE_DEPTH or (type(x) is TensorInfo and type(y) is TensorInfo):
            return True
        children = self.entering(x, y)
        return children is not None and self.enter(path, depth, *children)

    def entering(self, x: Any, y: Any) -> tuple[Any, Any, Any] | None:
        """Two containers' alike children (_alike_children), each container entered once; None otherwise."""
        if id(x) in self.entered[0] or id(y) in self.entered[1]:
            return None
        children = _alike_children(x, y)
        if children is not None:
            self.entered[0].add(id(x))
            self.entered[1].add(id(y))
        return children

    def enter(self, path: Any, depth: int, keys: Any, xs: Any, ys: Any) -> bool:
        """Children of an entered pair: leaves only (as scalar_leaves yields them past its stack) compared at once,
        or pushed; False where one side's are leaves only and the other's are not."""
        leaves_x, leaves_y = all(type(v) in _SCALAR_TYPES for v in xs), all(type(v) in _SCALAR_TYPES for v in ys)
        if leaves_x != leaves_y:
            return False
        if not leaves_x:
            children = zip(reversed(keys), reversed(xs), reversed(ys), strict=True)
            self.stack.extend(((path, k), x, y, depth + 1) for k, x, y in children)
        elif xs != ys or list(map(type, xs)) != list(map(type, ys)):  # else `same` of each holds (NaN is not here)
            pairs = zip(keys, xs, ys, strict=True)
            self.out.extend((_path_of((path, k)), x, y) for k, x, y in pairs if not self.same(x, y))
        return True


def _alike_children(x: Any, y: Any) -> tuple[Any, Any, Any] | None:
    """(keys, a's children, b's children) of two containers as scalar_leaves enters them, where both have the same
    plain keys (see scalar_changes); None otherwise (a record too: the caller pairs by path)."""
    if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
        return _alike_items(x, y)
    if isinstance(x, dict) and isinstance(y, dict):
        kept_x, kept_y = _dict_children(x), _dict_children(y)
        keys, keys_y = [k for k, _ in kept_x], [k for k, _ in kept_y]
        if keys == keys_y and _plain_keys(keys) and _plain_keys(keys_y):  # 1 == True: both sides' kinds
            return keys, [v for _, v in kept_x], [v for _, v in kept_y]
    return None


def _alike_items(x: Any, y: Any) -> tuple[Any, Any, Any] | None:
    """_alike_children of two lists or tuples: the same places hold tensors (left out) and other values."""
    if not (_has_tensor(x) or _has_tensor(y)):  # a list of 213,000 ids: as it is, no copy
        return (range(len(x)), x, y) if len(x) == len(y) else None
    keys = [i for i, v in enumerate(x) if type(v) is not TensorInfo]
    if keys != [i for i, v in enumerate(y) if type(v) is not TensorInfo]:
        return None
    return keys, [x[i] for i in keys], [y[i] for i in keys]


def _has_tensor(items: Any) -> bool:
    return any(map(_IS_TENSOR_TYPE, map(type, items)))


def _plain_keys(keys: list[Any]) -> bool:
    """Keys whose paths can never meet another leaf's: all str (not empty, no dot, not cut) or all int in 64 bits."""
    if all(type(k) is str for k in keys):
        return all(k and "." not in k and len(k) <= MAX_KEY_CHARS for k in keys)
    return all(type(k) is int for k in keys) and min(keys) >= -(1 << 63) and max(keys) < (1 << 63)


def _path_of(path: Any) -> str:
    """The dotted path of scalar_changes' (parent, key) chain, as scalar_leaves builds it ("" for the root)."""
    keys = []
    while path is not None:
        path, key = path
        keys.append(key if type(key) is str else str(key))
    return ".".join(reversed(keys))


_SCALARS = (str, int, float, bool, type(None), bytes)
_SCALAR_TYPES = frozenset(_SCALARS)
_SEQUENCES = frozenset((tuple, list))
_NUMBERS_ONLY = _SCALAR_TYPES | _SEQUENCES
_STRINGS = frozenset((str,))
_IS_TENSOR_TYPE = partial(is_, TensorInfo)


def _tensors_only(node: Any) -> bool:
    """A plain dict whose values are all tensor descriptors (or none at all), tested in C."""
    return type(node) is dict and all(map(_IS_TENSOR_TYPE, map(type, node.values())))


def _numbers_only(values: Any) -> bool:
    """Whether each of `values` is a scalar, or a tuple or list of scalars (no container, no tensor below it):
    a test run in C (no Python frame per value)."""
    return _NUMBERS_ONLY.issuperset(map(type, values)) and _SCALAR_TYPES.issuperset(
        map(type, chain.from_iterable(compress(values, map(_SEQUENCES.__contains__, map(type, values)))))
    )


def flatten(
    tree: Any, prefix: str = "", too_deep: list[str] | None = None, composites: list[CompositeTensor] | None = None
) -> list[TensorInfo]:
    """Every tensor in the tree, named by its dotted path (`model.layers.0.attn.wq.weight`).

    An unnamed descriptor (name "", as the unpickler makes them) is named in place the first time
    it is met, so the tree and the list share one object per tensor; one reached again by another
    path (the same tensor saved twice) or already named otherwise is returned as a named copy.
    Same traversal as walk() (containers entered once, pre-order), written out because a
    50,000-tensor checkpoint makes the generator's per-node overhead the slowest part of listing.
    """
    walk = _Flatten(too_deep, composites)
    walk.run(tree, prefix)
    return walk.out


class _Flatten:
    """flatten's walk: the tensors found (`out`), the containers entered, and the stack of (the parent's path
    and ".", the key, node, depth), whose paths are joined only where they are used (a tensor's name, a
    container's children), never for the thousands of shapes and number lists that hold no tensor."""

    __slots__ = ("budget", "composites", "entered", "out", "stack", "too_deep")

    def __init__(self, too_deep: list[str] | None, composites: list[CompositeTensor] | None) -> None:
        self.out: list[TensorInfo] = []
        self.entered: set[int] = set()
        self.stack: list[tuple[str, str, Any, int]] = []
        self.budget = NAME_BUDGET
        self.too_deep, self.composites = too_deep, composites

    def run(self, tree: Any, prefix: str) -> None:
        stack, out = self.stack, self.out
        stack.append(("", prefix, tree, 0))
        while stack:
            dot, key, node, depth = stack.pop()
            kind = type(node)
            if kind is TensorInfo:  # most nodes of a big checkpoint: named here, no call
                name = dot + key or ROOT_TENSOR_NAME
                if node.name == "":
                    node.name = name  # never changed once named: this is where its reader names it
                    out.append(node)
                else:
                    out.append(node if node.name == name else node.replace(name=name))
            elif (kind is tuple or kind is list) and _SCALAR_TYPES.issuperset(map(type, node)):
                self.enter_leaf(node, dot, key, depth)  # a shape, a list of numbers: nothing in it to list
            else:
                self.visit(node, kind, dot + key, depth)

    def visit(self, node: Any, kind: type, path: str, depth: int) -> None:
        if kind is CompositeTensor:
            node = _named_composite(node, path or ROOT_TENSOR_NAME, self.composites)
        if isinstance(node, TensorInfo):
            self.out.append(node.replace(name=path or ROOT_TENSOR_NAME))
            return
        if id(node) not in self.entered:
            self.expand(node, kind, path, depth)

    def expand(self, node: Any, kind: type, path: str, depth: int) -> None:
        """A container met for the first time: entered, and its children pushed (or too deep)."""
        if isinstance(node, dict) and depth < MAX_TREE_DEPTH and _numbers_only(node.values()):  # OrderedDict too
            self.enter_numbers(node, path, depth + 1)
            return
        if isinstance(node, dict) and depth < MAX_TREE_DEPTH and (spent := _name_fresh_tensors(node, path, self.out)):
            self.entered.add(id(node))  # a state dict: its tensors named in bulk
            self.budget -= spent
            return
        children = _children(node)
        if children is None:
            return
        self.entered.add(id(node))
        if depth >= MAX_TREE_DEPTH:
            self.note_too_deep(path)
            return
        self.push(children, path + "." if path else "", depth + 1)

    def push(self, children: list[tuple[str, Any]], dot: str, depth: int) -> None:
        """The children to visit, popped in their order; keys cut once NAME_BUDGET is spent."""
        budget, append = self.budget, self.stack.append
        for key, child in reversed(children):
            if type(child) in _SCALAR_TYPES:
                continue
            budget -= len(dot) + len(key)
            append((dot, key if len(key) <= MAX_KEY_CHARS or budget > 0 else _cut(key), child, depth))
        self.budget = budget

    def enter_leaf(self, node: Any, dot: str, key: str, depth: int) -> None:
        """A container of scalars, entered as any container is: once, and too deep at the limit."""
        if id(node) not in self.entered:
            self.entered.add(id(node))
            if depth >= MAX_TREE_DEPTH:
                self.note_too_deep(dot + key)

    def enter_numbers(self, node: dict[Any, Any], path: str, depth: int) -> None:
        """A dict of shapes (723 torch.Size in each ZeRO-3 model-states file) and its children (at `depth`):
        popping each child would only enter it (enter_leaf), and nothing else would come between their pops,
        so that is done now, in their order. Above the depth limit with string keys, in C: entering them
        in any order is the same set, and the budget spends the same sum."""
        self.entered.add(id(node))
        dot = path + "." if path else ""
        values = node.values()
        held = list(map(_SEQUENCES.__contains__, map(type, values)))  # the children that are not scalars
        if depth < MAX_TREE_DEPTH and _STRINGS.issuperset(map(type, node)):
            self.entered.update(map(id, compress(values, held)))
            self.budget -= len(dot) * sum(held) + sum(map(len, compress(node, held)))
            return
        for k, child in compress(node.items(), held):
            key = k if type(k) is str else _key(k)
            self.budget -= len(dot) + len(key)
            self.enter_leaf(child, dot, key, depth)

    def note_too_deep(self, path: str) -> None:
        if self.too_deep is not None and not self.too_deep:
            self.too_deep.append(path[:200])


def _name_fresh_tensors(node: dict[Any, Any], path: str, out: list[TensorInfo]) -> int:
    """A dict of tensors only (a state dict: 50,000 of them), named and listed as flatten's stack would, in bulk:
    every key a str of at most MAX_KEY_CHARS (so none is cut, whatever the budget), every value a TensorInfo not
    named yet and met once. The characters its names charge to the budget; 0 (nothing done) when it is not such
    a dict: flatten then walks it child by child."""
    if not node or set(map(type, node.values())) != {TensorInfo} or set(map(type, node)) != {str}:
        return 0
    tensors = list(node.values())
    if max(map(len, node)) > MAX_KEY_CHARS or set(map(_NAME, tensors)) != {""}:
        return 0
    names = list(map((path + "." if path else "").__add__, node))
    if not all(names):  # "" (the root's own key ""): flatten names it ROOT_TENSOR_NAME
        return 0
    for tensor, name in zip(tensors, names, strict=True):
        tensor.name = name  # never changed once named: this is where its reader names it
    if list(map(_NAME, tensors)) != names:  # one tensor under two keys (the later name stuck): not this way
        for tensor in tensors:
            tensor.name = ""
        return 0
    out += tensors
    return sum(map(len, names))


_NAME = attrgetter("name")


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while a reader builds tens of thousands of small objects
    that hold no cycles: its generational passes otherwise cost ~30% of listing 50,000 tensors.

    On the way out what was built goes straight to the oldest generation (freeze, then unfreeze): left in the
    youngest, the first collection after the pause would walk all of it, and the next one again (5% of
    listing 50,000 tensors). It is still collected, at the next full collection."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.freeze()
            gc.unfreeze()
            gc.enable()
