"""Diff two checkpoints tensor by tensor: bytes first at memory speed, values only where bytes differ.

    result = diff_checkpoints(a, b, only=["model"], atol=0.0)
    result.identical, result.changed, result.match          # and result.to_json() for the report

Names are matched across layouts: a resume file's `model.*` against a weights file's bare names,
nanoGPT's `_orig_mod.` and DDP's `module.` wrappers, whatever readers name them; `result.match`
says how. No torch; numpy is imported only when there is something to compare.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
import mmap
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ckinspect.analysis.scan import worker_count
from ckinspect.dtypes import dtype_info
from ckinspect.formats.tree import no_gc
from ckinspect.io import folders
from ckinspect.io.blobs import Blobs, UnreadableStorage, files_differ
from ckinspect.io.values import decode, raw_blocks, swap_unit
from ckinspect.model import Checkpoint, TensorInfo
from ckinspect.record import Record, field
from ckinspect.vocab import GROUPS, MODEL_KEYS, OPTIMIZER_KEYS, SAME_STRUCTURE

COMPARE_CHUNK = 16 << 20  # bytes per memcmp window
_DECODE_ELEMENTS = 1 << 20  # elements per decoded block (8 MiB of float64 per side)

# First path components under which trainers keep the model's and the optimizer's state (vocab's one set).
MODEL_CONTAINERS = MODEL_KEYS
OPTIMIZER_CONTAINERS = OPTIMIZER_KEYS
RESUME_COUNTERS = ("step", "epoch", "world_size")
WRAPPERS = ("_orig_mod", "module")  # torch.compile and DDP/DataParallel wrap the model under these names


# ---------------------------------------------------------------- results


class TensorChange(Record):
    __hash__ = None  # type: ignore[assignment]  # changed after it is built

    name: str
    # "values" | "shape" | "dtype" | "layout" (a composite tensor's: sparse, nested, meta ...; under --quick
    # also other strides)
    reason: str
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    n_diff: int | None = None
    first_index: list[int] | None = None
    a_name: str = ""
    b_name: str = ""
    a_dtype: str = ""
    b_dtype: str = ""
    a_shape: tuple[int, ...] = ()
    b_shape: tuple[int, ...] = ()
    numel: int = 0

    def to_json(self) -> dict[str, Any]:
        def num(x: float | None) -> float | str | None:
            if x is None or math.isfinite(x):
                return x
            return "inf" if x > 0 else "nan"

        out: dict[str, Any] = {"name": self.name, "reason": self.reason, "max_abs_diff": num(self.max_abs_diff)}
        out.update(
            {
                "max_rel_diff": num(self.max_rel_diff),
                "n_diff": self.n_diff,
                "numel": self.numel,
                "first_index": self.first_index,
                "a": {"name": self.a_name, "dtype": self.a_dtype, "shape": list(self.a_shape)},
                "b": {"name": self.b_name, "dtype": self.b_dtype, "shape": list(self.b_shape)},
            }
        )
        return out


class ValueChange(Record):
    """A non-tensor value (lr, loss, a config entry, a run setting) that differs between A and B."""

    path: str  # dotted, as in the checkpoint tree: optimizer.param_groups.0.lr
    a: Any
    b: Any

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "a": plain_value(self.a), "b": plain_value(self.b)}


def plain_value(value: Any) -> Any:
    """A scalar from a checkpoint as JSON can hold it (no NaN/inf literals, bytes by their size)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value):,} bytes>"
    return value


class DiffResult(Record):
    __hash__ = None  # type: ignore[assignment]  # changed after it is built

    a: Path
    b: Path
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)
    same: list[str] = field(default_factory=list)  # bit-identical, or equal values (within atol)
    changed: list[TensorChange] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (name, why): no verdict possible
    within_atol: list[str] = field(default_factory=list)  # bytes differ but every value is within atol
    relaid: list[str] = field(default_factory=list)  # equal values stored in another memory layout (strides)
    only_a_groups: dict[str, int] = field(default_factory=dict)  # how many only-in-A tensors per group
    only_b_groups: dict[str, int] = field(default_factory=dict)
    metadata_changed: dict[str, list[Any]] = field(default_factory=dict)  # step/epoch/world_size: [a, b]
    values_changed: list[ValueChange] = field(default_factory=list)  # non-tensor values on both sides that differ
    values_only_a: list[str] = field(default_factory=list)  # paths of non-tensor values only A holds
    values_only_b: list[str] = field(default_factory=list)
    match: str = "names matched exactly"
    only: list[str] | None = None
    atol: float = 0.0
    bytes_compared: int = 0  # bytes of both files compared
    not_compared: str | None = None  # why the tensors could not be compared at all (a refused or unreadable side)
    raw_bytes_differ: bool | None = None  # the files' own bytes, when the tensors gave no verdict; None: not compared
    unsafe: str | None = (
        None  # a side names code-running globals though its tensors were read: identical only byte for byte
    )
    # --quick: structure only (names, dtypes, shapes, sizes, layouts, non-tensor values), no storage byte read;
    # tensors whose structure matches land here, never in `same`, and the verdict is at best "same structure"
    quick: bool = False
    same_structure: list[str] = field(default_factory=list)

    @property
    def identical(self) -> bool:
        if self.quick:
            return False  # never "identical" without comparing the bytes
        if self.not_compared is not None or self.unsafe is not None:
            return self.raw_bytes_differ is False  # byte for byte the same file: nothing inside can differ
        differs = self.only_a or self.only_b or self.changed or self.metadata_changed or self.values_changed
        if self.unreadable and self.raw_bytes_differ is False:
            return not differs
        return not (differs or self.unreadable)

    @property
    def verdict(self) -> str:
        """ "identical", "different", "same structure" (--quick; exit 0 like identical) or "unknown" (the exit
        status follows: 0, 1, 0, 2)."""
        if self.identical:
            return "identical"
        if self.only_a or self.only_b or self.changed or self.metadata_changed or self.values_changed:
            return "different"
        if self.quick and not self.unreadable:
            return SAME_STRUCTURE
        if self.raw_bytes_differ:
            return "different"
        return "unknown"

    def to_json(self) -> dict[str, Any]:
        return {
            "a": str(self.a),
            "b": str(self.b),
            "identical": self.identical,
            "only_a": list(self.only_a),
            "only_b": list(self.only_b),
            "same": len(self.same),
            "changed": [c.to_json() for c in self.changed],
            "match": self.match,
            "only": self.only,
            "atol": self.atol,
            "only_a_groups": dict(self.only_a_groups),
            "only_b_groups": dict(self.only_b_groups),
            "within_atol": list(self.within_atol),
            "relaid": list(self.relaid),
            "metadata_changed": dict(self.metadata_changed),
            "values_changed": [v.to_json() for v in self.values_changed],
            "values_only_a": list(self.values_only_a),
            "values_only_b": list(self.values_only_b),
            "unreadable": [{"name": n, "message": m} for n, m in self.unreadable],
            "bytes_compared": self.bytes_compared,
            "verdict": self.verdict,
            "not_compared": self.not_compared,
            "raw_bytes_differ": self.raw_bytes_differ,
            "unsafe": self.unsafe,
            "quick": self.quick,
            "same_structure": len(self.same_structure),
        }


