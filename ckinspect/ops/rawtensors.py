"""Tensors as raw bytes, without torch: what convert and salvage need to write a safetensors file.

`map_tree` walks a reader's tree (TensorInfo in place of tensors) and builds a copy with whatever the
caller makes of each tensor: torch tensors (ops.torchio, for torch files) or `RawTensor`s (here, for
safetensors). A RawTensor is where its storage's bytes are (a `StorageSource`) plus the view; when the
file is written its bytes stream from there in bounded chunks, made contiguous and cast with numpy the
way torch would (round to nearest even), so the file written is byte for byte what the torch route
writes and memory does not grow with the tensors' size.
"""

from __future__ import annotations

import collections
import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckinspect.dtypes import dtype_info
from ckinspect.formats.tree import MAX_TREE_DEPTH
from ckinspect.io.blobs import Blobs, read_chunks
from ckinspect.io.safetensors_write import Entry, write_safetensors
from ckinspect.io.values import inflated_pieces, raw_blocks, raw_numpy_dtype, swap_unit
from ckinspect.model import CompositeTensor, StorageInfo, TensorInfo, contiguous_strides

# the pieces a written file streams in: 1 MiB keeps convert and salvage to .pth under 256 MB beside
# torch's own ~225 MB (8 MiB pieces cost 16 MiB more, two buffers alive across a storage boundary),
# and a pwrite of 1 MiB is still far from the syscall-bound regime
CHUNK = 1 << 20
SCALARS = (str, int, float, bool, bytes, type(None), complex)
MISSING = object()  # a tensor whose bytes are not available
SKIP = object()  # a tensor or value left out on purpose

# dtypes numpy can cast between exactly as torch does (bf16 by hand); other floats need torch to cast
CASTABLE = ("float64", "float32", "float16", "bfloat16")


@dataclass
class Built:
    tree: Any
    tensors: list[tuple[str, Any]] = field(default_factory=list)
    missing: list[tuple[str, TensorInfo]] = field(default_factory=list)
    dropped: list[tuple[str, str]] = field(default_factory=list)
    # torch route: placeholder storage (its _cdata) -> what fills it when the file is written (ops.torchio)
    fills: dict[int, Any] = field(default_factory=dict)
    composites: list[tuple[str, CompositeTensor]] = field(default_factory=list)  # written as their parts


def map_tree(
    tree: Any,
    make_tensor: Callable[[str, TensorInfo], Any],
    keep: Callable[[str, TensorInfo], bool] | None = None,
    is_plain: Callable[[Any], bool] | None = None,
) -> Built:
    """Copy the reader's tree with make_tensor(name, info) in place of each TensorInfo.

    make_tensor returns MISSING when the bytes are unavailable (dict entry dropped, list slot None);
    `keep(name, info)` filters tensors; `is_plain(obj)` admits further plain values (torch dtypes).
    Objects that are not plain data are left out and listed in `dropped`.

    Each container is copied once, by identity, as the reader lists it (formats.tree.flatten): a
    structure a pickle shares a billion times over through its memo stays shared in the copy, so
    the copy costs what the file does, and a self-referencing one cannot loop. Containers nested
    deeper than formats.tree.MAX_TREE_DEPTH are left out (the reader already said CORRUPT).
    """
    built = Built(None)
    copies: dict[int, Any] = {}

    def walk(obj: Any, path: str, depth: int) -> Any:
        if isinstance(obj, CompositeTensor):  # sparse, nested ...: its parts, under <path>.<part>
            if not obj.parts:
                built.dropped.append((path or "<root>", f"a {obj.layout} tensor ({obj.dtype}, shape "
                                                        f"{list(obj.shape)}) holds no data to write"))  # fmt: skip
                return SKIP
            built.composites.append((path, obj))
            obj = obj.parts
        if isinstance(obj, TensorInfo):
            path = path or "tensor"  # a bare torch.save(tensor): the readers' name for it
            if keep is not None and not keep(path, obj):
                return SKIP
            made = make_tensor(path, obj)
            if made is MISSING:
                built.missing.append((path, obj))
            else:
                built.tensors.append((path, made))
            return made
        if isinstance(obj, (dict, list, tuple)):
            done = copies.get(id(obj), MISSING)
            if done is not MISSING:
                return done
            if depth >= MAX_TREE_DEPTH:
                built.dropped.append((path or "<root>", f"nested deeper than {MAX_TREE_DEPTH} levels"))
                return SKIP
        if isinstance(obj, dict):
            ordered = isinstance(obj, collections.OrderedDict) or getattr(type(obj), "ordered", False)
            out: dict[Any, Any] = collections.OrderedDict() if ordered else {}
            copies[id(obj)] = out  # before the children: a dict that holds itself gets its own copy back
            for k, v in obj.items():
                child = walk(v, f"{path}.{k}" if path else str(k), depth + 1)
                if child is not MISSING and child is not SKIP:
                    out[k] = child
            metadata = (getattr(obj, "pickled_attributes", None) or {}).get("_metadata")
            if ordered and isinstance(metadata, dict):  # state_dict._metadata: module versions load_state_dict reads
                out._metadata = walk(metadata, "", depth + 1)  # type: ignore[attr-defined]
            return out
        if isinstance(obj, (list, tuple)):
            items: list[Any] = []
            if type(obj) is not tuple:
                copies[id(obj)] = items  # a list that holds itself gets its own copy back
            for i, v in enumerate(obj):
                child = walk(v, f"{path}.{i}" if path else str(i), depth + 1)
                items.append(None if child is MISSING or child is SKIP else child)
            copy = tuple(items) if type(obj) is tuple else items
            copies[id(obj)] = copy
            return copy
        if isinstance(obj, SCALARS) or (is_plain is not None and is_plain(obj)):
            return obj
        if type(obj).__name__ == "ArrayInfo":  # a numpy array the reader decoded (RNG states)
            array = numpy_array(obj)
            if array is not None:
                return array
            why = f"numpy array {obj.dtype}{list(obj.shape)} too large for the reader to keep"
            built.dropped.append((path or "<root>", why))
            return SKIP
        what = getattr(obj, "qualname", None) or f"{type(obj).__module__}.{type(obj).__qualname__}"
        built.dropped.append((path or "<root>", f"a {what} object (not plain data) cannot be carried over"))
        return SKIP

    with _recursion_room(MAX_TREE_DEPTH):
        result = walk(tree, "", 0)
    built.tree = {} if result is SKIP or result is MISSING else result
    return built


