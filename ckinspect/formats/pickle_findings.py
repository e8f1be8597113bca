"""Turning pickle scans into findings, shared by the torch zip, legacy, plain pickle and DCP readers."""

from __future__ import annotations

import functools
import io
import pickletools
import re
from operator import attrgetter

from ckinspect import steps
from ckinspect._native import load as load_native
from ckinspect.dtypes import dtype_info
from ckinspect.formats.errors import CorruptPickle, UnsafePickle
from ckinspect.formats.pickle_scan import (
    TORCH_REGISTERED_BY_IMPORT,
    TORCH_UNPICKLER_OPCODES,
    WEIGHTS_ONLY_TORCH,
    GlobalRef,
    PickleScan,
)
from ckinspect.formats.tree import MAX_TREE_DEPTH, flatten
from ckinspect.formats.unpickler import (
    NATIVE_STORAGE,
    StorageRef,
    _StorageType,
    restricted_load,
    storage_persistent_load,
)
from ckinspect.model import Checkpoint, StorageInfo, TensorInfo
from ckinspect.record import slot_descriptors

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

_MAX_LISTED = 12


def _names(refs: list[GlobalRef], mark_dangerous: bool) -> str:
    shown = [g.qualname + (" (can run code)" if mark_dangerous and g.dangerous else "") for g in refs[:_MAX_LISTED]]
    if len(refs) > _MAX_LISTED:
        shown.append(f"and {len(refs) - _MAX_LISTED} more")
    return ", ".join(shown)


# numpy type codes (without byte order) -> the numpy 2 DType class torch's weights_only BUILD needs allowed
_NUMPY_DTYPE_CLASSES = {
    "f2": "Float16DType", "f4": "Float32DType", "f8": "Float64DType", "f16": "LongDoubleDType",
    "i1": "Int8DType", "i2": "Int16DType", "i4": "Int32DType", "i8": "Int64DType",
    "u1": "UInt8DType", "u2": "UInt16DType", "u4": "UInt32DType", "u8": "UInt64DType",
    "b1": "BoolDType", "c8": "Complex64DType", "c16": "Complex128DType", "c32": "CLongDoubleDType",
    "O": "ObjectDType", "U": "StrDType", "S": "BytesDType", "V": "VoidDType",
    "M": "DateTime64DType", "m": "TimeDelta64DType",
}  # fmt: skip
_ARGS_TAIL = rb"(?:q.|r.{4}|\x94|p\d+\n)?(?:\x89|\x88|K[\x00\x01]|I0[01]\n)(?:\x89|\x88|K[\x00\x01]|I0[01]\n)"
# numpy.dtype(code, False, True) as pickles spell its arguments: a short string, two flags, a tuple (compiled
# by `re` when a pickle names numpy.dtype, not by every listing)
_DTYPE_ARGS = (
    rb"(?:(?:[U\x8c][\x01-\x05]|X[\x01-\x05]\x00\x00\x00)([<>|=]?[A-Za-z]\d{0,2})|S'([<>|=]?[A-Za-z]\d{0,2})'\n)"
    + _ARGS_TAIL
    + rb"(?:\x87|t)"
)


def numpy_dtype_classes(data: Any) -> list[str]:
    """`numpy.dtypes.*DType` classes of the numpy dtypes a pickle builds (numpy.dtype(code, False, True))."""
    found: list[str] = []
    for match in re.finditer(_DTYPE_ARGS, data, re.DOTALL):
        code = (match.group(1) or match.group(2)).decode("ascii").lstrip("<>|=")
        name = _NUMPY_DTYPE_CLASSES.get(code) or _NUMPY_DTYPE_CLASSES.get(code[:1] if code[:1] in "OUSVMm" else "")
        if name and name not in found:
            found.append(name)
    return found


