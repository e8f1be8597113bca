"""Checkpoint anatomy: which role each tensor plays and what each part costs on disk.

`analyze(ckpt)` applies the layout recognisers (ckinspect.analysis.layouts): it sets every tensor's group
(model, optimizer, rng, other), fills `ckpt.metadata` (step, epoch, world_size, config, other plain
values) and `ckpt.layout`. `summarize(ckpt)` counts bytes.

Counting rules (the JSON report's numbers mean exactly this):
- `storage_bytes`: the size of every storage in the file, each once.
- `tensor_bytes`: the bytes that at least one tensor view reaches, each byte once, so tied weights
  and views of one storage are counted once. A view reaches `span_bytes` from its `byte_offset`.
- `unused_bytes` = storage_bytes - tensor_bytes: bytes saved that no tensor uses (a slice saved
  with the whole of its base tensor, a storage nothing refers to).
- Per group: a byte reached by views of several groups is attributed once, to the first of
  model, optimizer, rng, other that reaches it, so the groups add up to `tensor_bytes` exactly.
  A group's `tensor_count` counts its views (two tied names are two tensors).
- `optimizer_share` = optimizer bytes / tensor_bytes (0.0 for a file without tensors).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from itertools import chain
from operator import attrgetter, is_

from ckinspect._native import load as load_native
from ckinspect.analysis.layouts import Layout, recognise
from ckinspect.analysis.scalars import read_scalar
from ckinspect.dtypes import dtype_info
from ckinspect.formats.tree import no_gc
from ckinspect.model import Checkpoint, StorageInfo, TensorInfo
from ckinspect.record import Record, field, slot_descriptors
from ckinspect.vocab import GROUPS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any


class GroupStats(Record):
    tensor_count: int = 0
    bytes: int = 0


class StorageUse(Record):
    """How much of one storage its views reach."""

    key: str
    nbytes: int
    used_bytes: int
    largest_view: str | None  # name of the biggest tensor viewing it, for messages

    @property
    def unused_bytes(self) -> int:
        return self.nbytes - self.used_bytes


class Anatomy(Record):
    file_bytes: int
    tensor_count: int
    tensor_bytes: int
    storage_bytes: int
    groups: dict[str, GroupStats]
    partly_used: list[StorageUse] = field(default_factory=list)  # storages some of whose bytes no tensor reaches
    # tensors whose bytes the file lacks (missing_tensors), found in the same pass, in the order of their storages
    missing: list[TensorInfo] = field(default_factory=list)

    @property
    def unused_bytes(self) -> int:
        return self.storage_bytes - self.tensor_bytes

    @property
    def optimizer_share(self) -> float:
        return self.groups["optimizer"].bytes / self.tensor_bytes if self.tensor_bytes else 0.0

    def share_of_file(self, tensor: TensorInfo) -> float:
        """The tensor's bytes as a fraction of the file (or files) on disk."""
        return tensor.nbytes / self.file_bytes if self.file_bytes else 0.0


# ---------------------------------------------------------------- analyze


def analyze(ckpt: Checkpoint) -> Checkpoint:
    """Set groups, metadata and layout from the first recogniser that knows this shape (in place; returned)."""
    analyze_layout(ckpt)
    return ckpt


def analyze_layout(ckpt: Checkpoint) -> Layout:
    """`analyze`, returning the recognised layout so the role-based checks need not recognise it again."""
    with no_gc():  # one new descriptor per regrouped tensor, no cycles: collector passes are pure overhead
        layout = recognise(ckpt)
        apply_layout(ckpt, layout)
    return layout


def apply_layout(ckpt: Checkpoint, layout: Layout) -> None:
    # a layout without role keys puts every tensor in its default group: no per-tensor lookup
    fixed = layout.default_group if not layout.roles else None
    groups = [fixed] * len(ckpt.tensors) if fixed else list(map(layout.group_of, ckpt.tensors))
    _regroup(ckpt.tensors, groups)
    for key, value in layout.metadata.items():
        ckpt.metadata[key] = resolve_value(ckpt, value)
    for key in ("step", "epoch", "world_size"):  # a reader's string metadata (safetensors) made numeric
        value = ckpt.metadata.get(key)
        if isinstance(value, str) and _numeric(value) is not None:
            ckpt.metadata[key] = _numeric(value)
    ckpt.layout = layout.name


