"""Value statistics: the one implementation that the value scan and the TUI's details pane share.

min, max, mean, std (with Bessel's correction, as torch.std), NaN/Inf and beyond-float16 counts,
accumulated block by block and merged in any order (Chan et al.'s parallel update), so the threads of
the scan can each take a part. No torch; numpy inside the functions.

    m = Moments()                        # Moments(summed=False): the checks only (what --report needs)
    for block in blocks:                 # float32/float64 arrays, any size
        m.add(block, count_overflow=True)
    m.stats()                            # TensorStats: min, max, mean, std, nonfinite, fp16_overflow, max_abs ...

How a block is reduced, and why (measured on the project's 2-core machine; figures in bench/bench_scan.py):

- Full statistics: four numpy/BLAS calls per block, each releasing the GIL: `minimum.reduce`,
  `maximum.reduce`, and row-wise dot products (`vecdot`) for the sums and the sums of squares. NaN
  propagates through min and max, +-Inf shows as a bound, and so does anything beyond float16's range:
  only a block whose min or max says something is wrong takes the careful path (`block_moments`: exact
  NaN/Inf/overflow counts, moments of the finite values).
- The checks only (`summed=False`): one BLAS pass. A NaN makes a sum of squares NaN, an Inf makes it
  Inf, and one |x| > 65504 makes it at least 65504^2 (all terms >= 0, rounding is monotone, 65504^2 is
  exact in float32): a block whose every row's sum of squares is below 65504^2 holds no finding, any
  other block takes the careful path. Same findings as the full path, value for value (tested at the
  edges); min, max, mean and std are then not known (None), max_abs only where values overflow.
  bfloat16 and float16 are checked on their bit patterns (two integer max passes), without widening.
- Sums in the data's own width, but never long ones: the block is viewed as rows of ROW values, a row is
  one BLAS dot of ROW values (float32 error ~ ROW/32 ulp), and the rows' results are added in float64.
  Measured against exact sums (math.fsum) on 3M values of random and adversarial data: std within
  1.8e-8 and mean within 1e-9 std (or one ulp); the whole-block float32 sum and dot before were up to
  3.3e-6 off in std and 1.9e-4 std in mean. Short rows also keep every BLAS call single-threaded
  (OpenBLAS goes multi-threaded on long vectors, which doubled the CPU time of 2 MiB blocks).
- The spread: M2 = sum(x^2) - sum(x)^2/n, unless it is under 1% of sum(x^2) (values far from zero
  with a small spread, where that difference cancels): then the block is shifted by its rounded mean
  and summed again (two more passes, only for such blocks). Blocks merge in float64 by Chan's update.
"""

from __future__ import annotations

import math
from typing import Any

from ckinspect.io.values import WIDEN_ELEMENTS, float8_table, widen_block
from ckinspect.record import Record
from ckinspect.vocab import FP16_MAX

# fp16 weights cannot overflow fp16; the warning is about saving wider values in half precision.
OVERFLOW_DTYPES = ("float32", "bfloat16", "float64")

ROW = 1024  # values one BLAS dot adds up before float64 takes over
_ROWS_AT_ONCE = 256  # rows per numpy call: bounds the scratch of per-row results for big arrays (the TUI's)
_SQUARES_FIT = {4: 1e17, 8: 1e150}  # |x| below this: ROW squares add up without overflowing the dtype
_FP16_SQUARE = FP16_MAX * FP16_MAX  # 65504^2, exact in float32 and float64
_CENTRE_BELOW = 1e-2  # M2 under this share of sum(x^2): the subtraction cancelled, centre the block first


