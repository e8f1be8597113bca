"""Static pickle scan: every global a pickle names, found without running or importing anything.

A pickle is a program for a small stack machine; the only way it reaches code outside the data
is through globals (GLOBAL, INST, STACK_GLOBAL, EXT*), so listing those lists everything loading
it could call. Nothing here builds the objects a pickle describes or calls what it names.

The lean walk reads opcodes and their arguments (runs of them in one regex match, in C), checks the
bounds (memo indices no real pickler writes: CPython's C unpickler sizes its memo to the largest
index it sees, so a 20-byte pickle could otherwise make it allocate gigabytes), and names the GLOBAL,
INST and EXT globals. Only a pickle with STACK_GLOBAL (protocol 4+, where the names come off the
stack) needs an interpreter, and there is one: CPython's own unpickler, given inert stand-ins, when
the pickle is held in memory and reads to its STOP; otherwise the stack walk below, which takes each
opcode's stack effect from pickletools' table and follows pickle.py's semantics for the rest.
"""

from __future__ import annotations

import _compat_pickle
import codecs
import copyreg
import functools
import io
import pickle
import pickletools
import re
import struct
import sys
import zlib

from ckinspect._native import load as load_native
from ckinspect.record import Record, field
from ckinspect.vocab import GlobalKind

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# ----------------------------------------------------------------------------------------------
# Classification