# ---------------------------------------------------------------- when tensors give no verdict

REFUSALS = ("UNSAFE_PICKLE", "CORRUPT")


def unsafe_side(a: Checkpoint, b: Checkpoint) -> str | None:
    """Which side names code-running globals (UNSAFE_PICKLE) though its tensors could be read (a pickle
    beside data.pkl, a second pickle after it): equal tensors then do not make the files "identical"."""
    sides = [side for side, ckpt in (("A", a), ("B", b)) if any(f.code == "UNSAFE_PICKLE" for f in ckpt.findings)]
    if not sides:
        return None
    return f"{' and '.join(sides)} {'names' if len(sides) == 1 else 'name'} code-running globals (UNSAFE_PICKLE)"


def why_not_comparable(a: Checkpoint, b: Checkpoint) -> str | None:
    """Why comparing tensors says nothing about these two, or None when it does.

    A side whose pickle was refused (UNSAFE_PICKLE) or could not be read (CORRUPT) lists no tensors:
    "no tensor differs" would be a false "identical". So would two files that hold no tensors at all.
    """
    for side, ckpt in (("A", a), ("B", b)):
        if ckpt.tensors or ckpt.format == "unknown" and not ckpt.findings:
            continue
        refusal = next((f for f in ckpt.findings if f.code in REFUSALS), None)
        if refusal is not None:
            return f"{side}'s tensors cannot be read ({refusal.code})"
    if a.format == "unknown" or b.format == "unknown":
        return "not a checkpoint: " + ("A" if a.format == "unknown" else "B") + " holds nothing this tool reads"
    if not a.tensors and not b.tensors:
        return "neither file holds tensors"
    return None


def raw_bytes_differ(a: Path, b: Path, chunk: int = COMPARE_CHUNK) -> bool | None:
    """Do two files differ byte for byte? None when either is no regular file (folders, sharded sets)."""
    if a.name.endswith(".index.json") or b.name.endswith(".index.json"):
        return None
    try:
        if not all(folders.names_file(p) for p in (a, b)):  # a URL names one object
            return None
    except OSError:
        return None
    return files_differ(a, b, chunk)


# ---------------------------------------------------------------- roles and name matching


def roles(ckpt: Checkpoint) -> dict[str, str]:
    """Each tensor's group by name: the reader/anatomy's where any were assigned, else guessed from names.

    Guessing: under a known container (model., state_dict., optimizer., ...) by that container; a flat
    state dict with no container at all is a weights file, so all model.
    """
    if any(t.group != "other" for t in ckpt.tensors):
        return {t.name: t.group for t in ckpt.tensors}
    heads = {t.name: t.name.split(".", 1)[0] for t in ckpt.tensors}
    flat = not any(h in MODEL_CONTAINERS or h in OPTIMIZER_CONTAINERS for h in heads.values())
    out = {}
    for name, head in heads.items():
        if head in MODEL_CONTAINERS or head in WRAPPERS:
            out[name] = "model"
        elif head in OPTIMIZER_CONTAINERS:
            out[name] = "optimizer"
        elif "rng" in head:
            out[name] = "rng"
        else:
            out[name] = "model" if flat else "other"
    return out


class _Naming(Record):
    __hash__ = None  # type: ignore[assignment]  # changed after it is built

    describe: str  # for the match statement, "" when names are used as stored
    key: Callable[[str], str]


def _unwrap(name: str) -> str:
    parts = name.split(".")
    kept = [p for i, p in enumerate(parts) if not (p == "_orig_mod" or (p == "module" and i == 0))]
    return ".".join(kept) or name