def _regroup(tensors: list[TensorInfo], groups: list[str]) -> None:
    """Each tensor whose group is not groups[i] replaced by a copy in that group (a TensorInfo is never changed
    once built). Copied in C where built (_native/records.c: no __init__ frame for each of 50,000)."""
    native = load_native("records")
    copied = native.replaced(TensorInfo, _TENSOR_SLOTS, tensors, _GROUP_SLOT, groups) if native is not None else None
    if copied is not None:
        tensors[:] = copied
        return
    for i, (tensor, group) in enumerate(zip(tensors, groups, strict=True)):
        if group != tensor.group:
            t = tensor
            tensors[i] = TensorInfo(t.name, t.dtype, t.shape, t.stride, t.storage_key, t.storage_offset, group)


_TENSOR_SLOTS = slot_descriptors(TensorInfo)
_GROUP_SLOT = list(TensorInfo._specs).index("group")


def resolve_value(ckpt: Checkpoint, value: Any) -> Any:
    """A metadata value as plain data: a one-element tensor (`step` saved as a tensor) is read from disk."""
    if isinstance(value, TensorInfo):
        scalar = read_scalar(ckpt, value)
        return value if scalar is None else scalar
    return value


def _numeric(text: str) -> int | float | None:
    """ "30" -> 30, "1.5" -> 1.5 (safetensors metadata holds strings only); None if not a number."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None


# ---------------------------------------------------------------- summarize


def _merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _subtract(intervals: list[tuple[int, int]], covered: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Parts of merged `intervals` not inside merged `covered`."""
    out: list[tuple[int, int]] = []
    j = 0
    for start, end in intervals:
        while j < len(covered) and covered[j][1] <= start:
            j += 1
        k = j
        cursor = start
        while k < len(covered) and covered[k][0] < end:
            if covered[k][0] > cursor:
                out.append((cursor, covered[k][0]))
            cursor = max(cursor, covered[k][1])
            k += 1
        if cursor < end:
            out.append((cursor, end))
    return out


def _length(intervals: list[tuple[int, int]]) -> int:
    return sum(end - start for start, end in intervals)


def _extent(tensor: TensorInfo, bits: int) -> tuple[int, int]:
    """[first byte, past the last byte) the view reaches in its storage (TensorInfo.byte_offset/span_bytes, inlined)."""
    offset = tensor.storage_offset
    start = offset * bits >> 3
    last = 0
    for size, stride in zip(tensor.shape, tensor.stride, strict=True):
        if size == 0:
            return start, start
        last += (size - 1) * stride
    return start, (offset + last + 1) * bits + 7 >> 3


class _Memo(Record):
    """summarize's last answer, kept on the Checkpoint with what it was computed from."""

    tensors: tuple[TensorInfo, ...]  # the very objects (a TensorInfo is never changed: any change is a new one)
    storages: dict[str, Any]
    storage_count: int
    file_bytes: int
    anatomy: Anatomy

    def still_fits(self, ckpt: Checkpoint, tensors: tuple[TensorInfo, ...]) -> bool:
        return (
            self.storages is ckpt.storages
            and self.storage_count == len(ckpt.storages)
            and self.file_bytes == ckpt.file_bytes
            and len(self.tensors) == len(tensors)
            and all(map(is_, self.tensors, tensors))  # the very objects, tested in C (of one length: checked above)
        )


def summarize(ckpt: Checkpoint) -> Anatomy:
    """Byte accounting of a checkpoint, by the rules in this module's docstring.

    The checks and the report both ask; the answer is remembered on the checkpoint for as long as
    its tensors, storages and size stay as they were (50,000 tensors: computed once, not twice).
    """
    tensors = tuple(ckpt.tensors)
    memo = ckpt._anatomy
    if isinstance(memo, _Memo) and memo.still_fits(ckpt, tensors):
        return memo.anatomy
    anatomy = _summarize(ckpt)
    ckpt._anatomy = _Memo(tensors, ckpt.storages, len(ckpt.storages), ckpt.file_bytes, anatomy)
    return anatomy


def _summarize(ckpt: Checkpoint) -> Anatomy:
    with no_gc():  # a 50,000-tensor file allocates as many small tuples here; none holds a cycle
        return _count(ckpt)