def _allowlist_entry(g: GlobalRef) -> tuple[str, str | None]:
    """(the module to import, the add_safe_globals entry) for one benign global; the entry is None where torch
    allows the global itself once a module registering it is imported (that module is then the first)."""
    expr = g.qualname
    if expr in TORCH_REGISTERED_BY_IMPORT:
        return TORCH_REGISTERED_BY_IMPORT[expr], None
    if expr.startswith("numpy.core."):
        expr = "numpy._core." + expr[len("numpy.core.") :]
        return expr, f'({expr}, "{g.qualname}")'
    return expr, expr


def _dtype_classes(benign: list[GlobalRef], data: Any) -> list[str]:
    """The numpy DType classes a pickle naming numpy.dtype needs allowed too (none without its bytes)."""
    if data is None or not any(g.qualname == "numpy.dtype" for g in benign):
        return []
    return numpy_dtype_classes(data)


def allowlist_hint(benign: list[GlobalRef], data: Any = None) -> str:
    """The exact Python that lets torch.load(weights_only=True) read a pickle naming these globals, on numpy 2.

    numpy 1.x pickles name `numpy.core.*`, which numpy 2 keeps in `numpy._core`: torch matches the
    name the pickle uses, so such entries are (object, "name in the pickle") pairs. Each numpy dtype
    also needs its DType class (torch checks the type of the object BUILD fills).
    """
    entries: list[str] = []
    modules: list[str] = []
    for g in benign:
        expr, entry = _allowlist_entry(g)
        if entry is not None:
            entries.append(entry)
        module = expr if entry is None else expr.rsplit(".", 1)[0]
        if module not in modules:
            modules.append(module)
    classes = _dtype_classes(benign, data)
    entries += [f"numpy.dtypes.{c}" for c in classes]
    if classes and "numpy.dtypes" not in modules:
        modules.append("numpy.dtypes")
    imports = ", ".join([*modules, "torch"])
    if not entries:
        return f"import {imports}"
    return f"import {imports}; torch.serialization.add_safe_globals([{', '.join(entries)}])"


_MAX_LISTED_STEPS = 1000  # opcodes torch lacks looked at per pickle to name them; the first one decides


_LENGTHS_IN_RUN = 64  # string lengths the run's pattern steps over itself: its compile time grows with them
# ... in a pickle of _SMALL_PICKLE bytes or more. A smaller one is walked with a run of no string lengths:
# stepping over its strings in the loop costs less than compiling 128 alternatives (1-3 ms a process,
# against 0.06 ms more loop on the trainer's 7 KB resume pickle). The same answers either way.
_SMALL_PICKLE = 1 << 16


def _torch_run(lengths: int) -> tuple[re.Pattern[bytes], dict[int, int]]:
    """A possessive run of opcodes torch's unpickler implements, with their arguments, up to the first one
    it does not or a string of `lengths` bytes or more; and the length-prefixed opcodes it implements
    (opcode byte -> width of the length), which the loop steps over when the run stops at a long one."""
    fixed, sized = _torch_opcode_arguments()
    alts = [rb"c[^\n]*\n[^\n]*\n"]
    alts += [re.escape(bytes(codes)).join((b"[", b"]")) + b".{%d}" % n for n, codes in fixed.items()]
    for width, codes in sized.items():
        if lengths:  # none: the loop steps over every string
            steps = b"|".join(re.escape(k.to_bytes(width, "little")) + b".{%d}" % k for k in range(lengths))
            alts.append(re.escape(bytes(codes)).join((b"[", b"]")) + b"(?:" + steps + b")")
    widths = {code: width for width, codes in sized.items() for code in codes}
    return re.compile(b"(?:" + b"|".join(alts) + b")*+", re.DOTALL), widths