def _namings(tensors: list[TensorInfo], role: Callable[[], dict[str, str]]) -> Iterator[_Naming]:
    """The readings of one side's names, in the order they are tried; each is worked out only when the ones
    before it left tensors unpaired (two files named alike never look for wrappers or a container)."""
    yield _Naming("", lambda n: n)
    if _wrapped(tensors):
        yield _Naming("'_orig_mod.'/'module.' wrappers removed", _unwrap)
    groups = role()
    model = [t.name for t in tensors if groups.get(t.name) == "model"]
    heads = {n.split(".", 1)[0] for n in model if "." in n}
    if len(heads) == 1 and all("." in n for n in model):
        head = heads.pop() + "."
        if head.rstrip(".") in MODEL_CONTAINERS or head.rstrip(".") in WRAPPERS:

            def strip(n: str, head: str = head) -> str:
                return _unwrap(n[len(head) :]) if n.startswith(head) else n

            yield _Naming(f"prefix '{head}' dropped from model tensors", strip)


def _wrapped(tensors: list[TensorInfo]) -> bool:
    """Does any name hold a wrapper (`_orig_mod`, `module`) as one of its parts?"""
    names = "\n".join(t.name for t in tensors)  # one C-speed search rules out the usual case of none at all
    if not any(w in names for w in WRAPPERS):
        return False
    return any(any(w in t.name for w in WRAPPERS) and any(p in WRAPPERS for p in t.name.split(".")) for t in tensors)


class _Replayed:
    """An iterator's items, produced once on first need and replayed on every later pass."""

    def __init__(self, items: Iterator[Any]) -> None:
        self._items = items
        self._seen: list[Any] = []

    def __iter__(self) -> Iterator[Any]:
        i = 0
        while True:
            if i == len(self._seen):
                item = next(self._items, None)
                if item is None:
                    return
                self._seen.append(item)
            yield self._seen[i]
            i += 1


def _memo(fn: Callable[[], dict[str, str]]) -> Callable[[], dict[str, str]]:
    """fn's answer, worked out on the first call only (roles of 640,000 tensors are not free)."""
    held: list[dict[str, str]] = []

    def once() -> dict[str, str]:
        if not held:
            held.append(fn())
        return held[0]

    return once


def match_names(a: Checkpoint, b: Checkpoint) -> list[tuple[str | None, str | None]]:
    """How the diff pairs A's tensors with B's (across layouts): A's order, then B's unmatched names."""
    ka, kb, _ = _match(a.tensors, _memo(lambda: roles(a)), b.tensors, _memo(lambda: roles(b)))
    return [(ta.name, kb[k].name if k in kb else None) for k, ta in ka.items()] + [
        (None, tb.name) for k, tb in kb.items() if k not in ka
    ]


def _match(ta: list[TensorInfo], ra: Callable[[], dict[str, str]], tb: list[TensorInfo],
           rb: Callable[[], dict[str, str]]):  # fmt: skip
    """The reading of each side's names (as stored, unwrapped, a container's prefix dropped) that pairs the
    most tensors; the first to pair all it can is kept, so two files named alike cost one dict per side.
    `ra`, `rb`: each side's roles, asked for only when a reading needs them."""
    best = None
    most = min(len(ta), len(tb))  # no reading pairs more
    namings_b = _Replayed(_namings(tb, rb))
    readings_b: dict[int, dict[str, TensorInfo] | None] = {}  # each of B's readings built once, when first needed
    for na in _namings(ta, ra):
        ka = _keyed(ta, na)
        if ka is None:
            continue  # this renaming would merge two tensors: not a valid reading
        for i, nb in enumerate(namings_b):
            if i not in readings_b:
                readings_b[i] = _keyed(tb, nb)
            kb = readings_b[i]
            if kb is None:
                continue
            hits = _common(ka, kb)
            if best is None or hits > best[0]:
                best = (hits, na, nb, ka, kb)
            if hits == most:
                break
        if best is not None and best[0] == most:
            break
    if best is None:  # no valid renaming at all (duplicate names): fall back to names as stored
        plain = _Naming("", lambda n: n)
        best = (0, plain, plain, {t.name: t for t in ta}, {t.name: t for t in tb})
    _, na, nb, ka, kb = best
    if not na.describe and not nb.describe:
        statement = "names matched exactly"
    else:
        statement = "names matched after renaming: " + "; ".join(
            f"{side}: {n.describe or 'names as stored'}" for side, n in (("A", na), ("B", nb))
        )
    return ka, kb, statement


def _common(ka: dict[str, TensorInfo], kb: dict[str, TensorInfo]) -> int:
    """How many keys two readings share; the same keys on both sides are counted without building their set."""
    if len(ka) == len(kb) and ka.keys() == kb.keys():
        return len(ka)
    return len(ka.keys() & kb.keys())


def _keyed(tensors: list[TensorInfo], naming: _Naming) -> dict[str, TensorInfo] | None:
    """The tensors by their names under `naming`; None when it would merge two of them."""
    keyed = {t.name: t for t in tensors} if not naming.describe else {naming.key(t.name): t for t in tensors}
    return keyed if len(keyed) == len(tensors) else None


# ---------------------------------------------------------------- raw byte comparison


def _libc_memcmp() -> Any:
    try:
        fn = ctypes.CDLL(None).memcmp  # the running process already has libc loaded (Linux, macOS)
    except (OSError, AttributeError, TypeError):
        try:
            fn = ctypes.CDLL(ctypes.util.find_library("c") or "c").memcmp  # ldconfig lookup: slow, last resort
        except (OSError, AttributeError):
            return None
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    return fn  # ctypes drops the GIL during the call: two threads compare at twice the speed


_MEMCMP = _libc_memcmp()


def _equal_windows(va: memoryview, vb: memoryview) -> bool:
    if len(va) != len(vb):
        return False
    if len(va) < (256 << 10):
        return bytes(va) == bytes(vb)
    import numpy as np

    xa, xb = np.frombuffer(va, np.uint8), np.frombuffer(vb, np.uint8)
    if _MEMCMP is None:
        equal = bool(np.array_equal(xa, xb))
        del xa, xb
        return equal
    try:
        return _MEMCMP(xa.ctypes.data, xb.ctypes.data, len(va)) == 0
    finally:
        del xa, xb