# torch's default weights_only allowlist (torch/_weights_only_unpickler.py, _get_allowed_globals
# and _tensor_rebuild_functions), spelled out so that classifying never imports torch.
_TORCH_DTYPES = [
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "complex128",
    "complex64",
    "complex32",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float4_e2m1fn_x2",
    "bits8",
    "bits16",
    "bits1x8",
    "bits2x4",
    "bits4x2",
    "uint16",
    "uint32",
    "uint64",
    "qint8",
    "qint32",
    "quint8",
    "quint4x2",
    "quint2x4",
    "uint1",
    "uint2",
    "uint3",
    "uint4",
    "uint5",
    "uint6",
    "uint7",
    "int1",
    "int2",
    "int3",
    "int4",
    "int5",
    "int6",
    "int7",
]
_TORCH_TENSOR_CLASSES = ["Double", "Float", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool"]
_TORCH_STORAGE_CLASSES = _TORCH_TENSOR_CLASSES + ["ComplexDouble", "ComplexFloat"]
_TORCH_QSTORAGES = ["QInt32", "QInt8", "QUInt2x4", "QUInt4x2", "QUInt8"]
_TORCH_REBUILD = [
    "_rebuild_parameter",
    "_rebuild_parameter_with_state",
    "_rebuild_qtensor",
    "_rebuild_tensor",
    "_rebuild_tensor_v2",
    "_rebuild_tensor_v3",
    "_rebuild_sparse_tensor",
    "_rebuild_meta_tensor_no_storage",
    "_rebuild_nested_tensor",
    "_rebuild_wrapper_subclass",
    "_rebuild_device_tensor_from_numpy",
    "_rebuild_device_tensor_from_cpu_tensor",
]

ALLOWED: frozenset[str] = frozenset(
    [
        "collections.OrderedDict",
        "collections.Counter",
        "torch.nn.parameter.Parameter",
        "torch.serialization._get_layout",
        "torch.Size",
        "torch.Tensor",
        "torch.device",
        "_codecs.encode",
        "builtins.bytearray",
        "builtins.set",
        "builtins.complex",
        "torch._tensor._rebuild_from_type_v2",
        "torch.storage.TypedStorage",
        "torch.storage.UntypedStorage",
        *(f"torch.{d}" for d in _TORCH_DTYPES),
        *(
            f"torch.{q}"
            for q in [
                "per_tensor_affine",
                "per_tensor_symmetric",
                "per_channel_affine",
                "per_channel_symmetric",
                "per_channel_affine_float_qparams",
            ]
        ),
        *(f"torch._utils.{f}" for f in _TORCH_REBUILD),
        *(f"{m}.{c}Tensor" for m in ("torch", "torch.cuda") for c in _TORCH_TENSOR_CLASSES),
        *(
            f"{m}.{c}Tensor"
            for m in ("torch.sparse", "torch.cuda.sparse")
            for c in _TORCH_TENSOR_CLASSES
            if c != "Bool"
        ),
        *(f"{m}.{c}Storage" for m in ("torch", "torch.cuda") for c in _TORCH_STORAGE_CLASSES),
        *(f"torch.{q}Storage" for q in _TORCH_QSTORAGES),
    ]
)

# Harmless data classes torch's default set leaves out: they build values, never run code.
BENIGN: frozenset[str] = frozenset(
    [
        "numpy.core.multiarray._reconstruct",
        "numpy._core.multiarray._reconstruct",
        "numpy.core.multiarray.scalar",
        "numpy._core.multiarray.scalar",
        "numpy.ndarray",
        "numpy.dtype",
        "numpy.random._pickle.__randomstate_ctor",
        "numpy.random._pickle.__bit_generator_ctor",
        "numpy.random._pickle.__generator_ctor",
        "argparse.Namespace",
        "collections.defaultdict",
        "collections.deque",
        "pathlib.Path",
        "pathlib.PosixPath",
        "pathlib.WindowsPath",
        "pathlib.PurePath",
        "pathlib.PurePosixPath",
        "pathlib.PureWindowsPath",
        "builtins.frozenset",
        "builtins.slice",
        "builtins.range",
        "builtins.list",
        "builtins.dict",
        "builtins.tuple",
        "builtins.int",
        "builtins.float",
        "builtins.str",
        "builtins.bytes",
        "builtins.bool",
        "builtins.object",
        "copyreg._reconstructor",
        "datetime.datetime",
        "datetime.date",
        "datetime.timedelta",
        "datetime.timezone",
        "decimal.Decimal",
        "fractions.Fraction",
        "uuid.UUID",
        "torch.distributed.checkpoint.filesystem._StorageInfo",
        "torch.distributed.checkpoint.filesystem._StoragePrefix",
    ]
)
# Globals torch's weights_only unpickler accepts once the torch module that registers them (add_safe_globals,
# at its import) has been imported. `import torch` imports torch.nested and torch.distributed.device_mesh
# itself (ALLOWED below); not torch._dynamo (the dim marks an NJT carries) nor torch.distributed.tensor
# (DTensors): torch.load(weights_only=True) refuses such a file until the user imports them (ALLOWLIST_NEEDED).
TORCH_REGISTERED_BY_IMPORT: dict[str, str] = {
    "torch._dynamo.decorators._DimRange": "torch._dynamo",
    **{f"torch.distributed.{name}": "torch.distributed.tensor" for name in (
        "tensor.DTensor", "device_mesh.DeviceMesh", "tensor._dtensor_spec.DTensorSpec",
        "tensor._dtensor_spec.TensorMeta", "tensor._dtensor_spec.ShardOrderEntry",
        "tensor.placement_types.Partial", "tensor.placement_types.Replicate", "tensor.placement_types.Shard",
        "tensor.placement_types._StridedShard")},
}  # fmt: skip
TORCH_REGISTERED_BY_DEFAULT = (
    "torch.nested._internal.nested_tensor.NestedTensor",  # jagged nested tensors (NJT)
    "torch.nested._internal.nested_tensor._rebuild_njt",
    "torch.distributed._mesh_layout._MeshLayout",  # a DTensor's device mesh
    "torch.distributed._mesh_layout._FlatLayout",
)

_BENIGN_MODULES: tuple[str, ...] = (
    "torch.distributed.checkpoint.metadata",  # DCP .metadata dataclasses and enums
    "numpy.dtypes",  # numpy 2 DType classes (Float64DType ...)
)

# What torch.jit.load's own unpickler resolves in a TorchScript archive (one holding `constants.pkl`,
# torch/serialization.py _is_torchscript_zip): `__torch__.*` classes are compiled from the archive's
# `code/` (EMBEDDED_CODE says so), the `torch.jit._pickle` helpers only rebuild lists and type tags.
TORCHSCRIPT_HELPERS: frozenset[str] = frozenset(
    f"torch.jit._pickle.{name}"
    for name in ("build_intlist", "build_tensorlist", "build_doublelist", "build_boollist", "build_tensor_from_id",
                 "restore_type_tag")
)  # fmt: skip
TORCHSCRIPT_MODULE = "__torch__"


def is_torchscript_global(module: str, name: str) -> bool:
    """Resolved by torch.jit.load inside a TorchScript archive, never imported from Python."""
    if module == TORCHSCRIPT_MODULE or module.startswith(TORCHSCRIPT_MODULE + "."):
        return bool(name)
    return f"{module}.{name}" in TORCHSCRIPT_HELPERS


def mark_torchscript(scans: list[PickleScan]) -> None:
    """Inside a TorchScript archive, the globals torch.jit.load itself resolves are no longer unsafe."""
    for scan in scans:
        for g in scan.globals:
            if g.kind == "unsafe" and is_torchscript_global(g.module, g.name):
                g.kind = GlobalKind.TORCHSCRIPT


# Globals that give a pickle code execution, file or network access; named so messages can say so.
_DANGEROUS_MODULES: frozenset[str] = frozenset(
    [
        "os",
        "posix",
        "nt",
        "sys",
        "subprocess",
        "runpy",
        "importlib",
        "pty",
        "socket",
        "shutil",
        "ctypes",
        "pickle",
        "_pickle",
        "marshal",
        "code",
        "codeop",
        "commands",
        "popen2",
        "webbrowser",
        "multiprocessing",
        "asyncio",
        "signal",
        "threading",
        "_thread",
        "pdb",
        "bdb",
        "timeit",
        "trace",
        "cProfile",
        "profile",
        "pydoc",
        "ensurepip",
        "venv",
        "distutils",
        "setuptools",
        "pip",
        "tempfile",
        "http",
        "urllib",
        "ftplib",
        "smtplib",
        "telnetlib",
        "socketserver",
        "xmlrpc",
        "ssl",
        "io",
        "_io",
        "fileinput",
        "zipimport",
        "pkgutil",
        "types",
        "inspect",
        "operator",
        "functools",
        "dill",
        "cloudpickle",
        "joblib",
        "torch.hub",
        "torch.jit",
        "torch._dynamo",
        "torch.ops",
        "torch.utils.cpp_extension",
        "torch.package",
    ]
)
_DANGEROUS_NAMES: frozenset[str] = frozenset(
    [
        "eval",
        "exec",
        "compile",
        "open",
        "__import__",
        "getattr",
        "setattr",
        "delattr",
        "globals",
        "locals",
        "vars",
        "breakpoint",
        "input",
        "exit",
        "quit",
        "help",
        "apply",
        "execfile",
        "file",
        "reload",
        "system",
        "popen",
        "spawn",
        "spawnl",
        "spawnv",
        "spawnve",
        "spawnlp",
        "execv",
        "execve",
        "execl",
        "execlp",
        "Popen",
        "call",
        "check_call",
        "check_output",
        "run",
        "getoutput",
        "getstatusoutput",
        "run_path",
        "run_module",
        "import_module",
        "load",
        "loads",
    ]
)


class GlobalRef(Record):
    """One global a pickle names. `kind`: "allowed" (torch's default set), "benign", "unsafe", or
    "torchscript" (resolved by torch.jit.load inside a TorchScript archive, see mark_torchscript)."""

    module: str
    name: str
    kind: str
    opcode: str = "GLOBAL"

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"

    @property
    def dangerous(self) -> bool:
        """Known to run code, touch files or the network (os.system, builtins.eval, subprocess ...)."""
        return is_dangerous(self.module, self.name)


def normalize(module: str, name: str) -> tuple[str, str]:
    """Python 2 spellings (__builtin__, copy_reg ...) mapped the way pickle maps them on load."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


def is_dangerous(module: str, name: str) -> bool:
    module, name = normalize(module, name)
    root = module.split(".", 1)[0]
    if module in ("builtins", "__builtin__"):
        return name.split(".", 1)[0] in _DANGEROUS_NAMES or name.startswith("_")
    if module in _DANGEROUS_MODULES or root in _DANGEROUS_MODULES:
        return True
    return any(module == m or module.startswith(m + ".") for m in _DANGEROUS_MODULES if "." in m) or (
        name.split(".")[-1] in _DANGEROUS_NAMES
    )


def classify_global(module: str, name: str) -> GlobalKind:
    """ "allowed" if torch.load(weights_only=True) accepts it by default, "benign" if it only builds
    data, "unsafe" otherwise (including every name known to run code)."""
    module, name = normalize(module, name)
    qualname = f"{module}.{name}"
    if qualname in ALLOWED:
        return GlobalKind.ALLOWED
    if qualname in TORCH_REGISTERED_BY_DEFAULT:
        return GlobalKind.ALLOWED
    if qualname in BENIGN or qualname in TORCH_REGISTERED_BY_IMPORT:
        return GlobalKind.BENIGN
    if module in _BENIGN_MODULES and "." not in name and not name.startswith("__"):
        return GlobalKind.BENIGN
    return GlobalKind.UNSAFE


# ----------------------------------------------------------------------------------------------
# The walk

# Opcodes torch/_weights_only_unpickler.py's Unpickler.load implements (protocol 2 as torch.save writes it,
# plus a few), as of the torch named here. tests/formats/test_weights_only.py reads that file of the
# installed torch and fails when either changes: a torch upgrade must come with this set re-read. The walk
# notes whether a pickle keeps to them (PickleScan.torch_opcodes); pickle_findings names the others.
WEIGHTS_ONLY_TORCH = "2.13"
TORCH_UNPICKLER_OPCODES = frozenset(
    (
        "GLOBAL",
        "NEWOBJ",
        "REDUCE",
        "BUILD",
        "APPEND",
        "APPENDS",
        "SETITEM",
        "SETITEMS",
        "MARK",
        "TUPLE",
        "TUPLE1",
        "TUPLE2",
        "TUPLE3",
        "NONE",
        "NEWFALSE",
        "NEWTRUE",
        "EMPTY_TUPLE",
        "EMPTY_LIST",
        "EMPTY_DICT",
        "EMPTY_SET",
        "BININT",
        "BININT1",
        "BININT2",
        "BINFLOAT",
        "BINUNICODE",
        "SHORT_BINSTRING",
        "BINPERSID",
        "BINGET",
        "LONG_BINGET",
        "BINPUT",
        "LONG_BINPUT",
        "LONG1",
        "PROTO",
        "STOP",
    )
)
_TORCH_CODES = frozenset(ord(op.code) for op in pickletools.opcodes if op.name in TORCH_UNPICKLER_OPCODES)

# Per opcode byte: >= 0 fixed argument length; negative values name a special handler.
_LEN1, _LEN4, _LEN8, _LINE, _LINE2, _STOP, _STACK_GLOBAL, _PROTO, _LONG_BINPUT, _PUT, _EXT, _BAD = range(-1, -13, -1)
_TABLE = [_BAD] * 256
for _op in pickletools.opcodes:
    _code = ord(_op.code)
    _arg = _op.arg
    if _op.name == "STOP":
        _TABLE[_code] = _STOP
    elif _op.name == "STACK_GLOBAL":
        _TABLE[_code] = _STACK_GLOBAL
    elif _op.name == "PROTO":
        _TABLE[_code] = _PROTO
    elif _op.name == "LONG_BINPUT":
        _TABLE[_code] = _LONG_BINPUT
    elif _op.name == "PUT":
        _TABLE[_code] = _PUT
    elif _op.name in ("EXT1", "EXT2", "EXT4"):
        _TABLE[_code] = _EXT
    elif _op.name in ("GLOBAL", "INST"):
        _TABLE[_code] = _LINE2
    elif _arg is None:
        _TABLE[_code] = 0
    elif _arg.n >= 0:
        _TABLE[_code] = _arg.n
    elif _arg.n == pickletools.UP_TO_NEWLINE:
        _TABLE[_code] = _LINE
    elif _arg.n == pickletools.TAKEN_FROM_ARGUMENT1:
        _TABLE[_code] = _LEN1
    elif _arg.n in (pickletools.TAKEN_FROM_ARGUMENT4, pickletools.TAKEN_FROM_ARGUMENT4U):
        _TABLE[_code] = _LEN4
    elif _arg.n == pickletools.TAKEN_FROM_ARGUMENT8U:
        _TABLE[_code] = _LEN8
_EXT_SIZES = {0x82: 1, 0x83: 2, 0x84: 4}
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


# ----------------------------------------------------------------------------------------------
# Where the bytes come from: a buffer in memory, a range of a file, or a deflated zip member.
# The walk holds one window of them at a time, so a pickle of any size is scanned in bounded memory.

WINDOW = 1 << 20  # bytes held at a time when scanning a stream
MAX_LINE = 1 << 20  # a GLOBAL/INST line longer than this names nothing importable: reported as is
MAX_NAME = 1 << 16  # strings longer than this are never resolved as module or global names
MAX_GLOBALS = 10_000  # distinct globals listed per pickle; beyond, one "and more" entry (unsafe)
MAX_STACK = 1 << 22  # stack items + marks tracked; beyond, names taken from the stack are unresolved
MAX_MEMO = 1 << 20  # memo slots tracked (string values and sparse indices); beyond, as above
MAX_EVENTS = 1 << 18  # GLOBAL/INST/STACK_GLOBAL opcodes a pickle may hold for CPython's walk (beyond: ours)
MAX_CPYTHON_BYTES = 64 << 20  # pickles up to this size (held in memory) are walked by CPython's unpickler
MIN_BLOCKS = 1 << 20  # objects CPython's walk may build whatever it read (about 64 MB) ...
MAX_BLOCKS_PER_BYTE = 1 / 3  # ... and beyond, per byte read (a torch.save pickle builds 0.2): then our own walk


class _Range:
    """What every source over a known byte range shares: a position, an end, and skipping within them."""

    pos: int
    end: int

    def skip(self, n: int) -> int:
        step = max(0, min(n, self.end - self.pos))
        self.pos += step
        return step


class BufferSource(_Range):
    """Bytes already in memory (bytes, mmap, memoryview) from `start` to `end`."""

    def __init__(self, data, start: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = start
        self.end = len(data) if end is None else min(end, len(data))

    def read(self, n: int) -> bytes:
        chunk = bytes(self.data[self.pos : min(self.pos + n, self.end)])
        self.pos += len(chunk)
        return chunk


class FileSource(_Range):
    """A range of a file, by positioned reads through `reader` (a FileReader): a window at a time."""

    def __init__(self, reader, start: int, end: int) -> None:
        self.reader = reader
        self.pos = start
        self.end = end

    def read(self, n: int) -> bytes:
        chunk = self.reader.read_at(self.pos, max(0, min(n, self.end - self.pos)))
        self.pos += len(chunk)
        return chunk


class InflateSource:
    """A raw-deflate zip member, inflated a window at a time and never past `limit` bytes (its declared
    size: a member that inflates beyond it ends there, as a reader that trusts the directory would stop)."""

    def __init__(self, reader, start: int, compressed: int, limit: int) -> None:
        self.raw = FileSource(reader, start, start + compressed)
        self.inflate = zlib.decompressobj(-15)
        self.left = limit
        self.pending = b""
        self.error: str | None = None

    def read(self, n: int) -> bytes:
        out = []
        want = min(n, self.left)
        while want > 0:
            if not self.pending:
                tail = self.inflate.unconsumed_tail
                feed = tail or self.raw.read(1 << 16)
                if not feed:
                    break
                try:
                    self.pending = self.inflate.decompress(feed, min(want, WINDOW))
                except zlib.error as exc:
                    self.error = f"bad deflate data ({exc})"
                    break
                if not self.pending and not self.inflate.unconsumed_tail and self.inflate.eof:
                    break
                continue
            piece, self.pending = self.pending[:want], self.pending[want:]
            out.append(piece)
            want -= len(piece)
            self.left -= len(piece)
        return b"".join(out)

    def skip(self, n: int) -> int:
        done = 0
        while done < n:
            chunk = self.read(min(n - done, WINDOW))
            if not chunk:
                break
            done += len(chunk)
        return done


class _Window:
    """The bytes the walk sees: `buf` holds the stream from absolute offset `base` on."""

    __slots__ = ("source", "buf", "base", "eof")

    def __init__(self, source, buf=b"", base: int = 0, eof: bool = False) -> None:
        self.source = source
        self.buf = buf
        self.base = base
        self.eof = eof

    def more(self, i: int, need: int) -> int:
        """Drop what lies before `i` and read until `need` bytes follow it (or the stream ends); the new i."""
        if self.eof:
            return i
        parts = [bytes(self.buf[i:])]
        have = len(parts[0])
        target = max(need, WINDOW)
        while have < target:
            chunk = self.source.read(target - have)
            if not chunk:
                self.eof = True
                break
            parts.append(chunk)
            have += len(chunk)
        self.base += i
        self.buf = b"".join(parts)
        return 0

    def skip(self, i: int, count: int) -> tuple[int, bool]:
        """Move `count` bytes on from `i` without holding them: (new i, whether they were all there)."""
        n = len(self.buf)
        if i + count <= n:
            return i + count, True
        missing = i + count - n
        got = 0 if self.eof else self.source.skip(missing)
        self.base += n + got
        self.buf = b""
        if got < missing:
            self.eof = True
            return 0, False
        return 0, True


def _ext_ref(code: int) -> GlobalRef:
    """An EXT opcode names the global copyreg's extension registry maps its code to (pickle.py's
    get_extension); an unregistered code is reported as itself: another process may register it."""
    key = copyreg._inverted_registry.get(code)  # type: ignore[attr-defined]
    if key:
        return _ref(key[0], key[1], "EXT")
    return GlobalRef("copyreg", f"<extension code {code}>", "unsafe", "EXT")


class _Names:
    """Distinct globals in order of first appearance, bounded (MAX_GLOBALS); and, for CPython's walk, the
    opcodes that name a global in the order they come (a GlobalRef per GLOBAL/INST, None per STACK_GLOBAL),
    up to MAX_EVENTS (`events` is None past that)."""

    __slots__ = ("seen", "refs", "ext_codes", "overflow", "events")

    def __init__(self) -> None:
        self.seen: set[tuple[str, str]] = set()
        self.refs: list[GlobalRef] = []
        self.ext_codes: set[int] = set()
        self.overflow = 0
        self.events: list[GlobalRef | None] | None = []

    def event(self, ref: GlobalRef | None) -> None:
        if self.events is not None:
            self.events.append(ref)
            if len(self.events) > MAX_EVENTS:
                self.events = None

    def add(self, ref: GlobalRef) -> None:
        key = (ref.module, ref.name)
        if key in self.seen:
            return
        if len(self.refs) >= MAX_GLOBALS:
            if not self.overflow:
                self.refs.append(GlobalRef("<more>", f"more than {MAX_GLOBALS} distinct globals", "unsafe", ref.opcode))
            self.overflow += 1
            return
        self.seen.add(key)
        self.refs.append(ref)

    def ext(self, code: int) -> None:
        if code not in self.ext_codes:  # pickle caches an extension after its first lookup
            self.ext_codes.add(code)
            self.add(_ext_ref(code))


def _global_line(raw: bytes, ascii_only: bool) -> str | None:
    """A GLOBAL (utf-8) or INST (ascii) line as pickle decodes it; None where pickle's decode fails."""
    try:
        return raw.decode("ascii" if ascii_only else "utf-8")
    except UnicodeDecodeError:
        return None


