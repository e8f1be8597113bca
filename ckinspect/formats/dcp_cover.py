"""Whether a DCP tensor's chunks cover its shape exactly once: every element in one chunk, none outside.

The one check the full read, the pure --quick listing and the compiled one (dcp_quick) share. It is exact
for any layout torch writes (a grid, rows each cut differently, TP x FSDP with uneven chunks) at the cost of
one sort, where the pairwise test it replaces gave up above 2,048 chunks.

The signed-corner test. A chunk's box [o, o + s) puts at each of its 2^d corners c (c_k is o_k or o_k + s_k)
the weight prod_k (+1 if c_k == o_k else -1), and the shape's own box puts its corners with the opposite
weights. Summed per point, the weights are the mixed finite difference of f = (how many chunks hold an
element) - (1 inside the shape), and f at x is the sum of those weights over every point <= x: f is zero
everywhere (an exact cover) exactly when every point's sum is zero. d counts the sharded dimensions only: a
dimension every non-empty chunk spans whole factors out of f, and an empty chunk's corners cancel, so both
are left out. Bounds come first (no chunk outside the shape, no negative size), which also keeps every
corner within int64.

2^d corners a chunk is fine for d <= 4 (a tensor cut along more dimensions than a 4-D device mesh has is
nothing torch writes); above that a chunk's corners are summed as a polynomial identity instead (_identity),
in time linear in d: f is zero iff sum_x f(x) prod_k r_k^x_k is the zero polynomial, checked at a random
point modulo the prime 2^127 - 1. A nonzero value proves the cover wrong, so it never calls a true cover
CORRUPT; a wrong one passes with probability below 2^-58 (degree over the prime: Schwartz-Zippel).

A 0-d tensor is whole in any chunk of it, however many: torch's planner checks no 0-d tensor's chunks
(_validate_global_plan skips them), and a torch whose planner honoured dedup_replicated_tensors=False wrote one
per rank for a replicated one, all the same box, which dcp.load reads as it reads one. It needs one at least.
"""

from __future__ import annotations

import math

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from ckinspect.model import Checkpoint

MAX_DIM = 1 << 62  # a torch.Size holds int64: a dimension this large is no tensor torch could save
MAX_CORNER_DIMS = 4  # sharded dimensions tested by their corners (2^d per chunk); more: _identity
_SMALL_CORNERS = 4096  # a tensor of at most this many corners is summed in a dict: no numpy (nor its import)
_BATCH_CHUNKS = 1 << 18  # chunks per batch of tensors: the arrays of their corners stay within tens of MB
_SAME_LAYOUT_MIN = 32  # tensors of this many chunks or more are compared with those checked before
_PRIME = (1 << 127) - 1


def add_finding(ckpt: Checkpoint, folder_name: str, fqn: str, size: Sequence[Any], count: int) -> None:
    """The one finding of a tensor whose chunks do not cover it exactly once (every path words it so)."""
    chunks, verb = ("chunk", "does") if count == 1 else ("chunks", "do")
    ckpt.add("CORRUPT", f"{folder_name}/.metadata: the {count} {chunks} of {fqn} {verb} not cover its shape "
                        f"{list(size)} exactly once", fqn)  # fmt: skip


def covers(size: Sequence[Any], offsets: list[Any], sizes: list[Any]) -> bool:
    """Whether the boxes (`offsets[i]`, `sizes[i]`, as `.metadata` declares them: tuples of ints) cover the
    tensor of shape `size` exactly once. Anything that is not a box of `len(size)` ints is no cover."""
    if not _is_shape(size) or len(offsets) != len(sizes):
        return False
    n = len(size)
    if not n:  # 0-d: see the module's docstring
        return len(offsets) >= 1 and all(_is_box(o, s, size) for o, s in zip(offsets, sizes, strict=True))
    if len(offsets) << n <= _SMALL_CORNERS:
        return _few_corners_cancel(size, offsets, sizes)
    import numpy as np  # here, not at the top: opening a DCP folder's module costs no numpy until a check runs

    pools = [_int_rows(offsets, n), _int_rows(sizes, n)]
    if pools[0] is None or pools[1] is None:
        return False
    index = np.arange(len(offsets) + 1, dtype=np.int64) * n
    return bool(exact_covers([tuple(size)], [0], [len(offsets)], index, pools[0].reshape(-1), index,
                             pools[1].reshape(-1))[0])  # fmt: skip


