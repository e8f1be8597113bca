"""joblib pickles: NumPy arrays written as raw blocks inside the pickle stream, read as joblib reads them.

joblib.dump pickles a `joblib.numpy_pickle.NumpyArrayWrapper` (shape, order, dtype, and since joblib 1.2
`numpy_array_alignment_bytes`), and right after that object's BUILD writes the array's bytes straight
into the file: a padding-length byte and padding when aligned, then `prod(shape) * itemsize` bytes (an
object array instead writes a nested pickle). A plain opcode scan runs into those bytes and stops.

This walk follows the stream the way joblib's NumpyUnpickler does, with Python's own pure-Python
unpickler whose `find_class` never imports anything: every global becomes an inert record, so the
walk learns each wrapper's shape and dtype without running a line of the file. It returns every
global the stream names (each judged like any pickle global) and where each raw block lies.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

from ckinspect.dtypes import NUMPY_CODES
from ckinspect.formats.pickle_scan import GlobalRef, classify_global, normalize
from ckinspect.formats.unpickler import Opaque, _opaque_class
from ckinspect.record import Record, field
from ckinspect.vocab import CkinspectError

WRAPPERS = ("joblib.numpy_pickle.NumpyArrayWrapper",)
MAX_ARRAYS = 1 << 20  # more raw blocks than this is no model a joblib file holds


class JoblibError(CkinspectError, ValueError):
    """The stream does not read as joblib writes it."""


class RawBlock(Record):
    """One array's raw bytes inside the stream: [offset, offset + nbytes)."""

    offset: int
    nbytes: int
    dtype: str  # numpy's code ("<f8", "|O", "<U5"): not every one is a tensor dtype
    shape: tuple[int, ...]
    fortran: bool

    @property
    def tensor_dtype(self) -> str | None:
        """Our dtype name for plain little-endian arrays, None for others (objects, strings, big-endian)."""
        code = self.dtype
        if code[:1] in "<|=":
            code = code[1:]
        elif code[:1] == ">":
            return None if code[1:] not in ("i1", "u1", "b1") else NUMPY_CODES.get(code[1:])
        return NUMPY_CODES.get(code)


class JoblibStream(Record):
    """Every global a joblib stream names, its raw array blocks, and where its pickle ended."""

    __hash__ = None  # type: ignore[assignment]  # filled in by the walk

    globals: list[GlobalRef] = field(default_factory=list)
    blocks: list[RawBlock] = field(default_factory=list)
    end: int = 0


def _byte_order_and_size(state: Any) -> tuple[str, int]:
    """A numpy.dtype's __setstate__ tuple: (its byte order, "|" if none; its element size, -1 if none)."""
    if not isinstance(state, tuple):
        return "|", -1
    order = state[1] if len(state) > 1 and isinstance(state[1], str) else "|"
    elsize = state[5] if len(state) > 5 and type(state[5]) is int else -1
    return order, elsize