def _read_line(w: _Window, i: int) -> tuple[int, bytes | None, bool]:
    """(i after the line, the line without its newline or None when longer than MAX_LINE, found a newline).

    At the end of the data pickle.py's readline returns what is left, and load_global still strips its
    last byte: the caller gets that remainder with `found` False."""
    while True:
        data = w.buf
        a = data.find(b"\n", i)
        if a >= 0:
            return a + 1, (bytes(data[i:a]) if a - i <= MAX_LINE else None), True
        if w.eof:
            return len(data), (bytes(data[i:]) if len(data) - i <= MAX_LINE else None), False
        if len(data) - i > MAX_LINE:  # a huge line: look for its end a window at a time, holding none of it
            while True:
                w.base += len(w.buf)
                w.buf = b""
                w.more(0, WINDOW)
                a = w.buf.find(b"\n")
                if a >= 0:
                    return a + 1, None, True
                if w.eof:
                    return len(w.buf), None, False
        i = w.more(i, len(data) - i + WINDOW)


def _line_global(result: PickleScan, names: _Names, module: bytes | None, name: bytes | None, opcode: str) -> None:
    if module is None or name is None:
        ref = GlobalRef("<long name>", f"{opcode} line over {MAX_LINE} bytes", "unsafe", opcode)
        names.event(ref)
        names.add(ref)
        return
    mod, nam = _global_line(module, opcode == "INST"), _global_line(name, opcode == "INST")
    if mod is None or nam is None:
        # pickle stops at the decode; reported all the same (the bytes name nothing importable)
        mod, nam = module.decode("utf-8", "replace"), name.decode("utf-8", "replace")
    ref = _ref(mod, nam, opcode)
    names.event(ref)
    names.add(ref)