def _torch_opcode_arguments() -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """The opcodes torch's unpickler implements (but GLOBAL and STOP) by argument: fixed width -> codes, and
    width of the length -> codes of those whose argument is length-prefixed."""
    ops = {op.name: op for op in pickletools.opcodes}
    fixed: dict[int, list[int]] = {}
    sized: dict[int, list[int]] = {}
    for name in TORCH_UNPICKLER_OPCODES - {"GLOBAL", "STOP"}:
        op = ops[name]
        n = 0 if op.arg is None else op.arg.n
        if n >= 0:
            fixed.setdefault(n, []).append(ord(op.code))
        else:
            sized.setdefault(1 if n == pickletools.TAKEN_FROM_ARGUMENT1 else 4, []).append(ord(op.code))
    return fixed, sized


_TORCH_RUN: dict[int, tuple[re.Pattern[bytes], dict[int, int]]] = {}  # by lengths, compiled on first use


def torch_unreadable_opcodes(data: Any, start: int = 0, end: int | None = None) -> list[str]:
    """Opcodes of the pickle at `start` (ending by `end`) that torch's weights_only unpickler does not
    implement, in the order first met. [] when it implements them all, or where the bytes are not a pickle
    pickletools can follow (the scan reports damage)."""
    if data is None:
        return []
    end = len(data) if end is None else end
    lengths = _LENGTHS_IN_RUN if end - start >= _SMALL_PICKLE else 0
    if lengths not in _TORCH_RUN:
        _TORCH_RUN[lengths] = _torch_run(lengths)
    pattern, widths = _TORCH_RUN[lengths]
    run = pattern.match
    stream = io.BytesIO(data)  # one buffer for pickletools to step over what torch lacks; no copy per step
    seen: list[str] = []
    i = start
    steps = 0
    while steps < _MAX_LISTED_STEPS:
        i = run(data, i, end).end()  # type: ignore[union-attr]  # a *+ run always matches
        if i >= end or data[i] == 0x2E:  # STOP
            break
        width = widths.get(data[i])
        if width is not None and i + 1 + width <= end:  # a long string torch reads: step over it
            i += 1 + width + int.from_bytes(data[i + 1 : i + 1 + width], "little")
            continue
        steps += 1
        following = _step_over(stream, i, end, seen)
        if following is None:
            return seen  # what pickletools cannot follow the scan reports as damage
        i = following
    return seen


def _step_over(stream: io.BytesIO, i: int, end: int, seen: list[str]) -> int | None:
    """Step pickletools over the opcode at `i` (noting it in `seen` if torch lacks it): where the next one
    starts, or None where pickletools cannot follow the bytes."""
    stream.seek(i)
    try:
        ops = pickletools.genops(stream)
        op = next(ops)[0]
        if op.name not in TORCH_UNPICKLER_OPCODES and op.name not in seen:
            seen.append(op.name)
        following = next(ops)[2] if op.name != "STOP" else end
    except (ValueError, StopIteration, UnicodeDecodeError):
        return None
    return following if following is not None else end


TORCH_LOAD = "torch.load(PATH, weights_only=True)"
# torch.load reads only torch.save files; a plain pickle goes through the unpickler torch.load itself uses
PLAIN_PICKLE_LOAD = "torch._weights_only_unpickler.load(open(PATH, 'rb'), encoding='latin1')"


def record_globals(ckpt: Checkpoint, refs: list[GlobalRef], where: str, data: Any = None,
                   loader: str = TORCH_LOAD) -> bool:  # fmt: skip
    """Add every global to ckpt.globals and raise UNSAFE_PICKLE / ALLOWLIST_NEEDED. True if unsafe.

    `data`, the pickle's bytes where the caller has them, lets the ALLOWLIST_NEEDED hint name the numpy
    DType classes it needs."""
    known = set(ckpt.globals)  # a hostile pickle can name tens of thousands: no list scan per name
    for g in refs:
        if g.qualname not in known:
            known.add(g.qualname)
            ckpt.globals.append(g.qualname)
    unsafe = [g for g in refs if g.kind == "unsafe"]
    benign = [g for g in refs if g.kind == "benign"]
    if unsafe:
        _report_unsafe(ckpt, unsafe, where)
    elif benign:  # with unsafe globals too, allowing these would not make torch load it
        _report_allowlist(ckpt, benign, where, data, loader)
    return bool(unsafe)