class _Pair(Record):
    __hash__ = None  # type: ignore[assignment]  # changed after it is built

    name: str
    ta: TensorInfo
    tb: TensorInfo
    equal: bool = True
    error: str | None = None
    relaid: bool = False  # same dtype and shape, another memory layout (strides): bytes cannot decide
    streamed: bool = False  # a side's bytes are in a deflated member (np.savez_compressed): no memcmp, values decide


def _byte_ranges(ckpt: Checkpoint, blobs: Blobs, t: TensorInfo) -> tuple[Path, int, int]:
    storage = ckpt.storages.get(t.storage_key)
    if storage is None:
        raise UnreadableStorage(f"storage {t.storage_key} of {t.name} is missing")
    offset, length = blobs.check_within(storage, t.byte_offset, t.span_bytes)
    return storage.file, offset, length


# ---------------------------------------------------------------- decoding values where bytes differ


def value_blocks(blobs: Blobs, ckpt: Checkpoint, t: TensorInfo) -> Iterator[Any]:
    """The tensor's raw elements in C order as numpy blocks (copies), bounded in size."""
    yield from raw_blocks(blobs, ckpt.storages[t.storage_key], t, _DECODE_ELEMENTS, logical=True)


def kept_blocks(raw: Any) -> Iterator[Any]:
    """A tensor's raw elements held in memory, cut into the blocks `value_blocks` reads from its file
    (block by block sums then come out the same to the last bit)."""
    for start in range(0, len(raw), _DECODE_ELEMENTS):
        yield raw[start : start + _DECODE_ELEMENTS]


def _aligned(xs: Iterator[Any], ys: Iterator[Any]) -> Iterator[tuple[Any, Any]]:
    """Pairs of equally long blocks from two streams of the same total length."""
    xbuf = ybuf = None
    while True:
        if xbuf is None or len(xbuf) == 0:
            xbuf = next(xs, None)
        if ybuf is None or len(ybuf) == 0:
            ybuf = next(ys, None)
        if xbuf is None or ybuf is None:
            return
        n = min(len(xbuf), len(ybuf))
        yield xbuf[:n], ybuf[:n]
        xbuf, ybuf = xbuf[n:], ybuf[n:]


class _ValueDiff(Record):
    __hash__ = None  # type: ignore[assignment]  # changed after it is built

    n_diff: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    first: int | None = None


def compare_values(
    blobs_a: Blobs, a: Checkpoint, ta: TensorInfo, blobs_b: Blobs, b: Checkpoint, tb: TensorInfo, atol: float
) -> _ValueDiff:
    """Element-wise comparison in C order (after upcasting when dtypes differ).

    Packed sub-byte floats (safetensors F4, F6) have no decoder here: their bytes are compared, so
    `n_diff` counts differing bytes and `first` is the first element of the first differing byte.
    """
    import numpy as np

    bits = dtype_info(ta.dtype).bits
    if bits % 8 or dtype_info(tb.dtype).bits % 8:
        if ta.dtype != tb.dtype or not ta.is_contiguous or not tb.is_contiguous:
            why = f"packed {ta.dtype} against {tb.dtype} cannot be compared value by value"
            raise UnreadableStorage(f"{ta.name}: {why}")
        out = compare_values(blobs_a, a, _packed_bytes(ta), blobs_b, b, _packed_bytes(tb), 0.0)
        if out.first is not None:
            out.first = out.first * 8 // bits
        return out
    out = _ValueDiff()
    exact_ints = ta.dtype == tb.dtype and dtype_info(ta.dtype).kind in ("int", "uint", "bool") and atol == 0
    pos = 0
    for xa, xb in _aligned(value_blocks(blobs_a, a, ta), value_blocks(blobs_b, b, tb)):
        if exact_ints:
            neq = xa != xb
            fa = fb = None
        else:
            fa, fb = decode(xa, ta.dtype), decode(xb, tb.dtype)
            with np.errstate(invalid="ignore", over="ignore"):
                neq = ~((fa == fb) | (np.isnan(fa) & np.isnan(fb)))
                if atol > 0:
                    neq &= ~(np.abs(fa - fb) <= atol)
        n = int(np.count_nonzero(neq))
        if n:
            if out.first is None:
                out.first = pos + int(np.argmax(neq))
            if fa is None or fb is None:  # exact ints: nothing decoded yet
                fa, fb = xa[neq].astype(np.float64), xb[neq].astype(np.float64)
            else:
                fa, fb = fa[neq], fb[neq]
            with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
                d = np.abs(fa - fb)
                d = np.where(np.isnan(d), np.inf, d)  # NaN against a number: as far apart as it gets
                scale = np.maximum(np.abs(fa), np.abs(fb))
                rel = np.where(scale > 0, d / scale, np.inf)
                rel = np.where(np.isnan(rel), np.inf, rel)
            out.max_abs = max(out.max_abs, float(d.max()))
            out.max_rel = max(out.max_rel, float(rel.max()))
            out.n_diff += n
        pos += len(xa)
    return out


def _packed_bytes(t: TensorInfo) -> TensorInfo:
    """A contiguous packed tensor as the bytes it occupies."""
    return TensorInfo(t.name, "uint8", (t.nbytes,), (1,), t.storage_key, t.byte_offset, t.group)


def _unravel(flat: int | None, shape: tuple[int, ...]) -> list[int] | None:
    if flat is None:
        return None
    index = []
    for n in reversed(shape):
        index.append(flat % n if n else 0)
        flat //= n if n else 1
    return list(reversed(index))