def _line_pair(w: _Window, i: int) -> tuple[int, bytes | None, bytes | None, bool]:
    """GLOBAL/INST arguments as pickle.py reads them: two readlines, each with its last byte dropped."""
    i, first, found = _read_line(w, i)
    if not found:
        return i, (first[:-1] if first else b""), b"", False
    i, second, found = _read_line(w, i)
    if not found and second is not None:
        second = second[:-1]
    return i, first, second, found


# ----------------------------------------------------------------------------------------------
# The interpreter: one loop over pickletools' opcode table, in two passes

# Runs of opcodes whose arguments need no decision are skipped by one regex match (in C): those with
# fixed-size arguments, strings and bytes of under 256 bytes (one alternative per length: sre checks
# each alternative's first byte and moves on), and LONG_BINPUT with an index below the memo bound.
# The Python loop below only sees the rest (GLOBAL lines, STACK_GLOBAL, long strings ...).
# The run is possessive: a regex that could backtrack would keep state per repetition, and a
# pickle of a million DUPs would cost gigabytes.
_FIXED_NOARG = bytes(c for c in range(256) if _TABLE[c] == 0)
_FIXED = {k: bytes(c for c in range(256) if _TABLE[c] == k) for k in (1, 2, 4, 8)}
_SIZED = {1: bytes(c for c in range(256) if _TABLE[c] == _LEN1), 4: bytes(c for c in range(256) if _TABLE[c] == _LEN4)}
_SHORT_ARG = 256  # sized arguments under this many bytes are skipped inside the regex
# ... in a window of a pickle of more than 64 KiB. A smaller one is walked with a pattern of fewer lengths
# (none under 32 KiB): the longer strings go through the loop, which for a few kilobytes costs less than
# compiling the alternatives (256 lengths: 8 ms, a sixth of listing a small file from the command line;
# 48: 1.6 ms, against 0.13 ms more loop on the trainer's 7 KB resume pickle). The same answers either way.
_SHORT_ARGS = ((1 << 15, 0), (1 << 16, 48))  # (pickles up to this many bytes, lengths in the run)
_MEMO_FLOOR = 1 << 16  # a LONG_BINPUT index is out of range beyond 2 * max(bytes of the pickle seen, this)


def _class(codes: bytes) -> bytes:
    return b"[" + b"".join(re.escape(bytes([c])) for c in codes) + b"]"


def _lengths(width: int, short: int) -> bytes:
    """A length field of `width` bytes holding n < `short`, then n bytes: one alternative per n."""
    return b"(?:" + b"|".join(re.escape(n.to_bytes(width, "little")) + b".{%d}" % n for n in range(short)) + b")"


def _below(bits: int) -> bytes:
    """LONG_BINPUT's 4-byte little-endian index, below 2**bits."""
    full, rest = divmod(bits, 8)
    if full >= 4:
        return b"...."
    top = b"[\x00-" + re.escape(bytes([(1 << rest) - 1])) + b"]"
    return b"." * full + top + b"\x00" * (3 - full)


def _run_pattern(memo_bits: int, short: int = _SHORT_ARG, torch_only: bool = False) -> re.Pattern[bytes]:
    """`torch_only`: only the opcodes torch's weights_only unpickler implements are stepped over in the run."""
    keep = _TORCH_CODES if torch_only else range(256)

    def kept(codes: bytes) -> bytes:
        return bytes(c for c in codes if c in keep)

    alts = [_class(kept(_FIXED_NOARG)) + b"++"]
    alts += [_class(kept(codes)) + b"." * k for k, codes in _FIXED.items() if kept(codes)]
    alts += [_class(kept(codes)) + _lengths(width, short) for width, codes in _SIZED.items() if short and kept(codes)]
    alts.append(b"r" + _below(memo_bits))
    return re.compile(b"(?:" + b"|".join(alts) + b")++", re.DOTALL)


_RUNS: dict[tuple[int, int, bool], re.Pattern[bytes]] = {}
_MEMO_BITS = (17, 20, 24, 28, 32)  # a few bounds, so a window at a time compiles one or two patterns


def _short_args(seen: int) -> int:
    """How many string lengths the run pattern of a window ending at byte `seen` steps over itself."""
    return next((short for size, short in _SHORT_ARGS if seen <= size), _SHORT_ARG)


def _run_for(seen: int, torch_only: bool = False):
    """The run matcher for a window ending at byte `seen`: LONG_BINPUT indices under a power of two within
    the memo bound (2 * max(seen, _MEMO_FLOOR)) are taken in the run; the loop checks the others.
    `torch_only`: the run stops at every opcode torch's weights_only unpickler lacks, for the loop to note."""
    bound = 2 * max(seen, _MEMO_FLOOR)
    bits = max(b for b in _MEMO_BITS if 1 << b <= bound)
    short = _short_args(seen)
    run = _RUNS.get((bits, short, torch_only))
    if run is None:
        run = _RUNS[bits, short, torch_only] = _run_pattern(bits, short, torch_only)
    return run.match


def _truncated(result: PickleScan, w: _Window, i: int, needed: int) -> int:
    end = w.base + len(w.buf)
    result.end = end
    result.error = f"pickle truncated at byte {end}: it ends without STOP"
    result.truncated = True
    result.needed = max(needed, end + 1)
    return min(i, len(w.buf))


# What the second pass keeps of pickle.py's state: strings on the stack and in the memo, as names need them.

_S = pickle  # opcode bytes as pickle.py names them
# Opcodes that fill the object under their arguments, which stays on the stack (pickletools gives it as both
# popped and pushed); a string there stays a string.
_IN_PLACE = frozenset(ord(c) for c in (_S.APPEND, _S.APPENDS, _S.SETITEM, _S.SETITEMS, _S.ADDITEMS, _S.BUILD))


def _stack_effect(op: pickletools.OpcodeInfo) -> tuple[bool, int, int]:
    """(pops the frame since the mark, items popped below it, None values pushed), from pickletools' table."""
    before, after = op.stack_before, op.stack_after
    to_mark = pickletools.markobject in before
    pops = before.index(pickletools.markobject) if to_mark else len(before)
    pushes = len(after)
    if ord(op.code) in _IN_PLACE:
        pops, pushes = pops - 1, pushes - 1
    return to_mark, pops, pushes


_EFFECT = {ord(op.code): _stack_effect(op) for op in pickletools.opcodes}
_STR_LEN = {ord(_S.SHORT_BINUNICODE): 1, ord(_S.BINUNICODE): 4, ord(_S.BINUNICODE8): 8,
            ord(_S.SHORT_BINSTRING): 1, ord(_S.BINSTRING): 4}  # fmt: skip
_BINSTRINGS = frozenset((ord(_S.SHORT_BINSTRING), ord(_S.BINSTRING)))
_MEMO_PUT = {ord(_S.BINPUT): 1, ord(_S.LONG_BINPUT): 4}
_MEMO_GET = {ord(_S.BINGET): 1, ord(_S.LONG_BINGET): 4}
_SIZE_WIDTH = {_LEN1: 1, _LEN4: 4, _LEN8: 8}