class Remembered:
    """covers(), once per distinct layout: a listing asks it for every tensor, and an optimizer's moments are
    cut as their parameter is, every layer as the one before (the pure --quick listing of a 70B save over 64
    ranks: 2,892 tensors, a few dozen layouts)."""

    def __init__(self) -> None:
        self.seen: dict[Any, bool] = {}

    def covers(self, size: Sequence[Any], offsets: list[Any], sizes: list[Any]) -> bool:
        try:
            key = (tuple(size), tuple(offsets), tuple(sizes))
            found = self.seen.get(key)
        except TypeError:  # something unhashable where ints belong: no box of ints, and nothing to remember
            return covers(size, offsets, sizes)
        if found is None:
            found = self.seen[key] = covers(size, offsets, sizes)
        return found


def _is_shape(shape: Any) -> bool:
    return isinstance(shape, (tuple, list)) and all(type(k) is int and 0 <= k < MAX_DIM for k in shape)


def _int_rows(rows: list[Any], n: int) -> Any:
    """`rows` as an (len(rows), n) int64 array; None when they are not all n ints (within int64)."""
    import numpy as np

    try:
        array = np.array(rows) if rows else np.zeros((0, n), dtype=np.int64)
    except (ValueError, TypeError, OverflowError):  # ragged, or not numbers
        return None
    if array.shape != (len(rows), n) or (array.size and array.dtype.kind not in "bi"):
        return None  # floats, strings, objects (an int past int64), unsigned past int64's range
    return array.astype(np.int64, copy=False)  # no element at all (0-d chunks) comes back as float64


def _is_box(offsets: Any, sizes: Any, size: Sequence[int]) -> bool:
    """A chunk of len(size) ints (bool counts as int, as Python's arithmetic has it) within the shape."""
    if not isinstance(offsets, (tuple, list)) or not isinstance(sizes, (tuple, list)):
        return False
    if not len(offsets) == len(sizes) == len(size):
        return False
    for o, s, whole in zip(offsets, sizes, size, strict=True):
        if type(o) not in (int, bool) or type(s) not in (int, bool) or o < 0 or s < 0 or o + s > whole:
            return False
    return True


def _few_corners_cancel(size: Sequence[int], offsets: list[Any], sizes: list[Any]) -> bool:
    """The signed-corner test of a tensor of few chunks, its corners summed in a dict."""
    if not all(_is_box(o, s, size) for o, s in zip(offsets, sizes, strict=True)):
        return False
    n = len(size)
    sums: dict[tuple[int, ...], int] = {}
    for o, s, sign in [*((o, s, 1) for o, s in zip(offsets, sizes, strict=True)), ((0,) * n, size, -1)]:
        if all(s):  # an empty box's corners cancel
            for p in range(1 << n):
                corner = tuple(o[k] + s[k] if p >> k & 1 else o[k] for k in range(n))
                sums[corner] = sums.get(corner, 0) + (-sign if p.bit_count() % 2 else sign)
    return not any(sums.values())