def _group_counts(tensors: list[TensorInfo]) -> dict[str, int]:
    """Tensors per group (one not in GROUPS counts as "other"), counted in C."""
    counts: dict[str, int] = dict.fromkeys(GROUPS, 0)
    for group, count in Counter(map(_GROUP, tensors)).items():
        counts[group if group in counts else "other"] += count
    return counts


def _views_by_storage(tensors: list[TensorInfo], keys: list[str]) -> tuple[dict[str, TensorInfo],
                                                                          dict[str, list[TensorInfo]]]:  # fmt: skip
    """The views of each storage (`keys`: the tensors' storage keys). Most storages have exactly one view, kept
    alone; a list is made only for storages viewed more than once."""
    only_view: dict[str, TensorInfo] = dict(zip(keys, tensors, strict=True))  # built in C
    shared: dict[str, list[TensorInfo]] = {}
    if len(only_view) == len(tensors):  # every view its own storage (the first view is then the only one)
        return only_view, shared
    only_view = {}
    for key, tensor in zip(keys, tensors, strict=True):
        first = only_view.get(key)
        if first is None:
            only_view[key] = tensor
        elif key in shared:
            shared[key].append(tensor)
        else:
            shared[key] = [first, tensor]
    return only_view, shared


def _shared_storage(views: list[TensorInfo], storage: StorageInfo | None, bits_of: dict[str, int],
                    group_bytes: dict[str, int], missing: list[TensorInfo]) -> tuple[int, int, str | None]:  # fmt: skip
    """A storage viewed more than once (or by none): its size, the bytes its views reach (each once, added
    to `group_bytes`) and its largest view's name; views reaching past its bytes are added to `missing`."""
    extents = []
    for t in views:
        extent = _extent(t, bits_of[t.dtype])
        extents.append(extent)
        if 0 not in t.shape and (storage is None or storage.nbytes < extent[1]):
            missing.append(t)  # it reaches bytes the storage lacks
    # a reader that lists no storage for it: the views tell its extent
    size = storage.nbytes if storage is not None else max((end for _, end in extents), default=0)
    used = _attribute(views, extents, size, group_bytes)
    return size, used, max(views, key=lambda t: t.nbytes).name if views else None


def bits_by_dtype(tensors: Iterable[TensorInfo]) -> dict[str, int]:
    """Bits per element of each dtype the tensors have (8 x itemsize but for the packed fp4/fp6)."""
    return {dtype: dtype_info(dtype).bits for dtype in set(map(_DTYPE, tensors))}


_GROUP, _STORAGE_KEY, _DTYPE = attrgetter("group"), attrgetter("storage_key"), attrgetter("dtype")


def _unlisted(storages: dict[str, StorageInfo], only_view: dict[str, TensorInfo]) -> list[tuple[str, None]]:
    """Storage keys the tensors view that the reader lists no storage for."""
    return [(k, None) for k in only_view if k not in storages]


def _storages_and_views(tensors: list[TensorInfo], storages: dict[str, StorageInfo]) -> tuple[
        Iterable[tuple[str, StorageInfo | None, TensorInfo | None]], dict[str, list[TensorInfo]]]:  # fmt: skip
    """(key, storage, its only view or None) for every storage, then for every key the tensors view that the
    reader lists no storage for; and the views of each storage viewed more than once."""
    keys = list(map(_STORAGE_KEY, tensors))
    if keys == list(storages):  # storage i viewed by tensor i alone (torch.save's order): paired in place, no lookup
        return zip(storages, storages.values(), tensors, strict=True), {}
    only_view, shared = _views_by_storage(tensors, keys)
    rows = [(key, storage, None if key in shared else only_view.get(key))
            for key, storage in chain(storages.items(), _unlisted(storages, only_view))]  # fmt: skip
    return rows, shared