# ---------------------------------------------------------------- the diff


@no_gc()  # a record per tensor, no cycles: the collector's passes over them grew faster than the tensors
def diff_checkpoints(
    a: Checkpoint,
    b: Checkpoint,
    only: list[str] | None = None,
    atol: float = 0.0,
    progress: Callable[[int, int], None] | None = None,
    quick: bool = False,
) -> DiffResult:
    """Compare every tensor of A with its match in B; see the module docstring.

    `progress(done_bytes, total_bytes)` is called on this thread as byte windows are compared. `quick`:
    structure only (structure_diff), no storage byte read.
    """
    _check_groups(only)
    result, xs, ys = _pair_up(a, b, only, atol)
    if quick:
        return structure_diff(result, zip(xs, ys, strict=True), a, b, only)
    pairs = [_Pair(x.name, x, y) for x, y in zip(xs, ys, strict=True)]
    with Blobs() as blobs_a, Blobs() as blobs_b:
        workers = worker_count()
        pool = ThreadPoolExecutor(workers, thread_name_prefix="ckinspect-diff") if workers > 1 else None
        run = _Run(a, b, blobs_a, blobs_b, pool)
        try:
            result.bytes_compared = _compare_bytes(run, pairs, progress)
            verdicts = _compare_values(run, pairs, atol)
        finally:
            if pool:
                pool.shutdown()
    for p, vd in verdicts:
        _record_verdict(result, p, vd)
    _record_composite_changes(result, a, b, only)
    if not only:  # the counters that decide what a resume does next are part of "identical", and so
        _record_counter_changes(result, a, b)  # is every other value saved beside the tensors
        _record_value_changes(result, a, b)
    return result


def structure_diff(
    result: DiffResult,
    pairs: Iterable[tuple[TensorInfo, TensorInfo]],
    a: Checkpoint,
    b: Checkpoint,
    only: list[str] | None,
) -> DiffResult:
    """diff --quick: each pair by dtype, shape, size and layout (strides, and the storage's kind where a
    reader records one), the non-tensor values and counters as in the full diff; no storage byte is read."""
    result.quick = True
    same = result.same_structure
    for x, y in pairs:  # each under A's name
        if x.shape == y.shape and x.dtype == y.dtype and x.stride == y.stride and _same_kind(x, y):
            same.append(x.name)  # the usual case, checked field by field before anything is built
            continue
        alike = _kind(x) == _kind(y) if x.stride == y.stride else _layout(x) == _layout(y)
        if alike and x.shape == y.shape and x.dtype == y.dtype:
            same.append(x.name)
            continue
        reason = "shape" if x.shape != y.shape else "dtype" if x.dtype != y.dtype else "layout"
        change = TensorChange(x.name, reason, a_name=x.name, b_name=y.name, a_dtype=x.dtype, b_dtype=y.dtype)
        change.a_shape, change.b_shape, change.numel = x.shape, y.shape, x.numel
        result.changed.append(change)
    if not only:
        _record_counter_changes(result, a, b)
        _record_value_changes(result, a, b)
    return result


def _layout(t: TensorInfo) -> tuple[Any, ...]:
    """What --quick compares beyond dtype and shape: the strides (contiguous ones are all alike) and the
    layout a reader records (sparse, nested ...)."""
    return ("contiguous" if t.is_contiguous else t.stride, _kind(t))


def _same_kind(x: TensorInfo, y: TensorInfo) -> bool:
    """_kind(x) == _kind(y), without looking up an attribute plain descriptors do not have."""
    return type(x) is TensorInfo and type(y) is TensorInfo or _kind(x) == _kind(y)


def _kind(t: TensorInfo) -> str:
    """The storage's kind where a reader records one (sparse, nested ...)."""
    return getattr(t, "layout", "strided")


class _Run(Record):
    """What the steps of one diff share: both checkpoints, their open files, the worker pool."""

    a: Checkpoint
    b: Checkpoint
    blobs_a: Blobs
    blobs_b: Blobs
    pool: ThreadPoolExecutor | None

    def map(self, fn: Callable[[Any], Any], items: list[Any], size: Callable[[Any], int]) -> Iterator[Any]:
        """fn over items, in order; on the pool in batches of about COMPARE_CHUNK bytes (`size` of each), so
        160,000 small tensors are a few hundred tasks, not 160,000 futures and their locks."""
        if not self.pool:
            return map(fn, items)
        batches = _batches(items, size)
        return (out for outs in self.pool.map(lambda batch: [fn(x) for x in batch], batches) for out in outs)


_MAX_BATCH = 1024  # items per pool task, whatever their size


def _batches(items: list[Any], size: Callable[[Any], int]) -> list[list[Any]]:
    """Consecutive items in runs of at most COMPARE_CHUNK bytes (one bigger item alone) and _MAX_BATCH items."""
    out: list[list[Any]] = []
    batch: list[Any] = []
    held = 0
    for item in items:
        n = size(item)
        if batch and (held + n > COMPARE_CHUNK or len(batch) >= _MAX_BATCH):
            out.append(batch)
            batch, held = [], 0
        batch.append(item)
        held += n
    if batch:
        out.append(batch)
    return out


def _check_groups(only: list[str] | None) -> None:
    unknown = [g for g in only or [] if g not in GROUPS]
    if unknown:
        from ckinspect.vocab import CkinspectError

        raise CkinspectError(f"--only {unknown[0]!r} is not a group (choose from {', '.join(GROUPS)})")