def exact_covers(shapes: Sequence[Any], firsts: Sequence[int] | Any, counts: Sequence[int] | Any,
                 offsets_index: Any, offsets_pool: Any, sizes_index: Any, sizes_pool: Any) -> Any:  # fmt: skip
    """For each tensor (its shape, and its chunks `firsts[t]` .. `firsts[t] + counts[t]`), whether its chunks
    cover it exactly once; chunk i's offsets are `offsets_pool[offsets_index[i]:offsets_index[i + 1]]`, its
    sizes likewise (dcp_metadata.Columns' layout). A bool array, one per tensor.

    Tensors cut alike are tested once: an optimizer's moments are cut as their parameter is, and every layer
    as the one before (a 70B save over 1024 ranks: 2,892 tensors, 2.2 million chunks, a few dozen layouts)."""
    import numpy as np

    firsts = np.asarray(firsts, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    pools = (np.asarray(offsets_index), np.asarray(offsets_pool), np.asarray(sizes_index), np.asarray(sizes_pool))
    layouts = _Layouts(pools)
    same = np.full(len(shapes), -1, dtype=np.int64)  # the tensor whose answer is this one's (-1: not a shape)
    by_ndim: dict[int, list[int]] = {}
    for t, shape in enumerate(shapes):
        if not _is_shape(shape):
            continue
        count = int(counts[t])
        same[t] = layouts.first_alike(t, shape, int(firsts[t]), count) if count >= _SAME_LAYOUT_MIN else t
        if same[t] == t:
            by_ndim.setdefault(len(shape), []).append(t)
    ok = np.zeros(len(shapes) + 1, dtype=bool)  # the last: what -1 reads
    for n, tensors in by_ndim.items():
        if not n:  # 0-d: see the module's docstring
            ok[tensors] = _boxes(0, firsts[tensors], counts[tensors], pools)[3] & (counts[tensors] >= 1)
            continue
        for batch in _batches(tensors, counts):
            whole = np.array([shapes[t] for t in batch], dtype=np.int64).reshape(len(batch), n)
            ok[batch] = _covers_batch(n, whole, firsts[batch], counts[batch], pools)
    return ok[same]


class _Layouts:
    """Tensors of one shape whose chunks are the same boxes, found by a few of their numbers and then compared
    whole (each only with the first tensor of those numbers: the work stays linear whatever the file holds)."""

    def __init__(self, pools: tuple[Any, ...]) -> None:
        self.pools = pools
        self.seen: dict[Any, tuple[int, tuple[Any, ...]]] = {}

    def first_alike(self, t: int, shape: Any, first: int, count: int) -> int:
        """The first tensor seen cut as tensor `t` is (`t` itself when none)."""
        import numpy as np

        offsets_index, offsets_pool, sizes_index, sizes_pool = self.pools
        at = offsets_index[first : first + count + 1]
        sat = sizes_index[first : first + count + 1]
        boxes = (offsets_pool[at[0] : at[-1]], sizes_pool[sat[0] : sat[-1]], at - at[0], sat - sat[0])
        key = (tuple(shape), count, len(boxes[0]), len(boxes[1]), *(b[:8].tobytes() + b[-8:].tobytes() for b in boxes))
        seen = self.seen.setdefault(key, (t, boxes))
        if seen[0] != t and all(np.array_equal(a, b) for a, b in zip(seen[1], boxes, strict=True)):
            return seen[0]
        return t


def _batches(tensors: list[int], counts: Any) -> list[list[int]]:
    """Consecutive runs of tensors of at most _BATCH_CHUNKS chunks (one tensor may hold more)."""
    out: list[list[int]] = [[]]
    held = 0
    for t in tensors:
        if out[-1] and held + int(counts[t]) > _BATCH_CHUNKS:
            out.append([])
            held = 0
        out[-1].append(t)
        held += int(counts[t])
    return out


def _covers_batch(n: int, whole: Any, firsts: Any, counts: Any, pools: tuple[Any, ...]) -> Any:
    """exact_covers for tensors of `n` dimensions (`whole`: their shapes, one row each)."""
    import numpy as np

    tid, origin, size, ok = _boxes(n, firsts, counts, pools)
    within = ((size >= 0) & (origin >= 0) & (origin <= whole[tid] - size)).all(axis=1)
    ok &= np.bincount(tid[~within], minlength=len(whole)) == 0
    full = ok[tid] & (size > 0).all(axis=1)  # an empty chunk's corners cancel
    tid, origin, size = tid[full], origin[full], size[full]
    # a dimension every non-empty chunk of a tensor spans whole factors out of its test
    spans = (origin == 0) & (size == whole[tid])
    sharded = np.zeros((len(whole), n), dtype=bool)
    for k in range(n):
        sharded[:, k] = np.bincount(tid[~spans[:, k]], minlength=len(whole)) > 0
    cut = sharded.sum(axis=1)
    for d in np.unique(cut[ok]).tolist():
        group = ok & (cut == d)
        rows = group[tid]
        test = _corners_cancel if d <= MAX_CORNER_DIMS else _identity
        ok[group] &= test(group, whole, sharded, tid[rows], origin[rows], size[rows])
    return ok


def _boxes(n: int, firsts: Any, counts: Any, pools: tuple[Any, ...]) -> tuple[Any, Any, Any, Any]:
    """Every chunk of these tensors that has n offsets and n sizes: its tensor's row, offsets and sizes; and
    which tensors have no other chunk."""
    import numpy as np

    offsets_index, offsets_pool, sizes_index, sizes_pool = pools
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    chunk = np.repeat(firsts - starts, counts) + np.arange(total, dtype=np.int64)
    tid = np.repeat(np.arange(len(firsts)), counts)
    o_at, s_at = offsets_index[chunk], sizes_index[chunk]
    fits = (offsets_index[chunk + 1] - o_at == n) & (sizes_index[chunk + 1] - s_at == n)
    ok = np.bincount(tid[~fits], minlength=len(firsts)) == 0
    if not fits.all():
        tid, o_at, s_at = tid[fits], o_at[fits], s_at[fits]
    step = np.arange(n)
    origin = offsets_pool[o_at[:, None] + step].reshape(len(tid), n)
    return tid, origin, sizes_pool[s_at[:, None] + step].reshape(len(tid), n), ok


def _corners_cancel(group: Any, whole: Any, sharded: Any, tid: Any, origin: Any, size: Any) -> Any:
    """For the tensors in `group` (each cut along the same number d of dimensions; `tid`, `origin`, `size`:
    their non-empty chunks), whether every corner's weights sum to zero: a bool per tensor of the group."""
    import numpy as np

    members = np.flatnonzero(group)
    d = int(sharded[members[0]].sum())
    mask = sharded[tid]  # each row holds d Trues: the chunk's sharded dimensions, in order
    low = origin[mask].reshape(len(tid), d)
    high = low + size[mask].reshape(len(tid), d)
    signs = np.array([[p >> k & 1 for k in range(d)] for p in range(1 << d)], dtype=bool).reshape(1 << d, d)
    weight = np.where(signs.sum(axis=1) % 2, -1, 1).astype(np.int64)
    # each chunk's 2^d corners side by side (chunks listed in order make nearly sorted keys), then the shape's
    # box with the opposite weights (none when it is empty: its corners cancel)
    boxed = members[(whole[members] > 0).all(axis=1)]
    ends = whole[boxed][sharded[boxed]].reshape(len(boxed), d)
    points = [np.where(signs, high[:, None, :], low[:, None, :]).reshape(len(tid) << d, d),
              np.where(signs, ends[:, None, :], 0).reshape(len(boxed) << d, d)]  # fmt: skip
    coords = np.concatenate(points)
    owner = np.concatenate([np.repeat(tid, 1 << d), np.repeat(boxed, 1 << d)])
    weights = np.concatenate([np.tile(weight, len(tid)), -np.tile(weight, len(boxed))])
    order = _sorted_points(owner, coords, whole[members][sharded[members]].reshape(len(members), d))
    owner, coords, weights = owner[order], coords[order], weights[order]
    change = np.flatnonzero((owner[1:] != owner[:-1]) | (coords[1:] != coords[:-1]).any(axis=1)) + 1
    starts = np.r_[0, change] if len(owner) else change
    sums = np.add.reduceat(weights, starts) if len(owner) else weights
    left = np.bincount(owner[starts[sums != 0]], minlength=len(group))
    return left[members] == 0


def _sorted_points(owner: Any, coords: Any, ends: Any) -> Any:
    """The order that sorts the points by (tensor, coordinates): one int64 key where it fits, else lexsort."""
    import numpy as np

    d = coords.shape[1]
    reach = [int(ends[:, k].max(initial=0)) + 1 for k in range(d)]
    if not len(owner) or (int(owner.max()) + 1) * math.prod(reach) >= 1 << 63:
        return np.lexsort((*(coords[:, k] for k in reversed(range(d))), owner))
    key = owner.astype(np.int64)
    for k in range(d):
        key = key * reach[k] + coords[:, k]
    return np.argsort(key, kind="stable")  # nearly sorted: the stable sort runs in about linear time


def _identity(group: Any, whole: Any, sharded: Any, tid: Any, origin: Any, size: Any) -> Any:
    """For tensors cut along more than MAX_CORNER_DIMS dimensions: whether sum over chunks of
    prod_k (r_k^o_k - r_k^(o_k + s_k)) equals prod_k (1 - r_k^W_k) modulo _PRIME at a random point r (see the
    module's docstring): a bool per tensor of the group."""
    import secrets

    import numpy as np

    members = np.flatnonzero(group)
    out = np.ones(len(members), dtype=bool)
    order = np.argsort(tid, kind="stable")
    bounds = np.searchsorted(tid[order], members, side="left"), np.searchsorted(tid[order], members, side="right")
    for i, t in enumerate(members.tolist()):
        dims = np.flatnonzero(sharded[t])
        rows = order[bounds[0][i] : bounds[1][i]]
        r = [secrets.randbelow(_PRIME - 2) + 2 for _ in dims]
        total = 0
        for low, extent in zip(origin[rows][:, dims].tolist(), size[rows][:, dims].tolist(), strict=True):
            term = 1
            for rk, o, s in zip(r, low, extent, strict=True):
                term = term * (pow(rk, o, _PRIME) - pow(rk, o + s, _PRIME)) % _PRIME
            total += term
        expected = 1
        for rk, w in zip(r, whole[t][dims].tolist(), strict=True):
            expected = expected * (1 - pow(rk, w, _PRIME)) % _PRIME
        out[i] = (total - expected) % _PRIME == 0
    return out