def _count(ckpt: Checkpoint) -> Anatomy:
    tensors, storages = ckpt.tensors, ckpt.storages
    counts = _group_counts(tensors)
    bits_of = bits_by_dtype(tensors)
    rows, shared = _storages_and_views(tensors, storages)
    group_bytes: dict[str, int] = dict.fromkeys(GROUPS, 0)
    uses: list[StorageUse] = []
    missing: list[TensorInfo] = []
    storage_bytes = 0
    tensor_bytes = 0
    for key, storage, view in rows:
        if view is None:  # viewed by several tensors, or by none
            size, used, largest = _shared_storage(shared.get(key, []), storage, bits_of, group_bytes, missing)
        else:  # the common case: one tensor, one storage (_extent(view, bits) inlined; one dimension without zip)
            bits = bits_of[view.dtype]
            offset = view.storage_offset
            start = end = offset * bits >> 3
            shape, stride = view.shape, view.stride
            if len(shape) == 1 == len(stride):
                last = (shape[0] - 1) * stride[0] if shape[0] else None
            elif 0 in shape:
                last = None  # no elements: it reaches nothing, misses nothing
            else:
                last = 0
                for dim, step in zip(shape, stride, strict=True):
                    last += (dim - 1) * step
            if last is not None:
                reach = (offset + last + 1) * bits + 7 >> 3
                if last >= 0:
                    end = reach
                if storage is None or storage.nbytes < reach:
                    missing.append(view)
            size = storage.nbytes if storage is not None else end
            if end > size:
                end = size
            used = end - start if end > start else 0
            group = view.group
            group_bytes[group if group in group_bytes else "other"] += used
            largest = view.name
        storage_bytes += size
        tensor_bytes += used
        if used < size:  # only storages with bytes to spare are kept, for bloat messages
            uses.append(StorageUse(key, size, used, largest))

    groups = {g: GroupStats(counts[g], group_bytes[g]) for g in GROUPS}
    file_bytes = ckpt.file_bytes or 0
    return Anatomy(file_bytes, len(ckpt.tensors), tensor_bytes, storage_bytes, groups, uses, missing)


def _attribute(views: list[TensorInfo], extents: list[tuple[int, int]], size: int, group_bytes: dict[str, int]) -> int:
    """Bytes of one storage its views reach, each byte once, added to the first group (in GROUPS order) reaching it."""
    by_group: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for t, (start, end) in zip(views, extents, strict=True):
        start, end = min(start, size), min(end, size)
        if end > start:
            by_group[t.group if t.group in group_bytes else "other"].append((start, end))
    covered: list[tuple[int, int]] = []
    for group in GROUPS:
        if group not in by_group:
            continue
        fresh = _subtract(_merge(by_group[group]), covered)
        group_bytes[group] += _length(fresh)
        covered = _merge(covered + fresh)
    return _length(covered)


# ---------------------------------------------------------------- a file cut short


def missing_tensors(ckpt: Checkpoint) -> list[TensorInfo]:
    """Tensors whose bytes are not in the file: their storage is absent or shorter than they reach
    (a save cut short keeps the pickle that names them, not their data). Found by summarize's pass over the
    storages (remembered with it), in the order of their storages."""
    return summarize(ckpt).missing


class CutShort(Record):
    """A file whose tensors name bytes it does not hold: how many, and what the whole file declared."""

    missing_tensors: int
    declared_bytes: dict[str, int]  # per group, as declared_group_bytes counts them

    @property
    def optimizer_share(self) -> float:
        return declared_optimizer_share(self.declared_bytes)


def declared_optimizer_share(declared: dict[str, int]) -> float:
    """The optimizer's share of the declared sizes (declared_group_bytes): what the whole file held, not
    what survived."""
    total = sum(declared.values())
    return declared["optimizer"] / total if total else 0.0


def cut_short(ckpt: Checkpoint, missing: list[TensorInfo] | None = None) -> CutShort | None:
    """None for a file that holds every byte its tensors reach; else what is missing and what was declared."""
    if missing is None:
        missing = missing_tensors(ckpt)
    if not missing:
        return None
    return CutShort(missing_tensors=len(missing), declared_bytes=declared_group_bytes(ckpt))


def declared_group_bytes(ckpt: Checkpoint) -> dict[str, int]:
    """Bytes per group as the tensors declare them, each storage once (by the furthest byte its views
    reach, given to the first of model, optimizer, rng, other among them): what the whole file held,
    even when part of it is missing."""
    reach: dict[str, int] = {}
    group_of: dict[str, str] = {}
    rank = {g: i for i, g in enumerate(GROUPS)}
    for t in ckpt.tensors:
        key = t.storage_key
        reach[key] = max(reach.get(key, 0), t.byte_offset + t.span_bytes)
        group = t.group if t.group in rank else "other"
        if key not in group_of or rank[group] < rank[group_of[key]]:
            group_of[key] = group
    out = dict.fromkeys(GROUPS, 0)
    for key, nbytes in reach.items():
        out[group_of[key]] += nbytes
    return out