def _pair_up(a: Checkpoint, b: Checkpoint, only: list[str] | None,
             atol: float) -> tuple[DiffResult, list[TensorInfo], list[TensorInfo]]:  # fmt: skip
    """Match A's tensors to B's (within the groups asked for): the pairs as two lists, A's order, A's tensor beside
    its match; what only one side has goes in the result."""
    ra, rb = _memo(lambda: roles(a)), _memo(lambda: roles(b))
    ta, tb = _in_groups(a, ra, only), _in_groups(b, rb, only)
    alike = _named_alike(ta, tb)
    ka, kb, statement = ({}, {}, "names matched exactly") if alike else _match(ta, ra, tb, rb)
    if only:
        statement += f"; only group(s) {', '.join(only)} compared"
    result = DiffResult(a.path, b.path, match=statement, only=list(only) if only else None, atol=atol)
    if alike:
        return result, ta, tb
    if len(ka) != len(kb) or ka.keys() != kb.keys():
        _record_unmatched(result, ka, kb, ra, rb)
    paired = [key for key in ka if key in kb]
    return result, [ka[key] for key in paired], [kb[key] for key in paired]  # under A's name; B's is in "b"


def _record_unmatched(result: DiffResult, ka: dict[str, TensorInfo], kb: dict[str, TensorInfo],
                      ra: Callable[[], dict[str, str]], rb: Callable[[], dict[str, str]]) -> None:  # fmt: skip
    """The tensors only one side has, by name and counted by group."""
    result.only_a = [t.name for k, t in ka.items() if k not in kb]
    result.only_b = [t.name for k, t in kb.items() if k not in ka]
    _count_unmatched(ka, kb, ra(), result.only_a_groups)
    _count_unmatched(kb, ka, rb(), result.only_b_groups)


def _named_alike(ta: list[TensorInfo], tb: list[TensorInfo]) -> bool:
    """Do both sides name the same tensors in the same order, each name once (the usual diff: two saves of one
    model)? Then they pair position by position, as _match's first reading pairs them, with no dict per side and
    no lookup per tensor (at 640,000 tensors a side those lookups land all over two listings' memory)."""
    if len(ta) != len(tb):
        return False
    names = [t.name for t in ta]
    return names == [t.name for t in tb] and len(set(names)) == len(names)


def _in_groups(ckpt: Checkpoint, role: Callable[[], dict[str, str]], only: list[str] | None) -> list[TensorInfo]:
    if not only:
        return ckpt.tensors
    groups = role()
    return [t for t in ckpt.tensors if groups[t.name] in only]


def _count_unmatched(keys: dict[str, TensorInfo], other: dict[str, TensorInfo], role: dict[str, str],
                     counts: dict[str, int]) -> None:  # fmt: skip
    """Tensors of one side the other lacks, counted by group."""
    for k, t in keys.items():
        if k not in other:
            counts[role[t.name]] = counts.get(role[t.name], 0) + 1


_Range = tuple[Path, int, int]  # file, offset, length
_Chunk = tuple[Path, int, Path, int, int, list[_Pair]]  # file A, offset A, file B, offset B, length, pairs it settles


def _compare_bytes(run: _Run, pairs: list[_Pair], progress: Callable[[int, int], None] | None) -> int:
    """Step 1, bytes: pairs of the same dtype, shape and layout are settled by comparing their storage
    windows chunk by chunk; a chunk that differs marks its pairs unequal. Returns the bytes compared."""
    chunks = _byte_chunks(run, pairs)
    total = 2 * sum(c[4] for c in chunks)
    done = 0
    verdicts = run.map(functools.partial(_chunk_equal, run), chunks, lambda c: c[4])
    for chunk, (ok, ps) in zip(chunks, verdicts, strict=True):
        if not ok:
            for p in ps:
                p.equal = False
        done += 2 * chunk[4]
        if progress:
            progress(done, total)
    return total


def _byte_chunks(run: _Run, pairs: list[_Pair]) -> list[_Chunk]:
    """Every chunk worth a memcmp; pairs viewing the same bytes share theirs."""
    tasks: dict[tuple[tuple[_Range, _Range], ...], list[_Pair]] = {}
    for p in pairs:
        ranges = _byte_task(run, p)
        if ranges is not None:
            tasks.setdefault(ranges, []).append(p)
    chunks = []
    for extents, ps in tasks.items():
        for bytes_a, bytes_b in extents:
            for start in range(0, bytes_a[2], COMPARE_CHUNK):
                n = min(COMPARE_CHUNK, bytes_a[2] - start)
                chunks.append((bytes_a[0], bytes_a[1] + start, bytes_b[0], bytes_b[1] + start, n, ps))
    return chunks


def _byte_task(run: _Run, p: _Pair) -> tuple[tuple[_Range, _Range], ...] | None:
    """The byte ranges whose equality settles this pair (one pair of ranges, or one per chunk of a tensor
    stored in the same chunks on both sides); None when bytes cannot (p says why)."""
    if p.ta.shape != p.tb.shape or p.ta.dtype != p.tb.dtype:
        p.equal = False
        return None
    if p.ta.numel == 0:
        return None
    if _streamed(run, p):
        # inflated as values are compared (io.values streams the member), or a tensor in chunks cut otherwise on
        # the other side: both read in C order, bytes first, values where they differ
        p.equal, p.streamed = False, True
        return None
    try:
        if run.a.storages[p.ta.storage_key].extents is not None:
            return _chunk_ranges(run, p)
        bytes_a = _byte_ranges(run.a, run.blobs_a, p.ta)
        bytes_b = _byte_ranges(run.b, run.blobs_b, p.tb)
    except UnreadableStorage as exc:
        p.error = str(exc)
        return None
    if p.ta.stride != p.tb.stride and not (p.ta.is_contiguous and p.tb.is_contiguous) or _swapped(run, p):
        p.equal = False  # different layouts (or byte orders) of the same values: decide on values
        p.relaid = True
        return None
    return ((bytes_a, bytes_b),)


