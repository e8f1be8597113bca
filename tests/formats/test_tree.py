"""Naming the tensors of a decoded pickle tree: dotted paths, list indices, shared and cyclic subtrees."""

from __future__ import annotations

from ckinspect.formats.tree import MAX_TREE_DEPTH, flatten, scalar_leaves, walk
from ckinspect.formats.unpickler import _OrderedDictStandIn
from ckinspect.model import TensorInfo


def _ti(key="0"):
    return TensorInfo("", "float32", (2,), (1,), key, 0)


def test_flatten_names_by_dotted_path_and_list_index():
    t1, t2, t3 = _ti("0"), _ti("1"), _ti("2")
    tree = {"model": {"layers": [{"w": t1}, {"w": t2}]}, "optimizer": {"state": {3: {"exp_avg": t3}}}, "step": 4}
    assert [t.name for t in flatten(tree)] == ["model.layers.0.w", "model.layers.1.w", "optimizer.state.3.exp_avg"]
    assert [t.storage_key for t in flatten(tree)] == ["0", "1", "2"]
    assert t1.name == "model.layers.0.w" and flatten(tree)[0] is t1  # named in place: tree and list share it
    assert [t.name for t in flatten(tree, prefix="ckpt")][0] == "ckpt.model.layers.0.w"
    assert t1.name == "model.layers.0.w"  # a differently named flatten gets copies
    assert flatten(_ti())[0].name == "tensor"


def test_flatten_names_a_tensor_saved_twice_at_both_paths():
    t = _ti()
    names = [x.name for x in flatten({"embed": t, "head": t})]
    assert names == ["embed", "head"] and t.name == "embed"


def test_walk_survives_cycles_and_shared_subtrees():
    shared = {"w": _ti()}
    loop: list = []
    loop.append(loop)
    tree = {"a": shared, "b": shared, "loop": loop}
    paths = [p for p, _ in walk(tree)]
    assert paths[0] == "" and "a.w" in paths and "loop" in paths
    assert len(paths) < 10
    # an exponential DAG built through the memo stays linear: 2**60 paths, so only a walk that enters
    # each container once ever returns here
    node: list = [_ti()]
    for _ in range(60):
        node = [node, node]
    assert len(flatten(node)) == 1


def test_scalar_leaves_are_walks_scalars_in_walks_order():
    """The diff's non-tensor values come from scalar_leaves: the same (path, value) pairs as walk() filtered,
    through shared and cyclic containers, records' fields, a nest past MAX_TREE_DEPTH and dicts of tensors alone
    (an optimizer's state: not entered), empty, shared, ordered or beside scalars."""
    import collections

    moments = {"exp_avg": _ti(), "exp_avg_sq": _ti()}
    state = {0: moments, 1: {}, 2: {"exp_avg": _ti()}, 3: moments, 4: collections.OrderedDict(m=_ti())}
    shared = {"lr": 0.1, "w": _ti(), "betas": (0.9, 0.95), "state": state, "only": {"s": moments, "k": 1}}
    cyclic: list = [1, "x"]
    cyclic.append(cyclic)
    deep: dict = {"leaf": 7}
    for _ in range(MAX_TREE_DEPTH + 2):
        deep = {"d": deep, "n": None}
    tree = {"a": shared, "b": shared, "c": cyclic, "t": _ti(), "deep": deep, "step": 3, "flag": True, b"k": b"v"}
    kinds = (str, int, float, bool, bytes, type(None))
    assert list(scalar_leaves(tree, kinds)) == [(p, v) for p, v in walk(tree) if isinstance(v, kinds)]
    assert ("a.lr", 0.1) in list(scalar_leaves(tree, kinds)) and ("step", 3) in list(scalar_leaves(tree, kinds))