def _itemsize(dtype: Any) -> tuple[str, int]:
    """(numpy dtype code with byte order, item size) of a numpy.dtype record; JoblibError if unknown."""
    args = getattr(dtype, "args", ())
    state = getattr(dtype, "state", None)
    if not isinstance(dtype, Opaque) or not args or not isinstance(args[0], str):
        raise JoblibError("array wrapper without a numpy dtype")
    code = args[0]
    order, elsize = _byte_order_and_size(state)
    kind, digits = code[:1], code[1:]
    if kind == "O":
        return "|O", 0
    if kind in "fiucbMm" and digits.isdigit():
        return order + code, int(digits)
    if kind in "USV" and elsize > 0:  # flexible types carry their size in the state
        return order + kind + str(elsize // 4 if kind == "U" else elsize), elsize
    raise JoblibError(f"numpy dtype {code!r:.20} of unknown size")


class _Walker(pickle._Unpickler):  # the pure-Python one: BUILD can be hooked
    dispatch = dict(pickle._Unpickler.dispatch)
    stack: list[Any]  # the pure-Python unpickler's value stack (typeshed leaves it out)

    def __init__(self, handle: io.BytesIO, out: JoblibStream, seen: set[tuple[str, str]]) -> None:
        super().__init__(handle, fix_imports=True, encoding="latin1")
        self.handle = handle
        self.out = out
        self.seen = seen

    def find_class(self, module: str, name: str) -> Any:
        module, name = normalize(module, name)
        if (module, name) not in self.seen:
            self.seen.add((module, name))
            self.out.globals.append(GlobalRef(module, name, classify_global(module, name), "GLOBAL"))
        return _opaque_class(f"{module}.{name}")  # an inert record: nothing is imported or called

    def persistent_load(self, pid: Any) -> Any:
        return _opaque_class("persistent_id")(pid)

    def load_build(self) -> None:
        pickle._Unpickler.load_build(self)  # type: ignore[attr-defined]
        wrapper = self.stack[-1]
        if isinstance(wrapper, Opaque) and wrapper.qualname in WRAPPERS:
            self._read_array(wrapper.fields)

    dispatch[pickle.BUILD[0]] = load_build  # type: ignore[assignment]  # typeshed types dispatch over Unpickler

    def _read_array(self, fields: dict[str, Any]) -> None:
        if len(self.out.blocks) >= MAX_ARRAYS:
            raise JoblibError(f"more than {MAX_ARRAYS} arrays")
        shape = fields.get("shape")
        if not isinstance(shape, tuple) or not all(type(n) is int and n >= 0 for n in shape):
            raise JoblibError(f"array wrapper with shape {shape!r:.40}")
        code, itemsize = _itemsize(fields.get("dtype"))
        count = 1
        for n in shape:
            count *= n
        if code == "|O":  # object arrays: a nested pickle follows
            start = self.handle.tell()
            _walk_one(self.handle, self.out, self.seen)
            self.out.blocks.append(RawBlock(start, self.handle.tell() - start, code, shape, fields.get("order") == "F"))
            return
        if fields.get("numpy_array_alignment_bytes") is not None:
            self._skip_padding()
        start = self.handle.tell()
        nbytes = count * itemsize
        if start + nbytes > len(self.handle.getbuffer()):
            raise JoblibError(f"an array of {nbytes} bytes at byte {start} runs past the end of the file")
        self.handle.seek(nbytes, io.SEEK_CUR)
        self.out.blocks.append(RawBlock(start, nbytes, code, shape, fields.get("order") == "F"))

    def _skip_padding(self) -> None:
        """joblib aligns an array's bytes: one byte says how many padding bytes follow it."""
        padding = self.handle.read(1)
        if len(padding) != 1:
            raise JoblibError("stream ends before an array's padding")
        self.handle.seek(padding[0], io.SEEK_CUR)


def _walk_one(handle: io.BytesIO, out: JoblibStream, seen: set[tuple[str, str]]) -> None:
    try:
        _Walker(handle, out, seen).load()
    except JoblibError:
        raise
    except RecursionError:
        raise JoblibError("the pickle nests too deeply") from None
    except Exception as exc:  # noqa: BLE001 - whatever odd bytes provoke, it is "not joblib's stream"
        raise JoblibError(f"{type(exc).__name__}: {exc}"[:200]) from None


def walk_joblib(data: bytes) -> JoblibStream:
    """Every global and raw array block of a joblib pickle. Raises JoblibError where joblib would fail."""
    out = JoblibStream()
    handle = io.BytesIO(data)
    _walk_one(handle, out, set())
    out.end = handle.tell()
    return out


def names_joblib(data: Any, stopped_at: int) -> bool:
    """Does a pickle whose scan stopped early at `stopped_at` name joblib's array wrapper before that
    point (so the rest is worth walking)? Its name may come off the stack, so the bytes are searched."""
    return data.find(b"NumpyArrayWrapper", 0, stopped_at) >= 0
