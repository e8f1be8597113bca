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
from collections.abc import Callable, Iterator

from ckinspect.dtypes import dtype_info
from ckinspect.io.blobs import DEFAULT_CHUNK, Blobs
from ckinspect.model import StorageInfo, TensorInfo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

WIDEN_ELEMENTS = 64 << 10  # half-precision elements widen_block handles at once: 256 KiB of float32, half an L2
_WHOLE_SPAN = 64 << 20  # a strided view spanning up to this much is mapped whole for C-order reads
_FLOAT8_TABLES = ("float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu")


def raw_numpy_dtype(dtype: str) -> Any:
    """The numpy dtype to view a tensor's raw bytes as (bf16 as uint16, float8 as uint8)."""
    import numpy as np

    info = dtype_info(dtype)
    if info.numpy:
        return np.dtype(info.numpy)
    return np.dtype({1: "u1", 2: "<u2", 4: "<u4", 8: "<u8"}.get(info.itemsize, "u1"))


# ---------------------------------------------------------------- decoding


def _float8_table(dtype: str) -> Any:
    import numpy as np

    codes = np.arange(256, dtype=np.uint16)
    if dtype == "float8_e5m2":  # the top byte of a float16
        return (codes << 8).view(np.float16).astype(np.float64)
    if dtype == "float8_e8m0fnu":  # exponent only: 2^(code-127), 0xFF is NaN
        return np.where(codes == 255, np.nan, 2.0 ** (codes.astype(np.float64) - 127))
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp = (codes >> 3) & 0xF
    man = (codes & 0x7).astype(np.float64)
    value = np.where(exp == 0, man / 8 * 2.0**-6, (1 + man / 8) * 2.0 ** (exp.astype(np.float64) - 7))
    value = np.where((exp == 0xF) & (man == 7), np.nan, value)  # e4m3fn: no inf, one NaN pattern
    return sign * value


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
    if dtype in _FLOAT8_TABLES:
        return _float8_table(dtype)[raw].astype(wide, copy=False)
    info = dtype_info(dtype)
    if info.kind == "complex":
        return raw.astype(np.complex128)
    # opaque and other float8 bit patterns come out as their codes: counts and first index are right,
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
    import numpy as np
    from numpy.lib.stride_tricks import as_strided

    np_dtype = raw_numpy_dtype(tensor.dtype)
    item = tensor.itemsize
    if tensor.numel == 0:
        return
    dims = list(zip(tensor.shape, tensor.stride, strict=False))  # the reader checked their lengths agree
    if not logical:
        dims = sorted((d for d in dims if d[0] != 1), key=lambda d: -d[1]) or [(1, 1)]

    def span(ds: list[tuple[int, int]]) -> int:
        return (sum((n - 1) * s for n, s in ds) + 1) * item

    def walk(base: int, ds: list[tuple[int, int]]) -> Iterator[Any]:
        if not ds or span(ds) <= limit:
            nbytes = span(ds)
            offset, _ = blobs.check_within(storage, base * item, nbytes)
            with blobs.window(storage.file, offset, nbytes) as view:
                flat = np.frombuffer(view, dtype=np_dtype, count=nbytes // item)
                shape = [n for n, _ in ds] or [1]
                strides = [s * item for _, s in ds] or [item]
                block = as_strided(flat, shape=shape, strides=strides, writeable=False).copy().reshape(-1)
                del flat
            yield block
            return
        (n0, s0), rest = ds[0], ds[1:]
        rest_span = span(rest)
        if rest_span <= limit and s0 > 0:
            rows = max(1, (limit - rest_span) // (s0 * item) + 1)
            for i in range(0, n0, rows):
                yield from walk(base + i * s0, [(min(rows, n0 - i), s0), *rest])
        else:
            for i in range(n0):
                yield from walk(base + i * s0, rest)

    total_span = span(dims)
    if logical and limit < total_span <= _WHOLE_SPAN and len(tensor.shape) > 0:
        # C order through a transposed view jumps across the whole span for every row: map the span
        # once and copy rows out of it, rather than re-reading it row by row.
        offset, _ = blobs.check_within(storage, tensor.storage_offset * item, total_span)
        with blobs.window(storage.file, offset, total_span) as view:
            flat = np.frombuffer(view, dtype=np_dtype, count=total_span // item)
            full = as_strided(flat, shape=tensor.shape, strides=[s * item for s in tensor.stride], writeable=False)
            row = max(1, math.prod(tensor.shape[1:]))
            rows = max(1, limit // (row * item))
            try:
                for i in range(0, tensor.shape[0], rows):
                    yield full[i : i + rows].copy().reshape(-1)
            finally:
                del full, flat
        return
    yield from walk(tensor.storage_offset, dims)


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
    walked in storage order (statistics do not care). `convert(raw)`, when given, is applied while the
    bytes are still mapped, so a decoded block costs one copy, not two.
    """
    import numpy as np

    if not tensor.is_contiguous:
        for raw in iter_view_blocks(blobs, storage, tensor, limit=elements * tensor.itemsize, logical=logical):
            yield raw if convert is None else convert(raw)
        return
    np_dtype = raw_numpy_dtype(tensor.dtype)
    item = tensor.itemsize
    offset, _ = blobs.check_within(storage, tensor.byte_offset, tensor.nbytes)
    for start in range(0, tensor.numel, elements):
        count = min(elements, tensor.numel - start)
        with blobs.window(storage.file, offset + start * item, count * item) as view:
            raw = np.frombuffer(view, dtype=np_dtype, count=count)
            block = raw.copy() if convert is None else convert(raw)
            del raw  # the window unmaps on leaving the `with` only when nothing still points into it
        yield block