def _flatten_as_before(tree, too_deep):
    """flatten as it was before it left shapes and number lists unjoined: every container popped and entered
    alike (the oracle for the order in which a shared container is first entered, and so for too_deep)."""
    from ckinspect.formats.tree import _children

    out, entered, stack = [], set(), [("", tree, 0)]
    while stack:
        path, node, depth = stack.pop()
        if type(node) is TensorInfo:
            out.append(path or "tensor")
            continue
        if id(node) in entered or (children := _children(node)) is None:
            continue
        entered.add(id(node))
        if depth >= MAX_TREE_DEPTH:
            if not too_deep:
                too_deep.append(path[:200])
            continue
        for key, child in reversed(children):
            if type(child) not in (str, int, float, bool, type(None), bytes):
                stack.append((f"{path}.{key}" if path else key, child, depth + 1))
    return out


def _chain(inner, levels):
    for _ in range(levels):
        inner = {"d": inner}
    return inner


def test_flatten_enters_shared_number_lists_in_the_same_order_as_any_container():
    """Shapes and number lists are not joined into paths, yet a tuple shared at a shallow place and at the
    depth limit is judged too deep exactly when it was before: when the deep visit comes first."""
    shape, empty = (3, 4), []
    depth_of = MAX_TREE_DEPTH - 1  # the chain's innermost dict sits here: its child at the limit
    trees = [
        [_chain({"s": shape}, depth_of - 1), shape],  # the deep visit first: too deep
        [shape, _chain({"s": shape}, depth_of - 1)],  # the shallow one first: entered, the deep one skipped
        {"a": _chain({"s": shape, "w": _ti()}, depth_of - 1), "b": {"s": shape}},
        {"a": _chain({"e": empty}, depth_of - 1)},  # an empty list at the limit counts as a container there
        {"a": _chain({"e": [1, "x", None, 2.0, b"", True]}, depth_of - 2), "t": [_ti(), (1, 2)], "n": [(), [()]]},
        {"w": _ti(), "shapes": {f"layer.{i}": (i, 2 * i) for i in range(50)}, "mixed": [1, (2, _ti())]},
        # dicts of shapes (entered in one go): at the limit, sharing a shape with a deeper visit before or after
        {"a": _chain({"s": {"x": shape, "y": 1, 2: [3.0], (4, 5): ()}}, depth_of - 2), "b": {"k": shape}},
        {"b": {"k": shape, "n": None}, "a": _chain({"s": shape}, depth_of - 1)},
        {"a": _chain({"s": shape}, depth_of - 1), "b": {"k": shape, "n": None}},
        {"a": _chain({"e": {}}, depth_of - 1), "b": {"k": [[1]], "l": [shape, [shape]]}},
        {"x" * 3000: {"y" * 1500: (1,)}, "z": [_ti()]},
        # torch.save's OrderedDict of shapes (DeepSpeed's param_shapes), as the unpickler's stand-in decodes it
        {"a": _chain({"s": _OrderedDictStandIn(x=shape, y=(1, 2))}, depth_of - 2), "b": [shape]},
        {"b": [shape], "a": _chain({"s": _OrderedDictStandIn(x=shape, y=(1, 2))}, depth_of - 2)},
    ]
    for tree in trees:
        expected_deep: list[str] = []
        expected = _flatten_as_before(tree, expected_deep)
        too_deep: list[str] = []
        assert [t.name for t in flatten(tree, too_deep=too_deep)] == expected
        assert too_deep == expected_deep
    assert _flatten_as_before(trees[0], []) == [] and len(_flatten_as_before(trees[2], [])) == 1
    deep: list[str] = []
    _flatten_as_before(trees[0], deep)
    assert deep and deep[0].startswith("0.d.d")  # the cases do reach the limit
    deep = []
    _flatten_as_before(trees[1], deep)
    assert not deep


