"""Turning pickle scans into findings, shared by the torch zip, legacy, plain pickle and DCP readers."""

from __future__ import annotations

from ckinspect.formats.errors import CorruptPickle, UnsafePickle
from ckinspect.formats.pickle_scan import GlobalRef, PickleScan
from ckinspect.formats.tree import MAX_TREE_DEPTH, flatten
from ckinspect.formats.unpickler import StorageRef, _StorageType, restricted_load, storage_persistent_load
from ckinspect.model import Checkpoint, TensorInfo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_MAX_LISTED = 12


def _names(refs: list[GlobalRef], mark_dangerous: bool) -> str:
    shown = [g.qualname + (" (can run code)" if mark_dangerous and g.dangerous else "") for g in refs[:_MAX_LISTED]]
    if len(refs) > _MAX_LISTED:
        shown.append(f"and {len(refs) - _MAX_LISTED} more")
    return ", ".join(shown)


def record_globals(ckpt: Checkpoint, refs: list[GlobalRef], where: str) -> bool:
    """Add every global to ckpt.globals and raise UNSAFE_PICKLE / ALLOWLIST_NEEDED. True if unsafe."""
    known = set(ckpt.globals)  # a hostile pickle can name tens of thousands: no list scan per name
    for g in refs:
        if g.qualname not in known:
            known.add(g.qualname)
            ckpt.globals.append(g.qualname)
    unsafe = [g for g in refs if g.kind == "unsafe"]
    benign = [g for g in refs if g.kind == "benign"]
    if unsafe:
        dangerous = sum(g.dangerous for g in unsafe)
        if dangerous == len(unsafe):
            what = f"that can run code: {_names(unsafe, False)}"
        elif dangerous:
            what = f"outside the weights_only allowlist, some of which can run code: {_names(unsafe, True)}"
        else:
            what = f"outside the weights_only allowlist: {_names(unsafe, False)}"
        ckpt.add(
            "UNSAFE_PICKLE",
            f"{where} names globals {what}. Nothing was executed or imported here; pickle.load or "
            "torch.load(weights_only=False) would import and call them.",
        )
    if benign:
        listed = _names(benign, False)
        numpy_hint = (
            " (numpy dtypes also need their class, e.g. numpy.dtypes.UInt32DType)"
            if any(g.qualname == "numpy.dtype" for g in benign) else ""
        )  # fmt: skip
        ckpt.add(
            "ALLOWLIST_NEEDED",
            f"{where} needs globals outside torch's default weights_only allowlist: {listed}. "
            f"torch.load(weights_only=True) refuses it until they are allowed: "
            f"torch.serialization.add_safe_globals([{listed}]){numpy_hint}, "
            "or the same list in `with torch.serialization.safe_globals([...]):`.",
        )
    return bool(unsafe)


class StorageCollector:
    """persistent_load that remembers every storage the pickle names, by its key in the pickle.

    `key_prefix` is put in front of the keys tensors carry, so storages from several pickles
    (DCP items) can live in one Checkpoint without clashing.
    """

    def __init__(self, key_prefix: str = "") -> None:
        self.storages: dict[str, StorageRef] = {}
        self.key_prefix = key_prefix

    def __call__(self, pid: Any) -> Any:
        # one storage object per key, so a dtype learned from one view holds for all of them
        if type(pid) is tuple and len(pid) >= 5 and type(pid[2]) is str:
            key = pid[2]
            known = self.storages.get(key)
            if known is not None:
                return known
            stype, numel = pid[1], pid[4]
            if pid[0] == "storage" and type(stype) is _StorageType and type(numel) is int and numel >= 0:
                ref = StorageRef(self.key_prefix + key, stype.dtype, str(pid[3]), numel * stype.itemsize, stype.untyped)
                self.storages[key] = ref
                return ref
        ref = storage_persistent_load(pid)
        if isinstance(ref, StorageRef):
            raw = ref.key
            if raw in self.storages:
                return self.storages[raw]
            if self.key_prefix:
                ref.key = self.key_prefix + raw
            self.storages[raw] = ref
        return ref