class _Memo:
    """pickle's memo as far as names need it: which slots exist (MEMOIZE writes to slot len(memo)) and
    which hold strings. Dense slots 0..count-1 cost one counter; past MAX_MEMO it is `lost`."""

    __slots__ = ("count", "sparse", "strings", "lost")

    def __init__(self) -> None:
        self.count = 0  # slots 0 .. count-1 all exist
        self.sparse: set[int] = set()  # slots beyond them
        self.strings: dict[int, str] = {}
        self.lost = False

    def put(self, index: int, value: str | None) -> None:
        if self.lost:
            return
        if index == self.count:
            self.count += 1
            while self.count in self.sparse:
                self.sparse.discard(self.count)
                self.count += 1
        elif index > self.count:
            self.sparse.add(index)
        if value is None:
            self.strings.pop(index, None)
        else:
            self.strings[index] = value
        if len(self.sparse) > MAX_MEMO or len(self.strings) > MAX_MEMO:
            self.lose()

    def memoize(self, value: str | None) -> None:
        self.put(self.count + len(self.sparse), value)

    def get(self, index: int) -> str | None:
        return None if self.lost else self.strings.get(index)

    def lose(self) -> None:
        self.lost = True
        self.sparse.clear()
        self.strings.clear()


class _Interpreter:
    """pickle.py's _Unpickler over one pickle, opcode for opcode, in bounded memory: one loop, one handler per
    kind of argument (from pickletools' table: _TABLE), one stack effect per opcode (_EFFECT).

    Every pass reads each opcode's argument the same way: lengths and memo indices checked against the bytes
    (CPython's C unpickler sizes its memo to the largest index it sees, so a 20-byte pickle could otherwise
    make it allocate gigabytes), GLOBAL, INST and EXT names listed, truncation and unknown opcodes found.
    The first pass (`track` False) does only that, and lets one regex match (in C) step over runs of opcodes
    that need no decision. Only a pickle with STACK_GLOBAL (protocol 4+, where the names come off the stack)
    that CPython's own unpickler does not walk for us needs the second (`track` True): the same handlers, each
    opcode applied to a stack of strings (every other value is None), as pickle.py applies it. MARK starts a
    new frame (the old one goes to a metastack); POP on an empty frame pops the mark; a container that APPEND,
    SETITEM(S), ADDITEMS or BUILD fill stays what it was. STACK_GLOBAL resolves when both names are strings the
    data spelled out; otherwise (a value some call returned) it is reported unresolved.

    The first pass also notes whether the pickle keeps to the opcodes torch's weights_only unpickler implements
    (`result.torch_opcodes`): its run steps over only those until the first other one, which goes through the
    loop (beyond_torch); from there on it steps over every opcode that needs no decision."""

    __slots__ = ("w", "i", "result", "names", "track", "stack", "metastack", "depth", "lost", "memo", "handlers")

    def __init__(self, w: _Window, i: int, result: PickleScan, names: _Names, track: bool = False) -> None:
        self.w, self.i, self.result, self.names, self.track = w, i, result, names, track
        self.stack: list[str | None] = []
        self.metastack: list[list[str | None]] = []
        self.depth = 0  # items and marks held, for the MAX_STACK bound
        self.lost = False  # past the bound: nothing on the stack is known any more
        self.memo = _Memo()
        self.handlers = _HANDLERS if track or not result.torch_opcodes else _TORCH_HANDLERS

    def walk(self) -> int:
        """Walk to the pickle's STOP; the window position after it (or where the walk gave up, with
        `result.error` set)."""
        w = self.w
        run = self.run_matcher()
        while True:
            if self.near_end():
                run = self.refill()
            if run is not None and self.skip_run(run):
                continue
            if self.i >= len(w.buf):
                return self.truncated(self.i, w.base + len(w.buf) + 1)
            handled = self.handlers[w.buf[self.i]](self, w.buf[self.i])
            if handled is None:  # the first opcode torch lacks, noted: the same opcode again, with the full run
                run = self.run_matcher()
            elif not handled:
                return self.i
            if self.track and self.depth > MAX_STACK:
                run = self.lose()

    def run_matcher(self):
        """The first pass's run matcher for the current window (None in the second pass)."""
        if self.track:
            return None
        return _run_for(self.w.base + len(self.w.buf), self.handlers is _TORCH_HANDLERS)

    def beyond_torch(self, op: int) -> None:
        """An opcode torch's weights_only unpickler does not implement: noted; the walk takes it again."""
        self.result.torch_opcodes = False
        self.handlers = _HANDLERS

    def near_end(self) -> bool:
        return len(self.w.buf) - self.i < 16 and not self.w.eof

    def refill(self):
        """At least 16 bytes ahead in the window (unless the data ends); the run matcher for the new window."""
        self.i = self.w.more(self.i, 16)
        return self.run_matcher()

    def skip_run(self, run) -> bool:
        """Step over a run of opcodes that need no decision; True when the window must be refilled first."""
        m = run(self.w.buf, self.i)
        if m is None:
            return False
        self.i = m.end()
        return len(self.w.buf) - self.i < 16 and not self.w.eof

    def lose(self):
        """Past MAX_STACK items and marks nothing on the stack is known any more: every STACK_GLOBAL from here
        on is unresolved, so the rest is walked as the first pass walks it (regex runs and all)."""
        self.lost, self.track = True, False
        self.memo.lose()
        self.stack, self.metastack, self.depth = [], [], 0
        return self.run_matcher()

    def truncated(self, i: int, needed: int) -> int:
        self.i = _truncated(self.result, self.w, i, needed)
        return self.i

    def fail(self, at: int, message: str) -> bool:
        """Stop at window position `at`: `message` says why, {at} standing for the offset."""
        self.result.end = self.w.base + at
        self.result.error = message.format(at=self.w.base + at)
        self.i = at
        return False

    # -- arguments, one handler per kind (the table's argument descriptor)
    def fixed(self, op: int) -> bool:
        i, n = self.i, len(self.w.buf)
        end = i + 1 + _TABLE[op]
        if end > n:
            self.truncated(n, self.w.base + end)
            return False
        self.i = end
        if self.track:
            _FIXED_STACK[op](self, op, i + 1)
        return True

    def sized(self, op: int) -> bool:
        w, i = self.w, self.i
        kind = _TABLE[op]
        width = _SIZE_WIDTH[kind]
        head = 1 + width
        if i + head > len(w.buf):
            self.truncated(len(w.buf), w.base + i + head)
            return False
        size = w.buf[i + 1] if width == 1 else int.from_bytes(w.buf[i + 1 : i + head], "little")
        if i + head + size > len(w.buf) and head + size <= WINDOW:
            i = w.more(i, head + size)
        if i + head + size <= len(w.buf):
            self.i = i + head + size
            if self.track:
                self.sized_value(op, i + head, size)
            return True
        want = w.base + i + head + size
        self.i, whole = w.skip(i + head, size)
        if not whole:
            self.truncated(len(w.buf), want)
            return False
        if self.track:
            self.sized_value(op, -1, size)
        return True

    def long_binput(self, op: int) -> bool:
        w, i = self.w, self.i
        if i + 5 > len(w.buf):
            self.truncated(len(w.buf), w.base + i + 5)
            return False
        index = _U32.unpack_from(w.buf, i + 1)[0]
        if index > 2 * max(w.base + len(w.buf), _MEMO_FLOOR) and self.result.memo_error is None:
            # a pickler numbers memo slots 0, 1, 2 ...: refuse to decode, but keep walking for the globals after it
            self.result.memo_error = f"memo index {index} at byte {w.base + i} is out of range"
        self.i = i + 5
        if self.track:
            self.memo.put(index, self.top())
        return True

    def line(self, op: int) -> bool:  # an argument up to a newline: INT, LONG, FLOAT, STRING, UNICODE, PERSID, GET, PUT
        w = self.w
        at = w.base + self.i
        self.i, text, found = _read_line(w, self.i + 1)
        if not found:
            self.truncated(self.i, w.base + len(w.buf) + 1)
            return False
        bound = 2 * max(w.base + len(w.buf), _MEMO_FLOOR)
        if op == _PUT_OP and self.result.memo_error is None and _memo_line(text) > bound:
            self.result.memo_error = f"memo index {(text or b'')[:20]!r} at byte {at} is out of range"
        if self.track:
            _LINE_STACK.get(op, _Interpreter.line_effect)(self, op, text or b"")
        return True

    def line_global(self, op: int) -> bool:  # GLOBAL, INST
        self.i, first, second, found = _line_pair(self.w, self.i + 1)
        _line_global(self.result, self.names, first, second, "GLOBAL" if op == 0x63 else "INST")
        if not found:
            self.truncated(self.i, self.w.base + len(self.w.buf) + 1)
            return False
        if self.track:
            if op == 0x69:  # INST builds from the frame since the mark
                self.pop_mark()
            self.push(None)
        return True

    def stop(self, op: int) -> bool:
        self.i += 1
        self.result.end = self.w.base + self.i
        return False

    def stack_global(self, op: int) -> bool:
        self.i += 1
        if not self.track:
            self.result.stack_globals += 1
            self.names.event(None)
            if self.lost:
                self.names.add(GlobalRef("<unresolved>", "STACK_GLOBAL", "unsafe", "STACK_GLOBAL"))
            return True
        name = self.stack.pop() if self.stack else None
        module = self.stack.pop() if self.stack else None
        self.depth -= 2
        if not self.lost and isinstance(module, str) and isinstance(name, str):
            self.names.add(_ref(module, name, "STACK_GLOBAL"))
        else:
            self.names.add(GlobalRef("<unresolved>", "STACK_GLOBAL", "unsafe", "STACK_GLOBAL"))
        self.push(None)
        return True

    def proto(self, op: int) -> bool:
        w, i = self.w, self.i
        if i + 2 > len(w.buf):
            self.truncated(len(w.buf), w.base + i + 2)
            return False
        self.result.protocol = w.buf[i + 1]
        if self.result.protocol > 5:
            return self.fail(i, f"unsupported pickle protocol {self.result.protocol} at byte {{at}}")
        self.i = i + 2
        return True

    def ext(self, op: int) -> bool:
        w, i = self.w, self.i
        size = _EXT_SIZES[op]
        if i + 1 + size > len(w.buf):
            self.truncated(len(w.buf), w.base + i + 1 + size)
            return False
        self.names.ext(int.from_bytes(w.buf[i + 1 : i + 1 + size], "little", signed=op == 0x84))
        self.i = i + 1 + size
        if self.track:
            self.push(None)
        return True

    def unknown(self, op: int) -> bool:
        return self.fail(self.i, f"unknown opcode 0x{op:02x} at byte {{at}}: not a pickle, or corrupt")

    # -- the stack (second pass only)
    def push(self, value: str | None) -> None:
        self.stack.append(value)
        self.depth += 1

    def top(self) -> str | None:
        return self.stack[-1] if self.stack and not self.lost else None

    def pop_mark(self) -> None:
        self.depth -= len(self.stack) + 1
        self.stack = self.metastack.pop() if self.metastack else []

    def effect(self, op: int, at: int = 0) -> None:
        """What pickletools' table says the opcode does to the stack, with None for every value it pushes."""
        to_mark, pops, pushes = _EFFECT[op]
        if to_mark:
            self.pop_mark()
        take = min(pops, len(self.stack))
        if take:
            del self.stack[-take:]
            self.depth -= take
        for _ in range(pushes):
            self.push(None)

    def line_effect(self, op: int, text: bytes) -> None:
        self.effect(op)

    def push_none(self, op: int, at: int) -> None:  # what most opcodes do: push a value that is not a string
        self.stack.append(None)
        self.depth += 1

    def no_effect(self, op: int, at: int) -> None:  # PROTO, FRAME, ...
        pass

    def sized_value(self, op: int, at: int, size: int) -> None:
        """A string (its bytes at window position `at`, -1 when skipped unheld) pushed as its value, if short
        enough to name a module or a global; any other sized argument pushes what the table says."""
        if op not in _STR_LEN:
            self.effect(op)
            return
        value: str | None = None
        if at >= 0 and size <= MAX_NAME:
            try:
                value = bytes(self.w.buf[at : at + size]).decode(
                    "utf-8", "surrogateescape" if op in _BINSTRINGS else "surrogatepass"
                )
            except UnicodeDecodeError:
                value = None
        self.push(value)

    def mark(self, op: int, at: int) -> None:
        self.metastack.append(self.stack)
        self.stack = []
        self.depth += 1

    def pop(self, op: int, at: int) -> None:  # POP on an empty frame pops the mark
        if self.stack:
            self.stack.pop()
            self.depth -= 1
        else:
            self.pop_mark()

    def dup(self, op: int, at: int) -> None:
        self.push(self.stack[-1] if self.stack else None)

    def memo_put(self, op: int, at: int) -> None:  # BINPUT
        self.memo.put(self.w.buf[at], self.top())

    def memo_get(self, op: int, at: int) -> None:  # BINGET, LONG_BINGET
        index = int.from_bytes(self.w.buf[at : at + _MEMO_GET[op]], "little")
        self.push(None if self.lost else self.memo.get(index))

    def memoize(self, op: int, at: int) -> None:
        self.memo.memoize(self.top())

    def quoted_string(self, op: int, text: bytes) -> None:  # STRING: a quoted repr
        value = None
        if len(text) >= 2 and text[:1] == text[-1:] and text[:1] in (b"'", b'"'):
            try:
                value = codecs.escape_decode(text[1:-1])[0].decode("utf-8", "surrogateescape")
            except (ValueError, UnicodeDecodeError):
                value = None
        self.push(value)

    def unicode_line(self, op: int, text: bytes) -> None:  # UNICODE
        try:
            self.push(text.decode("raw-unicode-escape"))
        except UnicodeDecodeError:
            self.push(None)

    def text_put(self, op: int, text: bytes) -> None:  # PUT
        if text.strip().isdigit() and len(text) <= 12:
            self.memo.put(int(text), self.top())

    def text_get(self, op: int, text: bytes) -> None:  # GET
        index = int(text) if text.strip().isdigit() and len(text) <= 12 else -1
        self.push(None if self.lost else self.memo.get(index))