def _random_tree(seed: int) -> object:
    """A decoded-pickle-like tree: dicts (plain, and state-dict-like ones of tensors only), lists and tuples,
    tensors (some under two keys, some already named), scalars, a long key, the empty key, an int key."""
    import random

    from ckinspect.formats.tree import MAX_KEY_CHARS

    rng = random.Random(seed)
    pool = [_ti(str(i)) for i in range(6)]
    named = TensorInfo("elsewhere", "float32", (2,), (1,), "n", 0)

    def node(depth: int) -> object:
        roll = rng.random()
        if depth > 3 or roll < 0.3:
            return rng.choice([_ti(str(rng.random())), _ti(), rng.choice(pool), named, 3, "s", None, 1.5])
        if roll < 0.55:  # tensors only: the bulk path's case, sometimes with a shared or named one
            keys = [rng.choice(["w", "bias", "x" * (MAX_KEY_CHARS + 5), "", "layer.0"]) + str(i) for i in range(4)]
            if rng.random() < 0.2:
                keys[0] = ""
            return {k: (_ti() if rng.random() < 0.8 else rng.choice([*pool, named])) for k in keys}
        if roll < 0.8:
            return {rng.choice(["a", "b", 7, ""]) if rng.random() < 0.5 else str(i): node(depth + 1)
                    for i in range(rng.randint(0, 4))}  # fmt: skip
        items = [node(depth + 1) for _ in range(rng.randint(0, 3))]
        return items if rng.random() < 0.5 else tuple(items)

    return node(0)


def test_flatten_names_dicts_of_tensors_in_bulk_exactly_as_one_by_one(monkeypatch):
    """flatten's bulk path for a dict of fresh tensors (a state dict) gives what naming them one by one gives:
    the same names, in the same order, the same objects named in place and the same copies."""
    import pickle

    from ckinspect.formats import tree as tree_module

    budget = tree_module.NAME_BUDGET
    for seed in range(300):
        # every third tree with a budget that runs out: its long keys are cut from then on
        monkeypatch.setattr(tree_module, "NAME_BUDGET", 40 + seed if seed % 3 == 0 else budget)
        tree = _random_tree(seed)
        one_by_one = pickle.loads(pickle.dumps(tree))  # the same tree, its own descriptors (sharing kept)
        with monkeypatch.context() as m:
            m.setattr(tree_module, "_name_fresh_tensors", lambda node, path, out: 0)
            expected = flatten(one_by_one, prefix="p" if seed % 2 else "")
        got = flatten(tree, prefix="p" if seed % 2 else "")
        assert [t._values() for t in got] == [t._values() for t in expected]
        assert [p for p, _ in walk(tree)] == [p for p, _ in walk(one_by_one)]
        leaves = [v.name for _, v in walk(tree) if isinstance(v, TensorInfo)]
        assert leaves == [v.name for _, v in walk(one_by_one) if isinstance(v, TensorInfo)]
        named_in_place = [any(t is v for _, v in walk(tree)) for t in got]
        assert named_in_place == [any(t is v for _, v in walk(one_by_one)) for t in expected]


def _optimizer_tree(n: int, lr: float = 1e-3) -> dict:
    return {"model": {f"layers.{i}.w": _ti() for i in range(n)},
            "optimizer": {"state": {i: {"exp_avg": _ti(), "exp_avg_sq": _ti()} for i in range(n)},
                          "param_groups": [{"lr": lr, "betas": (0.9, 0.95), "params": list(range(n))}]},
            "step": 30, "nan": float("nan"),
            "config": {"dim": 64, "name": "tiny", "flags": [True, None, b"x"]}}  # fmt: skip


def _changes_by_path(a, b):
    """The diff's answer by path (scalar_leaves of each side in a dict): changed, only in A, only in B."""
    from ckinspect.analysis.diff import _SCALAR_TYPES, same_value

    va = {p: v for p, v in scalar_leaves(a, _SCALAR_TYPES) if p}
    vb = {p: v for p, v in scalar_leaves(b, _SCALAR_TYPES) if p}
    changed = [(p, x, vb[p]) for p, x in va.items() if p in vb and not same_value(x, vb[p])]
    return changed, [p for p in va if p not in vb], [p for p in vb if p not in va]


def _nested(depth: int, leaf) -> dict:
    node = {"leaf": leaf}
    for _ in range(depth):
        node = {"d": node, "n": 1}
    return node


def _tweaked(**changes):
    tree = _optimizer_tree(50)
    group = tree["optimizer"]["param_groups"][0]
    for key, value in changes.items():
        if key in group:
            group[key] = value
        else:
            tree[key] = value
    return tree