def _report_unsafe(ckpt: Checkpoint, unsafe: list[GlobalRef], where: str) -> None:
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


def _report_allowlist(ckpt: Checkpoint, benign: list[GlobalRef], where: str, data: Any, loader: str) -> None:
    lacking = torch_unreadable_opcodes(data) if loader == PLAIN_PICKLE_LOAD else []
    if lacking:
        ckpt.add(
            "ALLOWLIST_NEEDED",
            f"{where} needs globals outside torch's default weights_only allowlist: {_names(benign, False)}; "
            f"they only build data, but no allowlist makes torch's weights_only unpickler read it: the pickle uses "
            f"opcodes it does not implement ({', '.join(lacking)}). Re-save it with pickle protocol 2 to load it so.",
        )
        return
    ckpt.add(
        "ALLOWLIST_NEEDED",
        f"{where} needs globals outside torch's default weights_only allowlist: {_names(benign, False)}. "
        f"torch's weights_only unpickler refuses it until they are allowed (numpy 2, torch >= 2.4): "
        f"`{allowlist_hint(benign, data)}`, then `{loader}`.",
    )


def _weights_only_judged(ckpt: Checkpoint, data: Any, scans: list[PickleScan]) -> bool:
    """Whether opcodes are what would make torch refuse: not where the pickles name unsafe globals
    (UNSAFE_PICKLE) or the file is damaged (CORRUPT: torch refuses it for that)."""
    if data is None or not len(data) or any(s.error is not None or s.unsafe for s in scans):
        return False
    return not any(f.code in ("CORRUPT", "UNSAFE_PICKLE") for f in ckpt.findings)


def check_weights_only(ckpt: Checkpoint, data: Any, scans: list[PickleScan], where: str,
                       loader: str = TORCH_LOAD) -> None:  # fmt: skip
    """WEIGHTS_ONLY_REFUSED when torch's weights_only unpickler (the installed torch's, WEIGHTS_ONLY_TORCH)
    would refuse the pickles `loader` reads for want of opcodes, not for danger: nothing is said where the
    pickles name unsafe globals (UNSAFE_PICKLE) or the file is damaged (CORRUPT: torch refuses it for that)."""
    if not _weights_only_judged(ckpt, data, scans):
        return
    lacking: list[str] = []
    for scan in scans:
        if scan.torch_opcodes:  # its walk met none that torch lacks (every scan here was walked to its STOP)
            continue
        lacking += [op for op in torch_unreadable_opcodes(data, scan.start, scan.end) if op not in lacking]
    if lacking:
        _report_refused(ckpt, lacking, scans, where, loader)


def _report_refused(ckpt: Checkpoint, lacking: list[str], scans: list[PickleScan], where: str, loader: str) -> None:
    protocols = sorted({s.protocol for s in scans if s.protocol != 2} or {s.protocol for s in scans})
    spelled = "/".join("0 or 1" if p == 0 else str(p) for p in protocols)  # protocols 0 and 1 have no PROTO
    ckpt.add(
        "WEIGHTS_ONLY_REFUSED",
        f"{where} uses pickle opcodes torch's weights_only unpickler (torch {WEIGHTS_ONLY_TORCH}) does not "
        f"implement: {', '.join(lacking)} (pickle protocol {spelled}). `{loader}` refuses it, though it names "
        "nothing unsafe. Load it with weights_only=False only if you trust where it comes from, or re-save it "
        "with pickle protocol 2 (torch.save's default).",
    )