_PUT_OP = ord(_S.PUT)


def _memo_line(text: bytes | None) -> int:
    """A PUT line's index as the bound sees it: one that is no number, or longer than 12 bytes, is out of range."""
    if text is None or len(text) > 12 or not text.strip().isdigit():
        return 1 << 64
    return int(text)


def _handler(op: int):
    """The argument handler of one opcode byte, by the kind _TABLE (pickletools' argument descriptor) gives it."""
    kind = _TABLE[op]
    special = {_STOP: _Interpreter.stop, _STACK_GLOBAL: _Interpreter.stack_global, _PROTO: _Interpreter.proto,
               _LONG_BINPUT: _Interpreter.long_binput, _EXT: _Interpreter.ext, _LINE2: _Interpreter.line_global,
               _LINE: _Interpreter.line, _PUT: _Interpreter.line, _BAD: _Interpreter.unknown}  # fmt: skip
    if kind >= 0:
        return _Interpreter.fixed
    return special.get(kind, _Interpreter.sized)


_HANDLERS = [_handler(op) for op in range(256)]
_TORCH_HANDLERS = [_HANDLERS[op] if op in _TORCH_CODES else _Interpreter.beyond_torch for op in range(256)]
# Second pass: opcodes whose stack effect pickletools' table does not say whole (marks, the memo, DUP, POP)
_SPECIAL_STACK = {
    ord(_S.MARK): _Interpreter.mark, ord(_S.POP): _Interpreter.pop, ord(_S.DUP): _Interpreter.dup,
    ord(_S.MEMOIZE): _Interpreter.memoize, ord(_S.BINPUT): _Interpreter.memo_put,
    **{op: _Interpreter.memo_get for op in _MEMO_GET},
}  # fmt: skip
_COMMON_EFFECTS = {(False, 0, 1): _Interpreter.push_none, (False, 0, 0): _Interpreter.no_effect}
_FIXED_STACK = [
    _SPECIAL_STACK.get(op) or _COMMON_EFFECTS.get(_EFFECT.get(op, (True, 0, 0)), _Interpreter.effect)
    for op in range(256)
]
_LINE_STACK = {ord(_S.STRING): _Interpreter.quoted_string, ord(_S.UNICODE): _Interpreter.unicode_line,
               ord(_S.PUT): _Interpreter.text_put, ord(_S.GET): _Interpreter.text_get}  # fmt: skip


def _lean_walk(w: _Window, i: int, result: PickleScan, names: _Names) -> int:
    """The first pass over one pickle from window position `i` (arguments, bounds, GLOBAL/INST/EXT names)."""
    return _Interpreter(w, i, result, names).walk()