@contextlib.contextmanager
def _recursion_room(depth: int) -> Iterator[None]:
    """Room for a recursive walk `depth` containers deep (Python's default limit is about that)."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(before + 2 * depth)
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


def numpy_array(info: Any) -> Any:
    import numpy as np

    data = getattr(info, "data", None)
    if data is None:
        return None
    try:
        return np.frombuffer(bytearray(data), dtype=np.dtype(str(info.dtype))).reshape(info.shape)
    except (TypeError, ValueError):
        return None


class StorageSource:
    """Where one storage's bytes are, read in bounded pieces only when they are written: a byte range
    of a file (a StorageInfo with an offset: read CHUNK bytes at a time, so memory does not grow with
    the file), or bytes already in memory (a compressed zip member, inflated whole)."""

    __slots__ = ("storage", "data", "nbytes")

    def __init__(self, storage: StorageInfo | None = None, data: bytes | bytearray | memoryview | None = None):
        if storage is None and data is None:
            raise ValueError("a storage source needs a file range or bytes")
        if (storage is not None and data is None and storage.offset is None and storage.deflated is None
                and storage.extents is None):  # fmt: skip
            raise ValueError(f"storage {storage.key} has no raw byte offset")
        self.storage = storage
        self.data = data
        self.nbytes = len(data) if data is not None else storage.nbytes  # type: ignore[union-attr]

    def chunks(self, start: int = 0, length: int | None = None) -> Iterator[memoryview]:
        """The bytes [start, start+length) in pieces of at most CHUNK; each valid until the next is asked for."""
        if length is None:
            length = self.nbytes - start
        if self.data is not None:
            view = memoryview(self.data)
            for s in range(start, start + length, CHUNK):
                yield view[s : min(s + CHUNK, start + length)]
            return
        assert self.storage is not None
        unit = swap_unit(self.storage.dtype) if self.storage.big_endian else 1
        for piece in self._file_pieces(start, length, unit):
            yield piece if unit == 1 else _little_endian(piece, unit)

    def _file_pieces(self, start: int, length: int, unit: int) -> Iterator[memoryview]:
        """The storage's bytes as the file holds them, each piece whole `unit`-byte elements."""
        assert self.storage is not None
        if self.storage.extents is not None:  # a tensor in chunks (DCP, sharded): its bytes in C order
            yield from _window(_chunked_bytes(self.storage), start, length)
            return
        if self.storage.deflated is None:
            yield from read_chunks(self.storage, start, length, CHUNK)
            return
        with Blobs() as blobs:  # np.savez_compressed: inflated as it is written, never whole
            yield from _whole_units(inflated_pieces(blobs, self.storage, start, length, CHUNK), unit)

    def c_order_blocks(self, info: TensorInfo, elements: int) -> Iterator[Any]:
        """A view's raw elements in C order, as contiguous numpy blocks of at most `elements`."""
        if self.data is None:
            assert self.storage is not None
            with Blobs() as blobs:
                yield from raw_blocks(blobs, self.storage, info, elements, logical=True)
            return
        import numpy as np
        from numpy.lib.stride_tricks import as_strided

        item = info.itemsize
        flat = np.frombuffer(self.data, dtype=raw_numpy_dtype(info.dtype), count=len(self.data) // item)
        view = as_strided(flat[info.storage_offset :], info.shape, [s * item for s in info.stride], writeable=False)
        yield np.ascontiguousarray(view).reshape(-1)


def _chunked_bytes(storage: StorageInfo) -> Iterator[memoryview]:
    """A storage in chunks (model.Extents) as the bytes of its one contiguous tensor, in C order."""
    ext = storage.extents
    assert ext is not None  # noqa: S101 - the caller checked
    shape = ext.shape()
    whole = TensorInfo(storage.key, storage.dtype, shape, contiguous_strides(shape), storage.key)
    with Blobs() as blobs:
        for raw in raw_blocks(blobs, storage, whole, max(1, CHUNK // whole.itemsize), logical=True):
            yield raw.data.cast("B")


def _window(pieces: Iterator[memoryview], start: int, length: int) -> Iterator[memoryview]:
    """Bytes [start, start+length) of a stream of pieces."""
    at = 0
    for piece in pieces:
        lo, hi = max(start - at, 0), min(start + length - at, len(piece))
        at += len(piece)
        if lo < hi:
            yield piece[lo:hi]
        if at >= start + length:
            return


def _whole_units(pieces: Iterator[memoryview], unit: int) -> Iterator[memoryview]:
    """The same bytes in pieces that each hold whole `unit`-byte elements (an inflated stream breaks anywhere)."""
    carry = b""
    for piece in pieces:
        if unit == 1:
            yield piece
            continue
        joined = memoryview(carry + bytes(piece)) if carry else piece
        cut = len(joined) - len(joined) % unit
        carry = bytes(joined[cut:])
        if cut:
            yield joined[:cut]
    if carry:
        yield memoryview(carry)


def _little_endian(piece: memoryview, unit: int) -> memoryview:
    """Bytes of a big-endian storage (elements, or complex halves, of `unit` bytes) swapped as torch.load swaps them."""
    import numpy as np

    return np.frombuffer(piece, f">u{unit}").astype(f"<u{unit}").data.cast("B")


def as_source(data: StorageSource | bytes | bytearray | memoryview | None) -> StorageSource | None:
    return data if data is None or isinstance(data, StorageSource) else StorageSource(data=data)


class RawTensor:
    """A tensor as where its storage's raw bytes are (a big-endian one's swapped as read) plus its view;
    answers what convert asks of a torch tensor. Its bytes are read only when written, in bounded chunks."""

    __slots__ = ("info", "storage", "target")

    def __init__(self, info: TensorInfo, storage: StorageSource, target: str | None = None):
        self.info = info
        self.storage = storage  # shared by every view of the same storage key
        self.target = target  # the dtype its values are cast to when written, if any

    @property
    def dtype(self) -> str:
        return self.target or self.info.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.info.shape

    def dim(self) -> int:
        return len(self.info.shape)

    def is_floating_point(self) -> bool:
        return dtype_info(self.dtype).is_floating

    def fits(self) -> bool:
        """Whether the storage holds every byte the view reaches."""
        return self.info.byte_offset + self.info.span_bytes <= self.storage.nbytes

    def chunks(self) -> Iterator[memoryview]:
        """The elements in C order (cast, if asked), as bytes in pieces of at most about CHUNK."""
        info = self.info
        if info.nbytes == 0:
            return
        in_chunks = self.storage.storage is not None and self.storage.storage.extents is not None  # DCP, sharded
        if self.target is None and (info.bits % 8 or info.is_contiguous) and not in_chunks:  # packed: contiguous
            yield from self.storage.chunks(info.byte_offset, info.nbytes)
            return
        for raw in self.storage.c_order_blocks(info, max(1, CHUNK // info.itemsize)):
            if self.target is None:
                yield raw.data.cast("B")
            else:
                yield cast_array(raw.data.cast("B"), info.dtype, self.target).data.cast("B")

    def to(self, dtype: str) -> RawTensor:
        """The same values in another floating dtype, rounded to nearest even as torch rounds (when written)."""
        if self.target is not None:
            raise ValueError(f"{self.info.name} is already cast to {self.target}")
        return RawTensor(self.info, self.storage, dtype)


def cast_array(raw: memoryview, source: str, target: str) -> Any:
    """Raw little-endian elements of `source` as a contiguous array of `target` (float64/32/16, bfloat16)."""
    import numpy as np

    if source not in CASTABLE or target not in CASTABLE:
        return _cast_with_torch(raw, source, target)
    if source == "bfloat16":
        wide = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << np.uint32(16)
        values = wide.view(np.float32)
    else:
        values = np.frombuffer(raw, dtype=dtype_info(source).numpy)
    with np.errstate(over="ignore"):
        if source == "float64" and target != "float64":
            values = values.astype(np.float32)  # torch goes through float32 too: the same double rounding
        if target == "bfloat16":
            return bf16_bits(values.astype(np.float32))
        return values.astype(dtype_info(target).numpy)


def bf16_bits(x32: Any) -> Any:
    """float32 -> bfloat16 bits (uint16), nearest even; NaN becomes torch's quiet NaN 0x7FC0."""
    import numpy as np

    u = x32.view(np.uint32)
    with np.errstate(over="ignore"):
        rounded = (u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)
    bits = rounded.astype(np.uint16)
    nan = np.isnan(x32)
    if nan.any():
        bits[nan] = 0x7FC0
    return bits


def _cast_with_torch(raw: memoryview, source: str, target: str) -> Any:
    """fp8 and friends: numpy has no rounding for them, torch does."""
    from ckinspect.optional import require_torch

    torch = require_torch(f"casting {source} to {target}")
    data = bytearray(raw)  # frombuffer shares it; torchio's own writing path is not needed (nor imported) here
    if not data:
        return torch.empty(0, dtype=getattr(torch, target)).view(torch.uint8).numpy()
    out = torch.frombuffer(data, dtype=torch.uint8).view(getattr(torch, source))
    return out.to(getattr(torch, target)).view(torch.uint8).numpy()


def raw_tensors(
    tree: Any,
    source_of: Callable[[TensorInfo], StorageSource | bytes | bytearray | memoryview | None],
    keep: Callable[[str, TensorInfo], bool] | None = None,
    cast: Callable[[str, RawTensor], RawTensor] | None = None,
) -> Built:
    """map_tree with RawTensors: one source per storage key, shared by every view of it (as torch shares).
    Nothing is read here: the bytes stream from the source when the file is written."""
    storages: dict[str, StorageSource | None] = {}

    def make(name: str, info: TensorInfo) -> Any:
        if info.storage_key not in storages:
            storages[info.storage_key] = as_source(source_of(info))
        storage = storages[info.storage_key]
        if storage is None:
            return MISSING
        tensor = RawTensor(info, storage)
        if not tensor.fits():
            return MISSING
        return cast(name, tensor) if cast is not None else tensor

    return map_tree(tree, make, keep)


def raw_to_safetensors(
    path: str | Path, tensors: list[tuple[str, RawTensor]], metadata: dict[str, str] | None = None
) -> tuple[int, list[str]]:
    """Write named RawTensors as safetensors, each with its own bytes (the format forbids sharing).

    Returns the size and notes naming every tensor that shared its storage and was copied.
    """
    seen: dict[int, str] = {}
    notes = []
    entries = []
    for name, t in tensors:
        ident = id(t.storage)
        if t.info.numel and ident in seen:
            notes.append(
                f"{name} shared its storage with {seen[ident]}: written as a separate copy "
                "(safetensors forbids shared memory)"
            )
        elif t.info.numel:
            seen[ident] = name
        entries.append(Entry(name, t.dtype, t.shape, _chunks(t)))
    return write_safetensors(path, entries, metadata), notes


def _chunks(t: RawTensor) -> Callable[[], Iterator[memoryview]]:
    return t.chunks


def count_values(tree: Any, is_tensor: Callable[[Any], bool]) -> int:
    """Leaves of a built tree that are neither tensors nor None (hyperparameters, config, RNG arrays);
    a container shared by several paths (map_tree keeps a pickle's sharing) is counted once."""
    count = 0
    entered: set[int] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if is_tensor(node):
            continue
        if isinstance(node, (dict, list, tuple)):
            if id(node) not in entered:
                entered.add(id(node))
                stack.extend(node.values() if isinstance(node, dict) else node)
        elif node is not None:
            count += 1
    return count