class TensorStats(Record):
    """What the scan learnt about one floating tensor's values (std with Bessel's correction, as torch.std)."""

    __hash__ = None  # type: ignore[assignment]  # changed after it is built

    min: float | None
    max: float | None
    mean: float | None
    std: float | None
    nonfinite: int
    fp16_overflow: int
    max_abs: float | None
    nan: int = 0
    count: int = 0
    chunks: tuple[str, ...] = ()  # a tensor stored in chunks (DCP): those holding NaN/Inf, as Extents.where says

    def to_json(self) -> dict[str, Any]:
        def num(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else x

        return {
            "min": num(self.min),
            "max": num(self.max),
            "mean": num(self.mean),
            "std": num(self.std),
            "max_abs": num(self.max_abs),
            "nonfinite": self.nonfinite,
            "nan": self.nan,
            "fp16_overflow": self.fp16_overflow,
            "count": self.count,
        }


def merged_stats(a: TensorStats, b: TensorStats) -> TensorStats:
    """The statistics of one tensor from those of two disjoint parts of it (the files of a tensor stored in
    chunks, scanned apart): counts added, bounds widened, mean and std by Chan's update when both have them."""

    def bound(pick: Any, x: float | None, y: float | None) -> float | None:
        return y if x is None else x if y is None else pick(x, y)

    mean = std = None
    na, nb = a.count - a.nonfinite, b.count - b.nonfinite
    if a.mean is not None and b.mean is not None and a.std is not None and b.std is not None:
        total = Moments()
        for n, m, s in ((na, a.mean, a.std), (nb, b.mean, b.std)):
            if n:
                total._fold(n, m, (s * s * (n - 1)) if n > 1 else 0.0, math.inf, -math.inf)
        mean = total.mean
        std = math.sqrt(max(total.m2, 0.0) / (total.n - 1)) if total.n > 1 else math.nan
    return TensorStats(bound(min, a.min, b.min), bound(max, a.max, b.max), mean, std, a.nonfinite + b.nonfinite,
                       a.fp16_overflow + b.fp16_overflow, bound(max, a.max_abs, b.max_abs), a.nan + b.nan,
                       a.count + b.count, a.chunks + b.chunks)  # fmt: skip


class Moments(Record):
    """Running min/max/count/mean/M2 that merge in any order (Chan et al.), plus the non-finite tallies."""

    __hash__ = None  # type: ignore[assignment]  # changed after it is built

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    mn: float = math.inf
    mx: float = -math.inf
    nan: int = 0
    inf: int = 0
    over: int = 0
    summed: bool = True  # False: the checks only (NaN/Inf/beyond-float16 counts), no min, max, mean or std

    def merge(self, other: Moments) -> None:
        self.nan += other.nan
        self.inf += other.inf
        self.over += other.over
        self.summed = self.summed and other.summed
        if other.n:
            self._fold(other.n, other.mean, other.m2, other.mn, other.mx)

    def _fold(self, n: int, mean: float, m2: float, mn: float, mx: float) -> None:
        """Chan et al.'s update with a part of `n` finite values."""
        if mn < self.mn:
            self.mn = mn
        if mx > self.mx:
            self.mx = mx
        if self.n == 0:
            self.n, self.mean, self.m2 = n, mean, m2
            return
        total = self.n + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.m2 += m2 + delta * delta * self.n * n / total
        self.n = total

    def add(self, x: Any, count_overflow: bool) -> None:
        """Fold in one contiguous float32/float64 block: the scan's hot path (see the module docstring)."""
        import numpy as np

        if x.size == 0:
            return
        if not self.summed:
            # the checks alone: NaN makes a sum of squares NaN, Inf makes it Inf, and one |x| > 65504
            # makes it at least 65504^2 (every term is >= 0 and rounding is monotone): one BLAS pass
            # clears a block, only a block it does not clear is looked at value by value
            if _squares_below(x, _FP16_SQUARE if count_overflow else math.inf):
                self.n += x.size
            else:
                self.merge(block_moments(x, count_overflow))
            return
        mn, mx = float(np.minimum.reduce(x)), float(np.maximum.reduce(x))
        limit = FP16_MAX if count_overflow else _SQUARES_FIT[x.itemsize]
        if mn >= -limit and mx <= limit:  # False for NaN too
            self._fold(x.size, *_finite_moments(x), mn, mx)
        else:
            self.merge(block_moments(x, count_overflow))

    def add_raw(self, raw: Any, dtype: str, count_overflow: bool) -> None:
        """Fold in raw elements of a 16/32/64-bit float (as viewed by raw_numpy_dtype), half precision
        widened to float32 WIDEN_ELEMENTS at a time, so the widened values stay in cache; float8 through
        its table of 256 values, complex as its parts (see add_complex)."""
        if dtype in ("float32", "float64"):
            self.add(raw, count_overflow)
            return
        if dtype in _FLOAT8_SPECIAL:
            self._add_float8(raw, dtype)
            return
        if dtype in _COMPLEX_PARTS:
            self.add_complex(raw, dtype)
            return
        if not self.summed and raw.size:
            # the checks only: a 16-bit float's magnitude orders like its bit pattern with the sign bit
            # cleared, so the largest pattern says whether any value is NaN, Inf or beyond float16
            look_from = _BF16_BEYOND_FP16 if dtype == "bfloat16" and count_overflow else _HALF_NONFINITE[dtype]
            if _largest_magnitude_bits(raw) < look_from:
                self.n += raw.size
                return
        for i in range(0, raw.size, WIDEN_ELEMENTS):
            self.add(widen_block(raw[i : i + WIDEN_ELEMENTS], dtype), count_overflow)

    def _add_float8(self, raw: Any, dtype: str) -> None:
        import numpy as np

        if not self.summed and raw.size and not _FLOAT8_SPECIAL[dtype](raw):
            self.n += raw.size  # the checks only: no NaN/Inf bit pattern, and float8 cannot pass float16's range
            return
        table = _float8_table32(dtype)
        for i in range(0, raw.size, WIDEN_ELEMENTS):
            self.add(np.take(table, raw[i : i + WIDEN_ELEMENTS]), False)

    def add_complex(self, raw: Any, dtype: str) -> None:
        """NaN and Inf of complex elements as torch counts them (isnan: either part NaN; isinf: either
        part Inf): a finite element counts as one value. No min, max, mean or std (summed turns False)."""
        import numpy as np

        self.summed = False
        if raw.size == 0:
            return
        parts = raw.view(_COMPLEX_PARTS[dtype])
        if dtype == "complex32":
            parts = parts.astype(np.float32)
        if _squares_below(parts, math.inf):  # NaN or Inf in any part makes a row's sum of squares non-finite
            self.n += raw.size
            return
        pairs = parts.reshape(-1, 2)
        nan = int(np.count_nonzero(np.isnan(pairs).any(axis=1)))
        finite = int(np.count_nonzero(np.isfinite(pairs).all(axis=1)))
        self.nan += nan
        self.inf += raw.size - finite - nan
        self.n += finite

    def stats(self) -> TensorStats:
        count = self.n + self.nan + self.inf
        if self.n == 0:
            return TensorStats(None, None, None, None, self.nan + self.inf, self.over, None, self.nan, count)
        if not self.summed:  # the checks only: min and max are known for the blocks that needed a look
            max_abs = max(abs(self.mn), abs(self.mx)) if self.over else None  # then it is the largest overall
            return TensorStats(None, None, None, None, self.nan + self.inf, self.over, max_abs, self.nan, count)
        std = math.sqrt(max(self.m2, 0.0) / (self.n - 1)) if self.n > 1 else (math.nan if self.n == 1 else None)
        return TensorStats(
            float(self.mn),
            float(self.mx),
            self.mean,
            std,
            self.nan + self.inf,
            self.over,
            max(abs(self.mn), abs(self.mx)),
            self.nan,
            count,
        )


_ONES: dict[str, Any] = {}


def _ones(dtype: Any) -> Any:
    import numpy as np

    ones = _ONES.get(dtype.char)
    if ones is None:
        ones = np.ones(ROW, dtype)
        ones.flags.writeable = False
        _ONES[dtype.char] = ones  # a race only builds the same array twice
    return ones


def row_sums(x: Any) -> tuple[float, float]:
    """sum(x) and sum(x^2) of a contiguous float32/float64 block: BLAS dot products over rows of ROW
    values in the block's own width, the rows' results added in float64."""
    import numpy as np

    n = x.size
    whole = n - n % ROW
    total = squares = 0.0
    ones = _ones(x.dtype)
    for start in range(0, whole, _ROWS_AT_ONCE * ROW):
        rows = x[start : min(whole, start + _ROWS_AT_ONCE * ROW)].reshape(-1, ROW)
        per_row = np.empty((2, rows.shape[0]), x.dtype)
        _vecdot(rows, ones, out=per_row[0])
        _vecdot(rows, rows, out=per_row[1])
        sums = per_row.sum(axis=1, dtype=np.float64)
        total += float(sums[0])
        squares += float(sums[1])
    if whole < n:
        tail = x[whole:].astype(np.float64)
        total += float(tail.sum())
        squares += float(np.dot(tail, tail))
    return total, squares


def _float8_table32(dtype: str) -> Any:
    import numpy as np

    table = _FLOAT8_TABLES32.get(dtype)
    if table is None:
        table = _FLOAT8_TABLES32[dtype] = float8_table(dtype).astype(np.float32)  # every float8 value fits exactly
    return table


_FLOAT8_TABLES32: dict[str, Any] = {}


def _max_low7(raw: Any) -> int:
    import numpy as np

    return int(np.maximum.reduce(np.bitwise_and(raw, 0x7F)))


# float8 raw codes (uint8) -> could any be NaN or Inf? One integer pass; only a block that says yes is decoded
_FLOAT8_SPECIAL = {
    "float8_e4m3fn": lambda raw: _max_low7(raw) == 0x7F,  # S.1111.111 is NaN
    "float8_e5m2": lambda raw: _max_low7(raw) >= 0x7C,  # exponent all ones: Inf or NaN
    "float8_e4m3fnuz": lambda raw: bool((raw == 0x80).any()),  # the one NaN, "negative zero"
    "float8_e5m2fnuz": lambda raw: bool((raw == 0x80).any()),
    "float8_e8m0fnu": lambda raw: int(raw.max()) == 0xFF,
}
_COMPLEX_PARTS = {"complex64": "<f4", "complex128": "<f8", "complex32": "<f2"}  # each element: real, imaginary
SCANNED_DTYPES = ("float32", "float16", "bfloat16", "float64", *_FLOAT8_SPECIAL, *_COMPLEX_PARTS)

_HALF_NONFINITE = {"bfloat16": 0x7F80, "float16": 0x7C00}  # exponent bits all set: Inf, and NaN above it
_BF16_BEYOND_FP16 = 0x4780  # 65536, the first bfloat16 magnitude past 65504 (the one below is 65280)


def _largest_magnitude_bits(raw: Any) -> int:
    """The largest |x| among 16-bit floats, as its bit pattern without the sign: two integer max
    reductions, no widening (as uint16 a negative value is 0x8000 + its magnitude; as int16 every
    positive value is its magnitude and every negative one is below zero)."""
    import numpy as np

    bits = raw.view(np.uint16)
    return max(int(np.maximum.reduce(bits)) - 0x8000, int(np.maximum.reduce(bits.view(np.int16))))


def _squares_below(x: Any, limit: float) -> bool:
    """Is every row's sum of squares (rows of ROW values) below `limit`? False if any value is NaN."""
    import numpy as np

    n = x.size
    whole = n - n % ROW
    for start in range(0, whole, _ROWS_AT_ONCE * ROW):
        rows = x[start : min(whole, start + _ROWS_AT_ONCE * ROW)].reshape(-1, ROW)
        if not float(np.maximum.reduce(_vecdot(rows, rows, out=None))) < limit:  # NaN propagates through maximum
            return False
    return whole == n or float(np.dot(x[whole:], x[whole:])) < limit


def _vecdot(a: Any, b: Any, out: Any) -> Any:
    """Row-wise dot products: one short BLAS dot per row (numpy >= 2), never a threaded BLAS call."""
    import numpy as np

    if hasattr(np, "vecdot"):
        return np.vecdot(a, b, out=out)
    return np.einsum("ij,ij->i" if b.ndim == 2 else "ij,j->i", a, b, out=out)


def _finite_moments(x: Any) -> tuple[float, float]:
    """mean and M2 of a block of finite values whose squares do not overflow its dtype."""

    n = x.size
    total, squares = row_sums(x)
    mean = total / n
    m2 = squares - total * mean
    if m2 < _CENTRE_BELOW * squares:  # spread tiny next to the mean (norm weights near 1): centre first
        shift = x.dtype.type(mean)
        total, squares = row_sums(x - shift)
        m2 = squares - total * total / n
        mean = float(shift) + total / n
    return mean, max(m2, 0.0)


def block_moments(x: Any, count_overflow: bool) -> Moments:
    """Moments of one contiguous float32/float64 block, counting NaN, Inf and beyond-float16 values exactly."""
    import numpy as np

    m = Moments()
    if x.size == 0:
        return m
    mn, mx = x.min(), x.max()
    if not (math.isfinite(mn) and math.isfinite(mx)):  # NaN propagates through min/max; Inf shows as a bound
        finite = np.isfinite(x)
        kept = int(np.count_nonzero(finite))
        m.nan = int(np.count_nonzero(np.isnan(x)))
        m.inf = x.size - kept - m.nan
        x = x[finite]
        if x.size == 0:
            return m
        mn, mx = x.min(), x.max()
    m.n, m.mn, m.mx = x.size, float(mn), float(mx)
    if count_overflow and max(-m.mn, m.mx) > FP16_MAX:
        m.over = int(np.count_nonzero(np.abs(x) > FP16_MAX))
    if max(-m.mn, m.mx) > _SQUARES_FIT[x.itemsize]:  # squares would overflow the dtype's accumulators
        x = x.astype(np.float64)
    m.mean, m.m2 = _finite_moments(x)
    return m


def moments_of_array(arr: Any, dtype: str, summed: bool = True) -> Moments:
    """Moments of raw elements already in memory (a strided view's block), any shape."""
    import numpy as np

    total = Moments(summed=summed)
    total.add_raw(np.ascontiguousarray(arr).reshape(-1), dtype, dtype in OVERFLOW_DTYPES)
    return total