def _stack_walk(w: _Window, i: int, result: PickleScan, names: _Names) -> None:
    """The second pass: the same interpreter tracking pickle.py's stack, metastack and memo, for STACK_GLOBAL's
    names (`result`, already filled by the first pass, is left as it is)."""
    _Interpreter(w, i, PickleScan(start=result.start), names, track=True).walk()


# ----------------------------------------------------------------------------------------------
# CPython's walk: its own C unpickler is the interpreter, every global it asks for answered by an inert
# stand-in. It runs only on a pickle the lean walk read to its STOP with no memo index out of range and no
# EXT (so every declared size is within the bytes, the memo stays within a few slots per byte, and each
# find_class call is one GLOBAL, INST or STACK_GLOBAL opcode, in order). Nothing the pickle names is
# imported or called: find_class records (module, name) and hands back _Inert; persistent ids become
# _Inert too. Its answer is taken only when it reads the pickle to its STOP: where it stops early (an
# opcode applied to what the stand-ins are not; the C unpickler also refuses some lines pickle.py reads,
# an empty module name for one) our own stack walk names what comes after, as it does for streams.


class _Inert:
    """What a global or a persistent id becomes: accepts every call the opcodes make on it, keeps nothing."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __setstate__(self, state) -> None:
        pass

    def __setitem__(self, key, value) -> None:
        pass

    def append(self, value) -> None:
        pass

    def extend(self, values) -> None:
        pass

    def add(self, value) -> None:
        pass


class _Recorder(pickle.Unpickler):
    def __init__(self, file) -> None:
        super().__init__(file, fix_imports=False, encoding="utf-8", errors="surrogateescape")
        self.asked: list[tuple[str, str]] = []
        self.persistent_load = functools.partial(object.__new__, _Inert)  # type: ignore[method-assign]

    def find_class(self, module: str, name: str) -> type:
        self.asked.append((module, name))
        return _Inert


class _Over(Exception):
    """Raised into CPython's unpickler when what it built outgrows what it read."""


class BoundedInput:
    """The bytes [start, end) of `data` as a file CPython's C unpickler reads, that stops it once the objects it
    built outgrow the bytes it read: more than MAX_BLOCKS_PER_BYTE memory blocks per byte (sys.getallocatedblocks,
    beyond a floor of MIN_BLOCKS). The unpickler prefetches through `peek` (128 KB at a time), so that is where
    it is measured; 10 MB of EMPTY_DICT would otherwise be ten million dicts, about 700 MB."""

    __slots__ = ("data", "pos", "blocks")

    def __init__(self, data, start: int = 0, end: int | None = None) -> None:
        self.data = bytes(memoryview(data)[start:end])
        self.pos = 0
        self.blocks = sys.getallocatedblocks()

    def peek(self, n: int = 1) -> bytes:
        if sys.getallocatedblocks() - self.blocks > max(MIN_BLOCKS, int(self.pos * MAX_BLOCKS_PER_BYTE)):
            raise _Over(f"more than {MAX_BLOCKS_PER_BYTE} objects per byte read")
        return self.data[self.pos : self.pos + max(n, 1)]

    def read(self, n: int = -1) -> bytes:
        end = len(self.data) if n is None or n < 0 else self.pos + n
        chunk = self.data[self.pos : end]
        self.pos += len(chunk)
        return chunk

    def readinto(self, buffer) -> int:
        chunk = self.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)

    def readline(self) -> bytes:
        newline = self.data.find(b"\n", self.pos)
        return self.read(-1 if newline < 0 else newline + 1 - self.pos)

    def tell(self) -> int:
        return self.pos


def _cpython_applies(result: PickleScan, lexed: _Names, max_bytes: int | None) -> bool:
    """CPython's walk runs on a pickle the lean walk read to its STOP, with every memo index in range and no EXT."""
    if result.error is not None or result.memo_error is not None or lexed.ext_codes or lexed.events is None:
        return False
    return max_bytes is None or result.end - result.start <= max_bytes


def _as_asked(asked: list[tuple[str, str]], events: list[GlobalRef | None]) -> _Names | None:
    """The scan's list from what CPython asked find_class for: one call per naming opcode, the GLOBAL and INST
    ones for the names the lean walk read; None otherwise (never expected: our own walk decides then)."""
    if len(asked) != len(events):
        return None
    names = _Names()
    for (module, name), lexed_ref in zip(asked, events, strict=True):
        if lexed_ref is None:
            names.add(_ref(module, name, "STACK_GLOBAL"))
        elif normalize(module, name) != (lexed_ref.module, lexed_ref.name):
            return None
        else:
            names.add(lexed_ref)
    return names


class _Prefetched(io.BytesIO):
    """A BytesIO (sharing bytes it is given whole) with `peek`, through which CPython's C unpickler prefetches
    128 KiB at a time: without it the unpickler calls `read` once per opcode (a 50,000-tensor pickle: 3x the
    time)."""

    def peek(self, n: int = 1) -> bytes:
        at = self.tell()
        return self.getvalue()[at : at + max(n, 1)]  # getvalue shares; a buffer export would unshare


def prefetched(data) -> io.BytesIO:
    """Bytes in memory as a file CPython's C unpickler prefetches from (_Prefetched)."""
    return _Prefetched(data)


def _cpython_walk(data, result: PickleScan, lexed: _Names, unpickler: Callable[[Any], Any] = _Recorder,
                  max_bytes: int | None = MAX_CPYTHON_BYTES) -> tuple[_Names, Any] | None:  # fmt: skip
    """The globals of a pickle the lean walk read (`lexed`), as CPython's unpickler reaches them, and what
    `unpickler` (whose find_class appends each (module, name) it is asked for to `asked`) built; None where
    this walk does not apply (our stack walk does it then). The scan's own walk (`max_bytes` set) reads through
    a BoundedInput: memory proportional to what it read; a decoder (scan_decoding) builds the listing."""
    if not _cpython_applies(result, lexed, max_bytes):
        return None
    size = result.end - result.start
    if max_bytes is not None:
        file: Any = BoundedInput(data, result.start, result.end)
    elif type(data) is bytes and size == len(data):
        file = prefetched(data)  # shares the bytes: a view would be copied whole (a 404 MB DCP .metadata, twice)
    else:
        file = prefetched(memoryview(data)[result.start : result.end])
    recorder = unpickler(file)
    try:
        value = recorder.load()
    except Exception:  # noqa: BLE001 - stopped before STOP, declined, or outgrew its bytes: our own walk decides
        return None
    if file.tell() != size:
        return None  # another STOP: never expected, our own walk decides then
    names = _as_asked(recorder.asked, lexed.events)  # type: ignore[arg-type]
    return None if names is None else (names, value)


# ----------------------------------------------------------------------------------------------
# Entry points


class PickleScan(Record):
    """What one pickle names, where it ends, and why it could not be walked to its STOP (if so)."""

    __hash__ = None  # type: ignore[assignment]  # filled in by the walk

    globals: list[GlobalRef] = field(default_factory=list, init=False)
    start: int = 0
    end: int = field(default=0, init=False)  # offset just past STOP (or where the walk gave up)
    error: str | None = field(default=None, init=False)
    protocol: int = field(default=0, init=False)
    stack_globals: int = field(default=0, init=False)  # STACK_GLOBAL opcodes resolved through the stack
    truncated: bool = field(default=False, init=False)  # the data ended inside the pickle: more might complete it
    needed: int = field(default=0, init=False)  # when truncated: the data must reach at least this offset
    memo_error: str | None = field(default=None, init=False)  # a memo index no pickler writes: walked on, not decoded
    # every opcode up to `end` is one torch's weights_only unpickler implements (TORCH_UNPICKLER_OPCODES)
    torch_opcodes: bool = field(default=True, init=False)

    @property
    def unsafe(self) -> list[GlobalRef]:
        return [g for g in self.globals if g.kind == "unsafe"]


def _ref(module: str, name: str, opcode: str) -> GlobalRef:
    """A GlobalRef under the name Python 3 would import (protocol 2 writes __builtin__ for builtins)."""
    module, name = normalize(module, name)
    return GlobalRef(module, name, classify_global(module, name), opcode)