def _chunk_ranges(run: _Run, p: _Pair) -> tuple[tuple[_Range, _Range], ...]:
    """A tensor stored in the same chunks on both sides (_streamed said so): chunk against chunk."""
    sa, sb = run.a.storages[p.ta.storage_key], run.b.storages[p.tb.storage_key]
    ea, eb = sa.extents, sb.extents
    assert ea is not None and eb is not None  # noqa: S101 - _streamed checked
    out = []
    for i in range(len(ea)):
        ca, cb = ea.storage(i, sa.dtype, sa.key, p.ta.name), eb.storage(i, sb.dtype, sb.key, p.tb.name)
        out.append(((ca.file, *run.blobs_a.check_within(ca)), (cb.file, *run.blobs_b.check_within(cb))))
    return tuple(out)


def _streamed(run: _Run, p: _Pair) -> bool:
    """A side's bytes are in a deflated zip member (np.savez_compressed, a re-zipped torch file), or in chunks
    (DCP) that the other side does not cut the same way, byte order and all: no memcmp of ranges."""
    sa, sb = run.a.storages[p.ta.storage_key], run.b.storages[p.tb.storage_key]
    if sa.deflated is not None or sb.deflated is not None:
        return True
    ea, eb = sa.extents, sb.extents
    if ea is None and eb is None:
        return False
    return ea is None or eb is None or not (ea.whole and eb.whole and ea.same_boxes(eb) and ea.swapped == eb.swapped)


def _swapped(run: _Run, p: _Pair) -> bool:
    """One side's storage is big-endian and the other's is not: equal values, different bytes."""
    sa, sb = run.a.storages[p.ta.storage_key], run.b.storages[p.tb.storage_key]
    return sa.big_endian != sb.big_endian and swap_unit(p.ta.dtype) > 1


def _chunk_equal(run: _Run, chunk: _Chunk) -> tuple[bool, list[_Pair]]:
    fa, oa, fb, ob, n, ps = chunk
    mapped = folders.on_disk(fa) and folders.on_disk(fb)  # a URL is fetched by range reads: nothing to map
    if _MEMCMP is not None and n >= (256 << 10) and hasattr(mmap, "MAP_PRIVATE") and mapped:
        # no numpy on the all-identical path: importing it would cost more than comparing a GiB
        with run.blobs_a.address(fa, oa, n) as xa, run.blobs_b.address(fb, ob, n) as xb:
            return _MEMCMP(xa, xb, n) == 0, ps
    with run.blobs_a.window(fa, oa, n) as va, run.blobs_b.window(fb, ob, n) as vb:
        return _equal_windows(va, vb), ps


def _compare_values(run: _Run, pairs: list[_Pair], atol: float) -> list[tuple[_Pair, Any]]:
    """Step 2, values: only where the bytes (or the dtype) differ; (pair, its value diff or None)."""

    def judge(p: _Pair) -> tuple[_Pair, Any]:
        if p.error or p.equal or p.ta.shape != p.tb.shape:
            return p, None
        try:
            if p.streamed:  # bytes first, as the memcmp of members in place; values only where they differ
                if _streamed_bytes_equal(run, p):
                    return p, _ValueDiff()
                p.streamed = False
            if p.relaid and atol > 0:  # exactly equal in another layout, or only within atol?
                exact = compare_values(run.blobs_a, run.a, p.ta, run.blobs_b, run.b, p.tb, 0.0)
                if exact.n_diff == 0:
                    return p, exact
                p.relaid = False
            return p, compare_values(run.blobs_a, run.a, p.ta, run.blobs_b, run.b, p.tb, atol)
        except UnreadableStorage as exc:
            p.error = str(exc)
            return p, None

    return list(run.map(judge, pairs, lambda p: p.ta.nbytes + p.tb.nbytes))


def _streamed_bytes_equal(run: _Run, p: _Pair) -> bool:
    """Both sides' raw elements (native byte order) in C order, compared byte for byte as they are inflated."""
    import numpy as np

    xs, ys = value_blocks(run.blobs_a, run.a, p.ta), value_blocks(run.blobs_b, run.b, p.tb)
    return all(np.array_equal(x.view(np.uint8), y.view(np.uint8)) for x, y in _aligned(xs, ys))


def _record_verdict(result: DiffResult, p: _Pair, vd: Any) -> None:
    """One pair's outcome: unreadable, changed (shape, dtype or values), same, or same within atol."""
    x, y = p.ta, p.tb
    if p.error:
        result.unreadable.append((p.name, p.error))
        return
    common: dict[str, Any] = dict(
        a_name=x.name,
        b_name=y.name,
        a_dtype=x.dtype,
        b_dtype=y.dtype,
        a_shape=x.shape,
        b_shape=y.shape,
        numel=x.numel,
    )
    if x.shape != y.shape:
        result.changed.append(TensorChange(p.name, "shape", **common))
    elif x.dtype != y.dtype:
        result.changed.append(
            TensorChange(p.name, "dtype", vd.max_abs, vd.max_rel, vd.n_diff, _unravel(vd.first, x.shape), **common)
        )
    elif p.equal:
        result.same.append(p.name)
    elif vd.n_diff == 0:
        result.same.append(p.name)
        if not p.streamed:
            (result.relaid if p.relaid else result.within_atol).append(p.name)
    else:
        result.changed.append(
            TensorChange(p.name, "values", vd.max_abs, vd.max_rel, vd.n_diff, _unravel(vd.first, x.shape), **common)
        )