class _Record:
    """What the unpickler keeps of a benign object (argparse.Namespace ...): its fields, walked like a dict."""

    qualname = "argparse.Namespace"

    def __init__(self) -> None:
        self.fields = {"lr": 0.1}


SHARED = {"lr": 0.1}
ALIKE = {  # pairs the one walk answers: (a, b)
    "equal": (_optimizer_tree(50), _optimizer_tree(50)),
    "lr": (_optimizer_tree(50), _optimizer_tree(50, lr=2e-3)),
    "param id, int for bool, int for float": (_optimizer_tree(3), _tweaked(params=[True, 1.0, 2])),
    "nan for a number, str for bytes, bytes for bytearray": (
        _tweaked(nan=float("nan"), step="30", config=b"x"), _tweaked(nan=1.0, step=b"30", config=bytearray(b"x"))),
    "tuple for a list, a tensor's place": ({"p": [1, _ti(), 2]}, {"p": (1, _ti(), 3)}),
    "past the depth limit": (_nested(MAX_TREE_DEPTH + 3, 1), _nested(MAX_TREE_DEPTH + 3, 2)),
    "at the depth limit": (_nested(MAX_TREE_DEPTH - 2, 1), _nested(MAX_TREE_DEPTH - 2, 2)),
    "a scalar root": (5, 6),
    "an ordered dict": ({"s": _OrderedDictStandIn(a=1, b=2)}, {"s": _OrderedDictStandIn(a=1, b=3)}),
    "a tensor root": (_ti(), _ti()),
}  # fmt: skip
UNLIKE = {  # pairs it leaves to the pairing by path
    "a key more": ({"a": 1}, {"a": 1, "b": 2}),
    "a longer list": ({"p": [1, 2]}, {"p": [1, 2, 3]}),
    "tensors at other places": ({"p": [_ti(), 1]}, {"p": [1, _ti()]}),
    "a tensor for a scalar": ({"w": _ti()}, {"w": 1}),
    "a dict for a scalar": ({"w": {"x": 1}}, {"w": 1}),
    "keys of two kinds": ({1: 1, "1": 2}, {1: 1, "1": 2}),
    "a dotted key": ({"a.b": 1, "a": {"b": 2}}, {"a.b": 1, "a": {"b": 2}}),
    "an empty key": ({"": {"x": 1}, "x": 2}, {"": {"x": 1}, "x": 2}),
    "bool keys for int keys": ({1: 1}, {True: 1}),
    "an int key past 64 bits": ({1 << 70: 1}, {1 << 70: 2}),
    "a shared container": ({"a": SHARED, "b": SHARED}, {"a": {"lr": 0.1}, "b": {"lr": 0.1}}),
    "a record": ({"args": _Record()}, {"args": _Record()}),
    "a cut key": ({"k" * 2000: 1}, {"k" * 2000: 2}),
}  # fmt: skip


def test_scalar_changes_is_the_diff_by_path_where_the_trees_are_alike():
    """tree.scalar_changes (the diff's one walk over two trees) against the pairing of scalar_leaves by path: the
    same changes in the same order where it answers, and it answers every pair alike in shape and plain keys."""
    from ckinspect.analysis.diff import _SCALAR_TYPES, same_value
    from ckinspect.formats.tree import scalar_changes

    for name, (a, b) in {**ALIKE, **UNLIKE}.items():
        got = scalar_changes(a, b, _SCALAR_TYPES, same_value)
        assert (got is not None) == (name in ALIKE), name
        changed, only_a, only_b = _changes_by_path(a, b)
        if got is not None:
            assert ([c for c in got if c[0]], only_a, only_b) == (changed, [], []), name
    paths = {name: [c[0] for c in scalar_changes(*ALIKE[name], _SCALAR_TYPES, same_value)] for name in ALIKE}
    assert paths["lr"] == ["optimizer.param_groups.0.lr"] and paths["equal"] == []
    assert paths["param id, int for bool, int for float"] == [f"optimizer.param_groups.0.params.{i}" for i in (0, 1)]