def _scan_one(w: _Window, i: int, reopen, data=None) -> tuple[PickleScan, int]:
    """One pickle from window position i; `reopen(offset)` gives a fresh window there for the stack walk,
    `data` is the whole stream when it is held in memory (CPython's own unpickler can then walk it)."""
    result = PickleScan(start=w.base + i)
    names = _Names()
    try:
        after = _lean_walk(w, i, result, names)
        if result.stack_globals:  # a pickle cut short still ran what came before the cut
            walked = _cpython_walk(data, result, names) if data is not None else None
            resolved = walked[0] if walked is not None else None
            if resolved is None:
                resolved = _Names()  # the stack walk lists every global again, in the order CPython meets them
                again, j = reopen(result.start)
                _stack_walk(again, j, result, resolved)
            names = resolved
    except Exception as exc:  # noqa: BLE001 - a scanner of hostile bytes must never raise
        result.error = result.error or f"unreadable pickle ({type(exc).__name__}: {exc})"
        after = len(w.buf)
    if result.memo_error and result.error is None:
        result.error = result.memo_error
    result.globals = names.refs
    return result, after


def _whole(data, start: int):
    def reopen(offset: int) -> tuple[_Window, int]:
        return _Window(None, data, 0, True), offset

    return _Window(None, data, 0, True), reopen


def scan_pickle(data, start: int = 0) -> PickleScan:
    """Walk one pickle held in memory, starting at `start`. Never raises: problems land in `.error`."""
    w, reopen = _whole(data, start)
    return _scan_one(w, start, reopen, data)[0]


NOT_DECODED = object()  # what scan_decoding gives when its unpickler did not build the pickle's value


def scan_decoding(data, unpickler: Callable[[Any], Any], start: int = 0) -> tuple[PickleScan, Any]:
    """One pickle held in memory, judged and decoded in one pass of CPython's C unpickler: (its scan, the
    value `unpickler` built, or NOT_DECODED). `unpickler(file)` must append every (module, name) its
    find_class is asked for to `self.asked` before it answers, and refuse (raise) whatever it does not
    accept; nothing it is handed is imported or called by the scan.

    The lean walk runs first and alone decides whether the unpickler may run at all: every memo index
    within the pickle's bound and every declared length within its bytes (what makes the C unpickler
    allocate), no EXT (resolved through copyreg's process-wide cache, not always through find_class).
    The unpickler's answer is taken only when it stops at the lean walk's STOP having asked once per
    GLOBAL, INST and STACK_GLOBAL opcode, the GLOBAL and INST ones for the names the walk read: then it
    executed every naming opcode and `asked` is the scan's list, as CPython reaches it. Otherwise (declined,
    refused, stopped early) the pickle is scanned the general way and nothing is decoded."""
    w, _reopen = _whole(data, start)
    result = PickleScan(start=start)
    lexed = _Names()
    try:
        _lean_walk(w, start, result, lexed)
        walked = _cpython_walk(data, result, lexed, unpickler, max_bytes=None)
    except Exception:  # noqa: BLE001 - a scanner of hostile bytes must never raise: the general way reports
        walked = None
    if walked is None:
        return scan_pickle(data, start), NOT_DECODED
    result.globals = walked[0].refs
    return result, walked[1]


# The compiled pass (ckinspect/_native/pickle_walk.c) decodes the opcodes torch.save writes, protocols 2 to 5, as
# CPython's C unpickler does, and declines everything else (the pure path then decides). Per opcode byte, from
# pickletools' table: 0 not done there, 1 done and one torch's weights_only unpickler implements, 2 done and not.
NATIVE_OPCODES = frozenset(
    (
        "PROTO", "FRAME", "STOP", "MARK", "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "NONE", "NEWTRUE", "NEWFALSE",
        "BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8",
        "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BINPUT", "LONG_BINPUT", "MEMOIZE", "BINGET", "LONG_BINGET",
        "GLOBAL", "STACK_GLOBAL", "BINPERSID", "REDUCE", "BUILD", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
        "SETITEM", "SETITEMS", "APPEND", "APPENDS",
    )
)  # fmt: skip
NATIVE_CODES = bytes(
    next((1 if op.name in TORCH_UNPICKLER_OPCODES else 2 for op in pickletools.opcodes
          if ord(op.code) == code and op.name in NATIVE_OPCODES), 0)
    for code in range(256)
)  # fmt: skip
NATIVE_MIN_OBJECTS = MIN_BLOCKS  # objects the compiled pass builds whatever it read; beyond, at most one per 3 bytes


def native_decoding(data, find_class: Callable[[str, str], Any], persistent_load: Callable[[Any], Any],
                    fast: tuple | None = None, start: int = 0) -> tuple[PickleScan, Any] | None:  # fmt: skip
    """One pickle held in memory judged and decoded by the compiled pass, as scan_decoding would with the same
    find_class and persistent_load: (its scan, the value), or None where that pass is not built (CKINSPECT_PURE)
    or declines (the pickle holds what it does not do exactly as CPython: the caller takes scan_decoding, with
    fresh state, since find_class and persistent_load may have been called). `fast`: the tensor rebuild the pass
    builds itself (unpickler.NATIVE_FAST)."""
    native = load_native("pickle_walk")
    if native is None:
        return None
    got = native.decode(data, start, find_class, persistent_load, NATIVE_CODES, MAX_EVENTS, MAX_LINE,
                        NATIVE_MIN_OBJECTS, fast)  # fmt: skip
    if got is None:
        return None
    value, asked, end, protocol, torch_opcodes, stack_globals = got
    result = PickleScan(start=start)
    result.end, result.protocol, result.stack_globals = end, protocol, stack_globals
    result.torch_opcodes = bool(torch_opcodes)
    names = _Names()
    for module, name, stacked in asked:  # what CPython's walk gives: each global as find_class was asked for it
        names.add(_ref(module, name, "STACK_GLOBAL" if stacked else "GLOBAL"))
    result.globals = names.refs
    return result, value


def scan_stream(data, start: int = 0, limit: int | None = None) -> list[PickleScan]:
    """Scan consecutive pickles held in memory from `start` until the data ends, a pickle fails, or `limit`."""
    w, reopen = _whole(data, start)
    return _scan_consecutive(w, start, reopen, limit, data=data)


def scan_source(open_at, size: int, start: int = 0, limit: int | None = None) -> list[PickleScan]:
    """Scan consecutive pickles from a stream too big to hold: `open_at(offset)` returns a source (read,
    skip) positioned at that offset; `size` is where the stream ends. Memory stays within a window."""

    def reopen(offset: int) -> tuple[_Window, int]:
        return _Window(open_at(offset), b"", offset), 0

    w, i = reopen(start)
    scans = _scan_consecutive(w, i, reopen, limit, size)
    return scans


def _scan_consecutive(w: _Window, i: int, reopen, limit: int | None, size: int | None = None,
                      data=None) -> list[PickleScan]:  # fmt: skip
    scans: list[PickleScan] = []
    total = len(w.buf) if size is None else size
    while limit is None or len(scans) < limit:
        if w.base + i >= total:
            break
        if i >= len(w.buf) and not w.eof:
            i = w.more(i, 16)
            if i >= len(w.buf):
                break
        scan, i = _scan_one(w, i, reopen, data)
        scans.append(scan)
        if scan.error is not None or scan.end <= scan.start:
            break
    return scans


def scan_file(reader, start: int, end: int, limit: int | None = None) -> list[PickleScan]:
    """Consecutive pickles in bytes [start, end) of a file (a FileReader), a window at a time."""
    return scan_source(lambda offset: FileSource(reader, offset, end), end, start, limit)


def scan_member(reader, start: int, compressed: int, declared: int, method: int) -> list[PickleScan]:
    """The pickle(s) of a zip member (stored or deflated), a window at a time; a deflated member is
    inflated only up to its declared size."""
    if method == 0:
        return scan_file(reader, start, start + compressed)

    def open_at(offset: int):
        source = InflateSource(reader, start, compressed, declared)
        source.skip(offset)
        return source

    return scan_source(open_at, declared)


def scan_globals(data) -> list[GlobalRef]:
    """Every global named by the pickle(s) in `data`, first appearance first, each once. Never raises."""
    seen: set[tuple[str, str]] = set()
    out = []
    for scan in scan_stream(data) or [scan_pickle(data)]:
        for g in scan.globals:
            if (g.module, g.name) not in seen:
                seen.add((g.module, g.name))
                out.append(g)
    return out
