"""Tensor bytes -> numpy values: the one decoding layer that the value scan, the diff, weight drift and
the TUI share.

    raw_numpy_dtype("bfloat16")                  # how to view the raw bytes (bf16 as uint16, fp8 as uint8)
    for raw in raw_blocks(blobs, storage, t, elements=1 << 20):   # any layout, strided views included
        values = decode(raw, t.dtype)            # float64 (complex128 for complex), fp8 through a table

Reads are bounded: a block is at most `elements` elements (or `limit` bytes of storage span for a
strided view), however large the tensor. numpy is imported inside the functions, so importing this
module costs nothing on the report path.
"""

from __future__ import annotations

import math
import threading
import zlib
from collections.abc import Callable, Iterator

from ckinspect.dtypes import dtype_info
from ckinspect.io.blobs import DEFAULT_CHUNK, Blobs, UnreadableStorage
from ckinspect.io.crc import crc32
from ckinspect.model import StorageInfo, TensorInfo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

WIDEN_ELEMENTS = 64 << 10  # half-precision elements widen_block handles at once: 256 KiB of float32, half an L2
_WHOLE_SPAN = 64 << 20  # a strided view spanning up to this much is mapped whole for C-order reads
INFLATE_INPUT = 1 << 20  # compressed bytes read at once from a deflated member


def raw_numpy_dtype(dtype: str) -> Any:
    """The numpy dtype to view a tensor's raw bytes as (bf16 as uint16, float8 as uint8, complex32 as uint32)."""
    import numpy as np

    info = dtype_info(dtype)
    if info.numpy:
        return np.dtype(info.numpy)
    return np.dtype({1: "u1", 2: "<u2", 4: "<u4", 8: "<u8"}.get(info.itemsize, "u1"))


