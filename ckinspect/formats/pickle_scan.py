"""Static pickle scan: every global a pickle names, found without running or importing anything.

A pickle is a program for a small stack machine; the only way it reaches code outside the data
is through globals (GLOBAL, INST, STACK_GLOBAL, EXT*), so listing those lists everything loading
it could call. The walk below reads opcodes and their arguments and never builds objects.

Two passes, because checkpoints are big: a lean pass that only skips over arguments (fast enough
for a 50,000-tensor data.pkl) and, only when the pickle uses STACK_GLOBAL (protocol 4+, where the
names come off the stack), a second pass that tracks the stack and the memo to resolve them.
The lean pass also rejects memo indices no real pickler writes: CPython's C unpickler sizes its
memo to the largest index it sees, so a 20-byte pickle could otherwise make it allocate gigabytes.
"""

from __future__ import annotations

import _compat_pickle
import pickletools
import re
import struct

from ckinspect.record import Record, field

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
                g.kind = "torchscript"


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


def classify_global(module: str, name: str) -> str:
    """ "allowed" if torch.load(weights_only=True) accepts it by default, "benign" if it only builds
    data, "unsafe" otherwise (including every name known to run code)."""
    module, name = normalize(module, name)
    qualname = f"{module}.{name}"
    if qualname in ALLOWED:
        return "allowed"
    if qualname in BENIGN:
        return "benign"
    if module in _BENIGN_MODULES and "." not in name and not name.startswith("__"):
        return "benign"
    return "unsafe"


# ----------------------------------------------------------------------------------------------
# The walk

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


class PickleScan(Record):
    """What one pickle names, where it ends, and why it could not be walked to its STOP (if so)."""

    __hash__ = None  # type: ignore[assignment]  # filled in by the walk

    globals: list[GlobalRef] = field(default_factory=list, init=False)
    start: int = 0
    end: int = field(default=0, init=False)  # offset just past STOP (or where the walk gave up)
    error: str | None = field(default=None, init=False)
    protocol: int = field(default=0, init=False)
    stack_globals: int = field(default=0, init=False)  # how many STACK_GLOBAL opcodes were resolved through the stack
    truncated: bool = field(default=False, init=False)  # the data ended inside the pickle: more bytes might complete it
    needed: int = field(
        default=0, init=False
    )  # when truncated: the data must reach at least this offset to get further

    @property
    def unsafe(self) -> list[GlobalRef]:
        return [g for g in self.globals if g.kind == "unsafe"]


def _ref(module: str, name: str, opcode: str) -> GlobalRef:
    """A GlobalRef under the name Python 3 would import (protocol 2 writes __builtin__ for builtins)."""
    module, name = normalize(module, name)
    return GlobalRef(module, name, classify_global(module, name), opcode)


def scan_pickle(data, start: int = 0) -> PickleScan:
    """Walk one pickle starting at `start`. Never raises: problems land in `.error`."""
    result = PickleScan(start=start)
    try:
        _lean_walk(data, start, result)
        if result.stack_globals and result.error is None:
            _stack_walk(data, start, result)
    except Exception as exc:  # noqa: BLE001 - a scanner of hostile bytes must never raise
        result.error = result.error or f"unreadable pickle ({type(exc).__name__}: {exc})"
    seen: set[tuple[str, str]] = set()
    unique = []
    for g in result.globals:
        if (g.module, g.name) not in seen:
            seen.add((g.module, g.name))
            unique.append(g)
    result.globals = unique
    return result


def scan_stream(data, start: int = 0, limit: int | None = None) -> list[PickleScan]:
    """Scan consecutive pickles from `start` until the data ends, a pickle fails, or `limit` pickles."""
    scans: list[PickleScan] = []
    pos = start
    n = len(data)
    while pos < n and (limit is None or len(scans) < limit):
        scan = scan_pickle(data, pos)
        scans.append(scan)
        if scan.error is not None or scan.end <= pos:
            break
        pos = scan.end
    return scans


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