def decode(
    ckpt: Checkpoint,
    data: bytes,
    scan: PickleScan,
    where: str,
    persistent_load: Callable[[Any], Any] | None = None,
    guarded: frozenset[str] = frozenset(),
) -> Any:
    """Restricted-load a scanned pickle; CORRUPT/UNSAFE_PICKLE findings instead of exceptions. None on failure."""
    try:
        return restricted_load(data, persistent_load, scan=scan, guarded=guarded)
    except UnsafePickle as exc:  # the scan missed it: still refused, still reported
        if not any(f.code == "UNSAFE_PICKLE" for f in ckpt.findings):
            ckpt.add(
                "UNSAFE_PICKLE", f"{where} names globals outside the allowlist: {', '.join(exc.names)}; never executed."
            )
        return None
    except CorruptPickle as exc:
        ckpt.add("CORRUPT", f"{where} cannot be decoded: {exc}")
        return None


def set_tree(ckpt: Checkpoint, tree: Any) -> None:
    """Adopt a decoded tree: its tensors named by their paths, malformed views dropped (check_views)."""
    ckpt.tree = tree
    too_deep: list[str] = []
    ckpt.tensors = flatten(tree, too_deep=too_deep)
    if too_deep:
        ckpt.add("CORRUPT", f"the pickle nests containers more than {MAX_TREE_DEPTH} deep (at {too_deep[0]!r}...); "
                            "what lies deeper is not listed")  # fmt: skip
    check_views(ckpt)


def check_views(ckpt: Checkpoint) -> None:
    """CORRUPT for tensor descriptors whose fields are not what the unpickler made (they are dropped;
    a defence in depth, as TensorInfo refuses a pickle's BUILD) and for views reaching past the
    bytes their storage holds.

    One pass, with plain loops: it runs once per tensor, 50,000 times for a big checkpoint.
    """
    storages = ckpt.storages
    itemsizes: dict[str, int] = {}
    bad: list[TensorInfo] = []
    dropped: set[int] = set()  # ids of malformed descriptors (the verdict belongs to the object)
    for t in ckpt.tensors:
        shape, stride, offset, dtype, key = t.shape, t.stride, t.storage_offset, t.dtype, t.storage_key
        if (
            type(shape) is not tuple
            or type(stride) is not tuple
            or len(shape) != len(stride)
            or type(offset) is not int
            or offset < 0
            or type(dtype) is not str
            or type(key) is not str
            or type(t.name) is not str
            or type(t.group) is not str
        ):
            dropped.add(id(t))
            continue
        last = offset
        empty = ok = False
        for size, step in zip(shape, stride, strict=True):
            if type(size) is not int or type(step) is not int or size < 0:
                break
            if size == 0:
                empty = True
            last += (size - 1) * step
        else:
            ok = True
        if not ok:
            dropped.add(id(t))
            continue
        storage = storages.get(key)
        if empty or storage is None or storage.offset is None and storage.nbytes == 0:
            continue  # missing storages are reported where they are found missing
        itemsize = itemsizes.get(dtype)
        if itemsize is None:
            itemsize = itemsizes[dtype] = t.itemsize
        if (last + 1) * itemsize > storage.nbytes:
            bad.append(t)
    if dropped:
        malformed = sum(id(t) in dropped for t in ckpt.tensors)
        ckpt.tensors = [t for t in ckpt.tensors if id(t) not in dropped]
        ckpt.add("CORRUPT", f"{malformed} tensor descriptor(s) in the pickle are malformed and were dropped")
    if bad:
        t = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        ckpt.add("CORRUPT", f"tensor {t.name} reaches byte {t.byte_offset + t.span_bytes} of storage {t.storage_key}, "
                            f"which holds {ckpt.storages[t.storage_key].nbytes}{more}", t.name)  # fmt: skip