def _record_composite_changes(result: DiffResult, a: Checkpoint, b: Checkpoint, only: list[str] | None) -> None:
    """Composite tensors (sparse, nested, meta ...) by name: their parts were compared as tensors, so what
    is left is the whole's layout, logical shape and dtype, and a meta tensor (no parts) present on one side."""
    ca, cb = {c.name: c for c in a.composites}, {c.name: c for c in b.composites}
    if only and not (ca or cb):
        return
    result.only_a += [n for n, c in ca.items() if n not in cb and not c.parts]
    result.only_b += [n for n, c in cb.items() if n not in ca and not c.parts]
    for name in (n for n in ca if n in cb):
        x, y = ca[name], cb[name]
        reason = (
            "layout"
            if x.layout != y.layout
            else "shape"
            if x.shape != y.shape
            else "dtype"
            if x.dtype != y.dtype
            else ""
        )
        if reason:
            result.changed.append(TensorChange(name, reason, a_name=name, b_name=name, a_dtype=x.dtype, b_dtype=y.dtype,
                                               a_shape=x.shape, b_shape=y.shape))  # fmt: skip
        elif not x.parts:
            result.same.append(name)  # a meta tensor is its layout, shape and dtype: nothing else to compare


def _record_counter_changes(result: DiffResult, a: Checkpoint, b: Checkpoint) -> None:
    for key in RESUME_COUNTERS:
        va, vb = a.metadata.get(key), b.metadata.get(key)
        if va is not None and vb is not None and va != vb:
            result.metadata_changed[key] = [va, vb]


_SCALAR_TYPES = (str, int, float, bool, bytes, bytearray, type(None))


def non_tensor_values(ckpt: Checkpoint) -> dict[str, Any]:
    """Every scalar the checkpoint holds beside its tensors, by dotted path (`optimizer.param_groups.0.lr`,
    `loss`, `config.dim`): the decoded tree's leaves, or the reader's metadata when there is no tree."""
    from ckinspect.formats.tree import scalar_leaves

    return {path: value for path, value in scalar_leaves(_values_tree(ckpt), _SCALAR_TYPES) if path}


def _values_tree(ckpt: Checkpoint) -> Any:
    return ckpt.tree if ckpt.tree is not None else ckpt.metadata


def same_value(x: Any, y: Any) -> bool:
    """Equal and of the same type (True is not 1); NaN equals NaN."""
    if type(x) is not type(y):
        return False
    if isinstance(x, float) and math.isnan(x) and math.isnan(y):
        return True
    return bool(x == y)


def _record_value_changes(result: DiffResult, a: Checkpoint, b: Checkpoint) -> None:
    """Non-tensor values: those on both sides that differ make A and B different; those on one side only
    are listed (a weights file or a converted copy legitimately drops them) but decide nothing. Two trees alike in
    shape and keys (two saves of one run) are compared in one walk (tree.scalar_changes), other pairs by path."""
    from ckinspect.formats.tree import scalar_changes

    changes = scalar_changes(_values_tree(a), _values_tree(b), _SCALAR_TYPES, same_value)
    if changes is None:
        _record_value_changes_by_path(result, a, b)
        return
    for path, x, y in changes:  # the root itself has no path (non_tensor_values leaves it out)
        if path and path not in result.metadata_changed:
            result.values_changed.append(ValueChange(path, x, y))


def _record_value_changes_by_path(result: DiffResult, a: Checkpoint, b: Checkpoint) -> None:
    va, vb = non_tensor_values(a), non_tensor_values(b)
    for path, x in va.items():
        if path not in vb:
            result.values_only_a.append(path)
        elif path not in result.metadata_changed and not same_value(x, vb[path]):
            result.values_changed.append(ValueChange(path, x, vb[path]))
    result.values_only_b = [path for path in vb if path not in va]


class DeltaHistogram(Record):
    """How B - A is spread over one tensor's elements: counts in equal bins over [lo, hi]."""

    counts: list[int]
    lo: float
    hi: float
    nonfinite: int = 0  # elements whose difference is NaN or infinite (not in any bin)


def delta_histogram(a: Checkpoint, ta: TensorInfo, b: Checkpoint, tb: TensorInfo, bins: int = 24) -> DeltaHistogram:
    """The histogram of B - A over every element (same shape; dtypes may differ), streamed in bounded blocks.

    Two passes over the values: the first finds the range, the second counts; memory stays one block per side.
    """
    import numpy as np

    if tuple(ta.shape) != tuple(tb.shape):
        raise ValueError(f"{ta.name}: shapes differ, there is no element-wise difference")

    def deltas() -> Iterator[Any]:
        with Blobs() as blobs_a, Blobs() as blobs_b:
            for xa, xb in _aligned(value_blocks(blobs_a, a, ta), value_blocks(blobs_b, b, tb)):
                with np.errstate(invalid="ignore", over="ignore"):
                    yield decode(xb, tb.dtype).astype(np.float64) - decode(xa, ta.dtype).astype(np.float64)

    lo, hi, nonfinite = math.inf, -math.inf, 0
    for d in deltas():
        finite = d[np.isfinite(d)]
        nonfinite += d.size - finite.size
        if finite.size:
            lo, hi = min(lo, float(finite.min())), max(hi, float(finite.max()))
    if lo > hi:  # nothing finite
        return DeltaHistogram([0] * bins, 0.0, 0.0, nonfinite)
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    counts = np.zeros(bins, dtype=np.int64)
    for d in deltas():
        counts += np.histogram(d[np.isfinite(d)], bins=bins, range=(lo, hi))[0]
    return DeltaHistogram([int(c) for c in counts], lo, hi, nonfinite)