def _decode_line(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


# Runs of opcodes with fixed-size arguments are skipped by one regex match (in C); the Python loop
# below only sees opcodes whose length depends on their argument (strings, GLOBAL lines ...).
_FIXED_NOARG = bytes(c for c in range(256) if _TABLE[c] == 0)
_FIXED = {k: bytes(c for c in range(256) if _TABLE[c] == k) for k in (1, 2, 4, 8)}
_RUN_CACHE: dict[int, re.Pattern[bytes]] = {}


def _run_pattern(memo_limit: int) -> re.Pattern[bytes]:
    """A regex for a run of fixed-size opcodes, LONG_BINPUT included while its index stays below
    about 2 * memo_limit (larger indices end the run, and the loop refuses them)."""
    top = max(memo_limit.bit_length(), 17)
    pattern = _RUN_CACHE.get(top)
    if pattern is None:
        alts = []
        if _FIXED_NOARG:
            alts.append(b"[" + re.escape(_FIXED_NOARG) + b"]")
        for k, codes in _FIXED.items():
            if codes:
                alts.append(b"[" + re.escape(codes) + b"]" + b"." * k)
        # LONG_BINPUT: 4 little-endian bytes, value < 2**top
        full, rest = divmod(top, 8)
        body = b"." * full + (b"[\\x00-" + re.escape(bytes([(1 << rest) - 1])) + b"]" if rest else b"")
        body += b"\\x00" * (4 - full - (1 if rest else 0))
        alts.append(b"r" + body)
        pattern = re.compile(b"(?:" + b"|".join(alts) + b")+", re.DOTALL)
        _RUN_CACHE[top] = pattern
    return pattern


def _lean_walk(data, start: int, result: PickleScan) -> None:
    table = _TABLE
    n = len(data)
    i = start
    memo_limit = max(n, 1 << 16)  # a pickler numbers memo slots 0, 1, 2 ...: never beyond the size of the pickle
    run = _run_pattern(memo_limit).match
    find = data.find
    while True:
        m = run(data, i)
        if m is not None:
            i = m.end()
        if i >= n:
            result.end = n
            result.error = f"pickle ends without STOP at byte {n} (truncated)"
            result.truncated = True
            result.needed = n + 1
            return
        op = data[i]
        k = table[op]
        if k >= 0:
            i += 1 + k
        elif k == _LEN4:
            if i + 5 > n:
                break
            i += 5 + _U32.unpack_from(data, i + 1)[0]
        elif k == _LEN1:
            if i + 2 > n:
                break
            i += 2 + data[i + 1]
        elif k == _LONG_BINPUT:
            if i + 5 > n:
                break
            if _U32.unpack_from(data, i + 1)[0] > 2 * memo_limit:
                result.end = i
                result.error = f"memo index {_U32.unpack_from(data, i + 1)[0]} at byte {i} is out of range"
                return
            i += 5
        elif k == _LINE2:
            a = find(b"\n", i + 1)
            b = find(b"\n", a + 1) if a >= 0 else -1
            if b < 0:
                break
            module, name = _decode_line(data[i + 1 : a]), _decode_line(data[a + 1 : b])
            result.globals.append(_ref(module, name, "GLOBAL" if op == 0x63 else "INST"))
            i = b + 1
        elif k in (_LINE, _PUT):
            a = find(b"\n", i + 1)
            if a < 0:
                break
            if k == _PUT:
                text = bytes(data[i + 1 : a])
                if len(text) > 12 or not text.strip().isdigit() or int(text) > memo_limit:
                    result.end = i
                    result.error = f"memo index {text[:20]!r} at byte {i} is out of range"
                    return
            i = a + 1
        elif k == _LEN8:
            if i + 9 > n:
                break
            i += 9 + _U64.unpack_from(data, i + 1)[0]
        elif k == _STOP:
            result.end = i + 1
            return
        elif k == _STACK_GLOBAL:
            result.stack_globals += 1
            i += 1
        elif k == _PROTO:
            if i + 2 > n:
                break
            result.protocol = data[i + 1]
            if result.protocol > 5:
                result.end = i
                result.error = f"unsupported pickle protocol {result.protocol} at byte {i}"
                return
            i += 2
        elif k == _EXT:
            size = _EXT_SIZES[op]
            code = int.from_bytes(data[i + 1 : i + 1 + size], "little")
            result.globals.append(GlobalRef("copyreg", f"<extension code {code}>", "unsafe", "EXT"))
            i += 1 + size
        else:
            result.end = i
            result.error = f"unknown opcode 0x{op:02x} at byte {i}: not a pickle, or corrupt"
            return
        if i > n:
            break
    result.end = n
    result.error = f"pickle truncated at byte {n}: an argument runs past the end"
    result.truncated = True
    result.needed = max(i, n + 1)  # i is where the argument would end, when its length was readable


# Stack effect per opcode for the second pass: (pops to the last MARK first?, then pops, pushes)
_EFFECT: list[tuple[bool, int, int]] = [(False, 0, 0)] * 256
for _op in pickletools.opcodes:
    _before, _after = _op.stack_before, _op.stack_after
    _to_mark = pickletools.markobject in _before
    _pops = _before.index(pickletools.markobject) if _to_mark else len(_before)
    _EFFECT[ord(_op.code)] = (_to_mark, _pops, len(_after))
_STRING_PUSH = {0x8C: 1, 0x58: 4, 0x8D: 8}  # SHORT_BINUNICODE, BINUNICODE, BINUNICODE8: length bytes
_MEMO_PUT = {0x71: 1, 0x72: 4}  # BINPUT, LONG_BINPUT
_MEMO_GET = {0x68: 1, 0x6A: 4}  # BINGET, LONG_BINGET
_OP_MARK, _OP_DUP, _OP_MEMOIZE, _OP_UNICODE, _OP_PUT, _OP_GET = 0x28, 0x32, 0x94, 0x56, 0x70, 0x67


def _stack_walk(data, start: int, result: PickleScan) -> None:
    """Resolve STACK_GLOBAL names through a simulated stack and memo (strings only; all else None).

    Runs only after the lean walk accepted the pickle up to its STOP, so arguments are in bounds.
    """
    stack: list = []
    marks: list[int] = []
    memo: dict[int, object] = {}
    resolved: list[GlobalRef] = []
    table, effect = _TABLE, _EFFECT
    i, end = start, result.end
    find = data.find
    while i < end:
        op = data[i]
        k = table[op]
        if op in _STRING_PUSH:
            width = _STRING_PUSH[op]
            length = int.from_bytes(data[i + 1 : i + 1 + width], "little")
            begin = i + 1 + width
            stack.append(bytes(data[begin : begin + length]).decode("utf-8", "surrogatepass"))
            i = begin + length
            continue
        if op == _OP_MEMOIZE:
            memo[len(memo)] = stack[-1] if stack else None
            i += 1
            continue
        if op in _MEMO_PUT:
            width = _MEMO_PUT[op]
            memo[int.from_bytes(data[i + 1 : i + 1 + width], "little")] = stack[-1] if stack else None
            i += 1 + width
            continue
        if op in _MEMO_GET:
            width = _MEMO_GET[op]
            stack.append(memo.get(int.from_bytes(data[i + 1 : i + 1 + width], "little")))
            i += 1 + width
            continue
        if k == _STACK_GLOBAL:
            name = stack.pop() if stack else None
            module = stack.pop() if stack else None
            if isinstance(module, str) and isinstance(name, str):
                resolved.append(_ref(module, name, "STACK_GLOBAL"))
            else:
                resolved.append(GlobalRef("<unresolved>", "STACK_GLOBAL", "unsafe", "STACK_GLOBAL"))
            stack.append(None)
            i += 1
            continue
        if op == _OP_MARK:
            marks.append(len(stack))
            i += 1
            continue
        if op == _OP_DUP:
            stack.append(stack[-1] if stack else None)
            i += 1
            continue
        # advance past the argument
        if k >= 0:
            nxt = i + 1 + k
        elif k == _LEN1:
            nxt = i + 2 + data[i + 1]
        elif k in (_LEN4, _LONG_BINPUT):
            nxt = i + 5 + (_U32.unpack_from(data, i + 1)[0] if k == _LEN4 else 0)
        elif k == _LEN8:
            nxt = i + 9 + _U64.unpack_from(data, i + 1)[0]
        elif k in (_LINE, _PUT):
            nxt = find(b"\n", i + 1) + 1
            if op in (_OP_UNICODE, _OP_PUT, _OP_GET):
                text = bytes(data[i + 1 : nxt - 1])
                if op == _OP_UNICODE:
                    stack.append(text.decode("raw-unicode-escape"))
                elif op == _OP_PUT:
                    memo[int(text)] = stack[-1] if stack else None
                else:
                    stack.append(memo.get(int(text)))
                i = nxt
                continue
        elif k == _LINE2:
            nxt = find(b"\n", find(b"\n", i + 1) + 1) + 1
        elif k == _PROTO:
            nxt = i + 2
        elif k == _EXT:
            nxt = i + 1 + _EXT_SIZES[op]
        elif k == _STOP:
            break
        else:
            break
        to_mark, pops, pushes = effect[op]
        if to_mark:
            del stack[marks.pop() if marks else 0 :]
        if pops:
            del stack[max(len(stack) - pops, 0) :]
        if pushes:
            stack.append(None)
        i = nxt
    result.globals.extend(resolved)