class StorageCollector:
    """persistent_load that remembers every storage the pickle names, by its key in the pickle.

    `key_prefix` is put in front of the keys tensors carry, so storages from several pickles
    (DCP items) can live in one Checkpoint without clashing.
    """

    def __init__(self, key_prefix: str = "") -> None:
        self.storages: dict[str, StorageRef] = {}
        self.key_prefix = key_prefix

    def __call__(self, pid: Any) -> Any:
        # one storage object per key, so a dtype learned from one view holds for all of them; a
        # ("storage", type, key, location, numel) record as torch.save writes it is taken without the general
        # checks, in this one frame (the C unpickler calls it once per tensor)
        if type(pid) is tuple and len(pid) >= 5 and type(pid[2]) is str:
            key = pid[2]
            storages = self.storages
            ref = storages.get(key)
            if ref is not None:
                return ref
            stype, numel = pid[1], pid[4]
            if pid[0] == "storage" and type(stype) is _StorageType and type(numel) is int and numel >= 0:
                ref = StorageRef(self.key_prefix + key, stype.dtype, str(pid[3]), numel * stype.itemsize, stype.untyped)
                storages[key] = ref
                if not len(storages) % steps.EVERY:  # a file of 200,000 tensors: the TUI shows the count grow
                    steps.step("storages named by the pickle", len(storages))
                return ref
        return self._general(pid)

    def native_storages(self) -> tuple:
        """__call__'s first branch as the compiled pass takes it itself (pickle_walk.c's fast_storage)."""
        ref_fields, storage_type, type_fields = NATIVE_STORAGE
        return (self.storages, self.key_prefix, ref_fields, storage_type, type_fields, steps.EVERY,
                functools.partial(steps.step, "storages named by the pickle"))  # fmt: skip

    def _general(self, pid: Any) -> Any:
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
    torchscript: bool = False,
) -> Any:
    """Restricted-load a scanned pickle; CORRUPT/UNSAFE_PICKLE findings instead of exceptions. None on failure."""
    try:
        return restricted_load(data, persistent_load, scan=scan, guarded=guarded, torchscript=torchscript)
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
    ckpt.composites = []
    ckpt.tensors = flatten(tree, too_deep=too_deep, composites=ckpt.composites)
    if too_deep:
        ckpt.add("CORRUPT", f"the pickle nests containers more than {MAX_TREE_DEPTH} deep (at {too_deep[0]!r}...); "
                            "what lies deeper is not listed")  # fmt: skip
    check_views(ckpt)


def _last_element(t: TensorInfo) -> int | None:
    """The storage index of the view's last element (-1 when it has none: a size 0; negative strides can make it
    negative too, and a view ending before its storage starts reaches past nothing); None when the descriptor's
    fields are not of the types the unpickler makes (a shape and stride of one length, ints, an offset >= 0, str
    names) or a size is negative. check_views inlines it for a one-dimensional view."""
    shape, stride, last = t.shape, t.stride, t.storage_offset
    if (type(shape) is not tuple or type(stride) is not tuple or len(shape) != len(stride) or type(last) is not int
            or last < 0 or type(t.dtype) is not str or type(t.storage_key) is not str or type(t.name) is not str
            or type(t.group) is not str):  # fmt: skip
        return None
    empty = False
    for size, step in zip(shape, stride):  # noqa: B905 - of one length, checked above
        if type(size) is not int or type(step) is not int or size < 0:
            return None
        if size == 0:
            empty = True
        last += (size - 1) * step
    return -1 if empty else last