def swap_unit(dtype: str) -> int:
    """Bytes swapped together when a big-endian storage is read (as torch's storage.byteswap(dtype)):
    the element, or each half of a complex one; 1 when nothing is swapped."""
    info = dtype_info(dtype)
    return max(1, info.itemsize // 2) if info.kind == "complex" else info.itemsize


def to_native(raw: Any, dtype: str) -> Any:
    """Raw elements read from a big-endian storage (viewed by raw_numpy_dtype) in this machine's little-
    endian order, as torch.load swaps them: a new array, each element (each complex half) byte-swapped."""
    import numpy as np

    unit = swap_unit(dtype)
    if unit == 1:
        return raw
    flat = np.ascontiguousarray(raw)
    return flat.view(f">u{unit}").astype(f"<u{unit}").view(flat.dtype).reshape(raw.shape)


# ---------------------------------------------------------------- decoding


# float8 formats: (exponent bits, mantissa bits, bias, which codes are special), as torch defines them
_FLOAT8_FORMATS = {
    "float8_e4m3fn": (4, 3, 7, "fn"),  # no Inf; S.1111.111 is NaN
    "float8_e5m2": (5, 2, 15, "ieee"),  # IEEE-like: exponent all ones is Inf (mantissa 0) or NaN
    "float8_e4m3fnuz": (4, 3, 8, "fnuz"),  # no Inf, no -0: 0x80 is the one NaN
    "float8_e5m2fnuz": (5, 2, 16, "fnuz"),
    "float8_e8m0fnu": (8, 0, 127, "e8m0"),  # exponent only, unsigned: 2^(code-127), 0xFF is NaN
}
_FLOAT8_TABLES: dict[str, Any] = {}


def float8_table(dtype: str) -> Any:
    """float64 value of each of the 256 codes of a float8 dtype (NaN and +-Inf where torch has them)."""
    table = _FLOAT8_TABLES.get(dtype)
    if table is None:
        table = _FLOAT8_TABLES[dtype] = _build_float8_table(*_FLOAT8_FORMATS[dtype])
        table.flags.writeable = False
    return table


def _build_float8_table(ebits: int, mbits: int, bias: int, special: str) -> Any:
    import numpy as np

    codes = np.arange(256, dtype=np.int64)
    signed = special != "e8m0"
    sign = np.where(codes & 0x80, -1.0, 1.0) if signed else np.ones(256)
    exp = (codes >> mbits) & ((1 << ebits) - 1)
    man = (codes & ((1 << mbits) - 1)).astype(np.float64)
    frac = man / (1 << mbits)
    normal = (1 + frac) * np.exp2(exp.astype(np.float64) - bias)
    value = sign * np.where((exp == 0) & (mbits > 0), frac * 2.0 ** (1 - bias), normal)
    top = (1 << ebits) - 1
    if special == "ieee":
        value = np.where((exp == top) & (man == 0), sign * np.inf, value)
        value = np.where((exp == top) & (man != 0), np.nan, value)
    elif special == "fn":
        value = np.where((exp == top) & (man == (1 << mbits) - 1), np.nan, value)
    elif special == "fnuz":
        value = np.where(codes == 0x80, np.nan, value)
    else:
        value = np.where(codes == 0xFF, np.nan, value)
    return value


def decode(raw: Any, dtype: str, wide: Any = None) -> Any:
    """Raw elements (as viewed by raw_numpy_dtype) -> float64 values (complex128 for complex).

    `wide` (np.float32 or np.float64) asks for another float width; every value of a 16-bit float fits
    float32 exactly.
    """
    import numpy as np

    if wide is None:
        wide = np.float64
    if dtype == "bfloat16":
        with np.errstate(invalid="ignore"):  # signalling NaN patterns widen to quiet NaNs, as torch's do
            return (raw.astype(np.uint32) << 16).view(np.float32).astype(wide)
    if dtype in _FLOAT8_FORMATS:
        return float8_table(dtype)[raw].astype(wide, copy=False)
    if dtype == "complex32":  # two float16 halves per element
        halves = raw.view(np.float16).astype(np.float64)
        return (halves[0::2] + 1j * halves[1::2]).astype(np.complex128)
    info = dtype_info(dtype)
    if info.kind == "complex":
        return raw.astype(np.complex128)
    # opaque and packed bit patterns come out as their codes: counts and first index are right,
    # magnitudes are not
    return raw.astype(wide)


class _Scratch(threading.local):
    def __init__(self) -> None:
        import numpy as np

        self.wide = np.empty(WIDEN_ELEMENTS, dtype=np.uint32)  # bf16/fp16 blocks widened to float32 here


_scratch: _Scratch | None = None
_scratch_lock = threading.Lock()


def widen_block(raw: Any, dtype: str) -> Any:
    """A float32/float64 array of at most WIDEN_ELEMENTS raw elements, without allocating: float32 and
    float64 come back as they are, bf16 (shifted into the top of a uint32) and fp16 in this thread's
    scratch buffer, valid until this thread's next call. The value scan's hot path: a sub-block of a
    scan block, so the widened copy is still in L2 when min, max and the sums read it."""
    import numpy as np

    global _scratch
    if dtype in ("float32", "float64"):
        return raw
    if _scratch is None:
        with _scratch_lock:
            if _scratch is None:
                _scratch = _Scratch()
    wide = _scratch.wide[: raw.size]
    if dtype == "bfloat16":
        np.copyto(wide, raw, casting="safe")  # raw is uint16
        np.left_shift(wide, 16, out=wide)
        return wide.view(np.float32)
    out = wide.view(np.float32)
    np.copyto(out, raw, casting="same_kind")  # float16 -> float32 (exact)
    return out


# ---------------------------------------------------------------- reading elements, bounded


def iter_view_blocks(
    blobs: Blobs, storage: StorageInfo, tensor: TensorInfo, limit: int = DEFAULT_CHUNK, logical: bool = True
) -> Iterator[Any]:
    """The elements of any (non-contiguous) view as contiguous numpy blocks, each read from at most ~`limit` bytes.

    With `logical=True` the blocks come in the tensor's own C order (what a diff needs); with False the
    dimensions are walked by falling stride (same elements, fewer and bigger reads: what statistics need).
    """
    if storage.deflated is not None:
        yield from deflated_blocks(blobs, storage, tensor, max(1, limit // tensor.itemsize), logical)
        return
    if tensor.numel == 0:
        return
    dims = list(zip(tensor.shape, tensor.stride, strict=False))  # the reader checked their lengths agree
    if not logical:
        dims = sorted((d for d in dims if d[0] != 1), key=lambda d: -d[1]) or [(1, 1)]
    view = _ViewReader(blobs, storage, tensor, limit)
    total_span = view.span(dims)
    if logical and limit < total_span <= _WHOLE_SPAN and len(tensor.shape) > 0:
        yield from view.rows_of_mapped_span(total_span)
        return
    yield from view.walk(tensor.storage_offset, dims)


class _ViewReader:
    """One strided view's reads: blocks of at most ~`limit` bytes of storage span, swapped when big-endian."""

    def __init__(self, blobs: Blobs, storage: StorageInfo, tensor: TensorInfo, limit: int) -> None:
        self.blobs, self.storage, self.tensor, self.limit = blobs, storage, tensor, limit
        self.np_dtype = raw_numpy_dtype(tensor.dtype)
        self.item = tensor.itemsize

    def span(self, ds: list[tuple[int, int]]) -> int:
        return (sum((n - 1) * s for n, s in ds) + 1) * self.item

    def native(self, block: Any) -> Any:
        return to_native(block, self.tensor.dtype) if self.storage.big_endian else block

    def walk(self, base: int, ds: list[tuple[int, int]]) -> Iterator[Any]:
        """The elements of dims `ds` from element `base`, outer dims split until a block's span fits."""
        if not ds or self.span(ds) <= self.limit:
            yield self.native(self.block(base, ds))
            return
        (n0, s0), rest = ds[0], ds[1:]
        rest_span = self.span(rest)
        if rest_span <= self.limit and s0 > 0:
            rows = max(1, (self.limit - rest_span) // (s0 * self.item) + 1)
            for i in range(0, n0, rows):
                yield from self.walk(base + i * s0, [(min(rows, n0 - i), s0), *rest])
        else:
            for i in range(n0):
                yield from self.walk(base + i * s0, rest)

    def block(self, base: int, ds: list[tuple[int, int]]) -> Any:
        import numpy as np
        from numpy.lib.stride_tricks import as_strided

        item, nbytes = self.item, self.span(ds)
        offset, _ = self.blobs.check_within(self.storage, base * item, nbytes)
        with self.blobs.window(self.storage.file, offset, nbytes) as view:
            flat = np.frombuffer(view, dtype=self.np_dtype, count=nbytes // item)
            shape = [n for n, _ in ds] or [1]
            strides = [s * item for _, s in ds] or [item]
            block = as_strided(flat, shape=shape, strides=strides, writeable=False).copy().reshape(-1)
            del flat
        return block

    def rows_of_mapped_span(self, total_span: int) -> Iterator[Any]:
        """C order through a transposed view jumps across the whole span for every row: map the span
        once and copy rows out of it, rather than re-reading it row by row."""
        import numpy as np
        from numpy.lib.stride_tricks import as_strided

        tensor, item = self.tensor, self.item
        offset, _ = self.blobs.check_within(self.storage, tensor.storage_offset * item, total_span)
        with self.blobs.window(self.storage.file, offset, total_span) as view:
            flat = np.frombuffer(view, dtype=self.np_dtype, count=total_span // item)
            full = as_strided(flat, shape=tensor.shape, strides=[s * item for s in tensor.stride], writeable=False)
            row = max(1, math.prod(tensor.shape[1:]))
            rows = max(1, self.limit // (row * item))
            try:
                for i in range(0, tensor.shape[0], rows):
                    yield self.native(full[i : i + rows].copy().reshape(-1))
            finally:
                del full, flat


# ---------------------------------------------------------------- deflated members (np.savez_compressed)


def inflated_pieces(blobs: Blobs, storage: StorageInfo, start: int, length: int, piece: int) -> Iterator[memoryview]:
    """Bytes [start, start+length) of a deflated storage, inflated in order, in pieces of at most `piece`
    bytes: memory stays at one piece and one input read whatever the member's size. Read to its end, the
    whole member is checked as numpy's zipfile checks it. UnreadableStorage for a bad deflate stream, one
    cut short or inflating past its declared size, or a CRC-32 that does not match."""
    assert storage.deflated is not None
    skip, size, expected = storage.deflated[2:]
    lo, hi = skip + start, skip + start + length
    where = f"{storage.member or storage.key} in {storage.file.name}"
    produced = crc = 0
    for out in _inflate(blobs, storage, piece, where):
        a, b = max(lo - produced, 0), min(hi - produced, len(out))
        crc = crc32(out, crc)
        produced += len(out)
        if a < b:
            yield memoryview(out)[a:b]
    if produced != size or expected is not None and crc != expected:
        why = f"inflates to {produced:,} bytes, not {size:,}" if produced != size else "fails its CRC-32"
        raise UnreadableStorage(f"{where} {why}")


def _inflate(blobs: Blobs, storage: StorageInfo, piece: int, where: str) -> Iterator[bytes]:
    """The member's whole inflated stream, at most `piece` bytes at a time, never past its declared size."""
    assert storage.deflated is not None
    pos, packed, _, size, _ = storage.deflated
    end = pos + packed
    inflater = zlib.decompressobj(-15)
    tail = b""
    produced = 0
    while not inflater.eof:
        if not tail:
            if pos >= end:
                raise UnreadableStorage(f"{where}: the deflate stream is cut short")
            tail = blobs.pread(storage.file, pos, min(INFLATE_INPUT, end - pos))
            pos += len(tail)
        try:
            out = inflater.decompress(tail, min(piece, size - produced + 1))
        except zlib.error as exc:
            raise UnreadableStorage(f"{where}: bad deflate data ({exc})") from None
        tail = inflater.unconsumed_tail
        produced += len(out)
        if produced > size:
            raise UnreadableStorage(f"{where} inflates past the {size:,} bytes its zip entry declares")
        yield out


def _dense_in_storage_order(tensor: TensorInfo) -> bool:
    """The view reads each element of one contiguous range once (C order, or a permutation of it such as
    a Fortran-order array): its storage order is a complete, in-order walk of its span."""
    dims = sorted(((n, s) for n, s in zip(tensor.shape, tensor.stride, strict=False) if n != 1), key=lambda d: -d[1])
    expected = 1
    for n, s in reversed(dims):
        if s != expected:
            return False
        expected *= n
    return True


def deflated_blocks(
    blobs: Blobs, storage: StorageInfo, tensor: TensorInfo, elements: int, logical: bool
) -> Iterator[Any]:
    """A view's raw elements from a deflated storage, streamed, in blocks of at most `elements` (fresh arrays).

    Storage order is the only order a stream gives cheaply: a C-order view, or (with `logical=False`) any
    view that walks its span once. Anything else would need the member inflated whole: UnreadableStorage."""
    import numpy as np

    if tensor.numel == 0:
        return
    if not (tensor.is_contiguous or not logical and _dense_in_storage_order(tensor)):
        raise UnreadableStorage(
            f"{tensor.name}: a view in another order than its storage's (strides {list(tensor.stride)}) inside a "
            "compressed member cannot be read without inflating the member whole"
        )
    np_dtype = raw_numpy_dtype(tensor.dtype)
    item = tensor.itemsize
    size = max(1, elements) * item
    left = tensor.nbytes
    block, filled = np.empty(min(size, left) // item, np_dtype), 0
    for piece in inflated_pieces(blobs, storage, tensor.byte_offset, tensor.nbytes, size):
        while len(piece):
            take = min(len(piece), block.nbytes - filled)
            block.view(np.uint8)[filled : filled + take] = piece[:take]
            piece, filled = piece[take:], filled + take
            if filled == block.nbytes:
                yield to_native(block, tensor.dtype) if storage.big_endian else block
                left -= filled
                block, filled = np.empty(min(size, left) // item, np_dtype), 0


def raw_blocks(
    blobs: Blobs,
    storage: StorageInfo,
    tensor: TensorInfo,
    elements: int,
    logical: bool = True,
    convert: Callable[[Any], Any] | None = None,
) -> Iterator[Any]:
    """The tensor's raw elements as numpy blocks of at most `elements` (strided views: read from at most
    `elements` elements' span), each a fresh array the caller may keep.

    `logical=True` gives the tensor's C order (a diff pairs elements); False lets a strided view be
    walked in storage order (statistics do not care). A big-endian storage's elements come swapped into
    little-endian order, as torch.load swaps them. `convert(raw)`, when given, is applied while the
    bytes are still mapped, so a decoded block costs one copy, not two.
    """
    if storage.extents is not None:
        yield from _extent_blocks(blobs, storage, tensor, elements, logical, convert)
        return
    if storage.deflated is not None or not tensor.is_contiguous:
        limit = elements * tensor.itemsize
        blocks = (deflated_blocks(blobs, storage, tensor, elements, logical) if storage.deflated is not None else
                  iter_view_blocks(blobs, storage, tensor, limit=limit, logical=logical))  # fmt: skip
        yield from blocks if convert is None else map(convert, blocks)
        return
    yield from _contiguous_blocks(blobs, storage, tensor, elements, convert)


def _contiguous_blocks(blobs: Blobs, storage: StorageInfo, tensor: TensorInfo, elements: int,
                       convert: Callable[[Any], Any] | None) -> Iterator[Any]:  # fmt: skip
    import numpy as np

    np_dtype = raw_numpy_dtype(tensor.dtype)
    item = tensor.itemsize
    offset, _ = blobs.check_within(storage, tensor.byte_offset, tensor.nbytes)
    for start in range(0, tensor.numel, elements):
        count = min(elements, tensor.numel - start)
        with blobs.window(storage.file, offset + start * item, count * item) as view:
            raw = np.frombuffer(view, dtype=np_dtype, count=count)
            if storage.big_endian:
                raw = to_native(raw, tensor.dtype)  # a copy already
                block = raw if convert is None else convert(raw)
            else:
                block = raw.copy() if convert is None else convert(raw)
            del raw  # the window unmaps on leaving the `with` only when nothing still points into it
        yield block


# ---------------------------------------------------------------- a tensor in many chunks (DCP, sharded over ranks)


def _extent_blocks(blobs: Blobs, storage: StorageInfo, tensor: TensorInfo, elements: int, logical: bool,
                   convert: Callable[[Any], Any] | None) -> Iterator[Any]:  # fmt: skip
    """A tensor whose bytes are chunks (model.Extents): chunk after chunk for statistics (`logical=False`);
    in the tensor's C order otherwise: chunks that split only the first dimension one after another, any other
    cut assembled a slab of rows at a time from the part of each chunk it holds (memory: two slabs)."""
    ext = storage.extents
    assert ext is not None  # noqa: S101 - the caller checked
    if tensor.numel == 0:
        return
    if not tensor.is_contiguous or tensor.storage_offset or tuple(tensor.shape) != _shape_of(ext, tensor):
        raise UnreadableStorage(f"{tensor.name}: a view of a tensor stored in {len(ext)} chunks")
    chunks = range(len(ext))
    if logical:
        if not ext.whole:
            raise UnreadableStorage(f"{tensor.name}: its {len(ext)} chunks do not hold each of its elements once; "
                                    "not read in order")  # fmt: skip
        chunks = sorted((i for i in chunks if ext.length[i]), key=ext.offsets)  # type: ignore[assignment]
        if any(ext.sizes(i)[1:] != tuple(tensor.shape[1:]) for i in chunks):
            yield from _assembled_rows(blobs, storage, tensor, elements, convert, list(chunks))
            return
    for i in chunks:
        chunk = ext.chunk(i, tensor.name, tensor.dtype, storage.key)
        yield from raw_blocks(blobs, ext.storage(i, tensor.dtype, storage.key), chunk, elements, logical, convert)


def _shape_of(ext: Any, tensor: TensorInfo) -> tuple[int, ...]:
    return tuple(tensor.shape) if ext.ndim == len(tensor.shape) else ()


def _assembled_rows(blobs: Blobs, storage: StorageInfo, tensor: TensorInfo, elements: int,
                    convert: Callable[[Any], Any] | None, chunks: list[int]) -> Iterator[Any]:  # fmt: skip
    """C order of a tensor cut on more than its first dimension: slabs of whole rows (at least one), each
    filled from the box every chunk it crosses has in it, read as a strided view of that chunk."""
    import numpy as np

    ext = storage.extents
    assert ext is not None  # noqa: S101 - the caller checked
    shape = tuple(tensor.shape)
    row = max(1, math.prod(shape[1:]))
    rows = max(1, elements // row)
    np_dtype = raw_numpy_dtype(tensor.dtype)
    for r0 in range(0, shape[0], rows):
        r1 = min(shape[0], r0 + rows)
        slab = np.empty((r1 - r0, *shape[1:]), np_dtype)
        for i in chunks:
            offsets, sizes = ext.offsets(i), ext.sizes(i)
            lo, hi = max(r0, offsets[0]), min(r1, offsets[0] + sizes[0])
            if lo >= hi:
                continue
            whole = ext.chunk(i, tensor.name, tensor.dtype, storage.key)
            inner = math.prod(sizes[1:])
            part = whole.replace(shape=(hi - lo, *sizes[1:]), storage_offset=(lo - offsets[0]) * inner)
            got = np.concatenate(list(raw_blocks(blobs, ext.storage(i, tensor.dtype, storage.key), part,
                                                 max(elements, 1), True)))  # fmt: skip
            where = (slice(lo - r0, hi - r0), *(slice(o, o + n) for o, n in zip(offsets[1:], sizes[1:], strict=True)))
            slab[where] = got.reshape(part.shape)
            del got
        flat = slab.reshape(-1)
        yield flat if convert is None else convert(flat)