def check_views(ckpt: Checkpoint) -> None:
    """CORRUPT for tensor descriptors whose fields are not what the unpickler made (they are dropped;
    a defence in depth, as TensorInfo refuses a pickle's BUILD) and for views reaching past the
    bytes their storage holds.

    One pass, with plain loops: it runs once per tensor, 50,000 times for a big checkpoint. A one-dimensional view
    of a size >= 1 (most of a big checkpoint's) is judged in this frame: the 50,000 calls of _last_element cost
    as much as the rest of the loop (hence its complexity, above the house's 10).
    """
    if _views_judged_in_c(ckpt):
        return
    itemsizes: dict[str, int] = {}
    bad: list[TensorInfo] = []
    dropped: set[int] = set()  # ids of malformed descriptors (the verdict belongs to the object)
    for t, storage in zip(ckpt.tensors, _storages_of(ckpt), strict=True):
        shape, stride = t.shape, t.stride
        last: int | None = t.storage_offset
        if (type(shape) is tuple and len(shape) == 1 and type(stride) is tuple and len(stride) == 1
                and type(last) is int and last >= 0 and type(size := shape[0]) is int and size > 0
                and type(step := stride[0]) is int and type(t.dtype) is str and type(t.storage_key) is str
                and type(t.name) is str and type(t.group) is str):  # fmt: skip
            last += (size - 1) * step  # _last_element(t), inlined
        elif (last := _last_element(t)) is None:
            dropped.add(id(t))
            continue
        if last < 0 or storage is None or storage.offset is None and storage.nbytes == 0:
            continue  # missing storages are reported where they are found missing
        bits = itemsizes.get(t.dtype)
        if bits is None:
            bits = itemsizes[t.dtype] = t.bits  # quint4x2 and the packed floats: less than a byte each
        if ((last + 1) * bits + 7) >> 3 > storage.nbytes:
            bad.append(t)
    _report_views(ckpt, dropped, bad)


def _views_judged_in_c(ckpt: Checkpoint) -> bool:
    """check_views' loop in C where built (_native/views.c), its findings reported; False where it is not built or
    declines (a number past 64 bits, a dtype without a size): the loop then runs."""
    native = load_native("views")
    tensors = ckpt.tensors
    if native is None or type(tensors) is not list:
        return False
    judged = native.check(tensors, list(_storages_of(ckpt)), _bits_of(tensors), _TENSOR_SLOTS, _STORAGE_SLOTS)
    if judged is None:
        return False
    dropped, bad = judged
    _report_views(ckpt, {id(tensors[i]) for i in dropped}, [tensors[i] for i in bad])
    return True


def _bits_of(tensors: list[TensorInfo]) -> dict[str, int]:
    """Bits per element of each dtype the tensors name, as t.bits gives it (a dtype that is no str belongs to a
    descriptor check_views drops: left out, views.check never asks for it)."""
    try:
        dtypes = set(map(_DTYPE, tensors))
    except TypeError:  # an unhashable dtype: views.check declines for want of it, the loop drops the descriptor
        return {}
    return {dtype: dtype_info(dtype).bits for dtype in dtypes if type(dtype) is str}


_TENSOR_SLOTS = slot_descriptors(TensorInfo)  # name, dtype, shape, stride, storage_key, storage_offset, group
_STORAGE_SLOTS = tuple(vars(StorageInfo)[name] for name in ("offset", "nbytes"))
_DTYPE = attrgetter("dtype")


def _storages_of(ckpt: Checkpoint) -> Iterable[StorageInfo | None]:
    """The storage each tensor views, in order (None: not listed, or a key that is no str: check_views drops that
    descriptor). Where tensor i views storage i (torch.save's order) they are paired in place: 50,000 lookups in a
    dict of 50,000 cost more than the rest of the check."""
    storages = ckpt.storages
    keys = list(map(_STORAGE_KEY, ckpt.tensors))
    if keys == list(storages):
        return storages.values()
    return (storages.get(key) if type(key) is str else None for key in keys)


_STORAGE_KEY = attrgetter("storage_key")


def _report_views(ckpt: Checkpoint, dropped: set[int], bad: list[TensorInfo]) -> None:
    if dropped:
        malformed = sum(id(t) in dropped for t in ckpt.tensors)
        ckpt.tensors = [t for t in ckpt.tensors if id(t) not in dropped]
        ckpt.add("CORRUPT", f"{malformed} tensor descriptor(s) in the pickle are malformed and were dropped")
    if bad:
        t = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        ckpt.add("CORRUPT", f"tensor {t.name} reaches byte {t.byte_offset + t.span_bytes} of storage {t.storage_key}, "
                            f"which holds {ckpt.storages[t.storage_key].nbytes}{more}", t.name)  # fmt: skip
