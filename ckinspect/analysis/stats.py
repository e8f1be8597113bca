"""Value statistics: the one implementation that the value scan and the TUI's details pane share.

min, max, mean, std (with Bessel's correction, as torch.std), NaN/Inf and beyond-float16 counts,
accumulated block by block and merged in any order (Chan et al.'s parallel update), so the threads of
the scan can each take a part. No torch; numpy inside the functions.

    m = Moments()
    for block in blocks:                 # float32/float64 arrays, any size
        m.add(block, count_overflow=True)
    m.stats()                            # TensorStats: min, max, mean, std, nonfinite, fp16_overflow, max_abs ...

How a block is reduced, and why (measured with `python bench/bench_scan.py`, see its docstring):

- Four numpy/BLAS calls per block, each releasing the GIL: `minimum.reduce`, `maximum.reduce`, a
  matrix-vector product for the sums and `vecdot` for the sums of squares. NaN propagates through
  min and max and +-Inf shows as a bound, and so does anything beyond float16's range: the findings
  follow from min and max alone, and only a block whose min or max says something is wrong takes the
  careful path (`block_moments`: exact NaN/Inf/overflow counts, moments of the finite values).
- Sums in the data's own width, but never long ones: the block is viewed as rows of ROW values; a
  row's sum and sum of squares are BLAS dot products over ROW values (float32 error ~ ROW/32 ulp), and
  the rows' results are added in float64. One BLAS dot over a whole 256 KiB float32 block was as fast
  but up to 2e-5 off in the sum of squares; numpy's float32 `sum` is pairwise but 3x slower.
- The spread: M2 = sum(x^2) - sum(x)^2/n, unless it is under 1% of sum(x^2) (values far from zero
  with a small spread, where that difference cancels): then the block is centred first and summed
  again (two more passes, only for such blocks). Blocks merge in float64 by Chan's update.
"""

from __future__ import annotations

import math
from typing import Any

from ckinspect.io.values import WIDEN_ELEMENTS, raw_numpy_dtype, widen_block
from ckinspect.record import Record
from ckinspect.vocab import FP16_MAX

# fp16 weights cannot overflow fp16; the warning is about saving wider values in half precision.
OVERFLOW_DTYPES = ("float32", "bfloat16", "float64")

ROW = 1024  # values one BLAS dot adds up before float64 takes over
_ROWS_AT_ONCE = 256  # rows per numpy call: bounds the scratch of per-row results for big arrays (the TUI's)
_SQUARES_FIT = {4: 1e17, 8: 1e150}  # |x| below this: ROW squares add up without overflowing the dtype
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
    summed: bool = True  # False: the checks only (min, max, counts), no mean or std (Moments.checks_only)

    @classmethod
    def checks_only(cls) -> Moments:
        """Moments that keep min, max and the NaN/Inf/beyond-float16 counts, not mean and std: two numpy
        passes per block fewer, for callers that only need the findings (the CLI's report)."""
        return cls(summed=False)

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
        mn, mx = float(np.minimum.reduce(x)), float(np.maximum.reduce(x))
        limit = FP16_MAX if count_overflow else _SQUARES_FIT[x.itemsize]
        if mn >= -limit and mx <= limit:  # False for NaN too
            mean, m2 = _finite_moments(x) if self.summed else (0.0, 0.0)
            self._fold(x.size, mean, m2, mn, mx)
        else:
            self.merge(block_moments(x, count_overflow))

    def add_raw(self, raw: Any, dtype: str, count_overflow: bool) -> None:
        """Fold in raw elements of a 16/32/64-bit float (as viewed by raw_numpy_dtype), half precision
        widened to float32 WIDEN_ELEMENTS at a time, so the widened values stay in cache."""
        if dtype in ("float32", "float64"):
            self.add(raw, count_overflow)
            return
        for i in range(0, raw.size, WIDEN_ELEMENTS):
            self.add(widen_block(raw[i : i + WIDEN_ELEMENTS], dtype), count_overflow)

    def stats(self) -> TensorStats:
        count = self.n + self.nan + self.inf
        if self.n == 0:
            return TensorStats(None, None, None, None, self.nan + self.inf, self.over, None, self.nan, count)
        std = math.sqrt(max(self.m2, 0.0) / (self.n - 1)) if self.n > 1 else (math.nan if self.n == 1 else None)
        return TensorStats(
            float(self.mn),
            float(self.mx),
            self.mean if self.summed else None,
            std if self.summed else None,
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


def moments_of_bytes(buf: memoryview | bytes, dtype: str) -> Moments:
    """Moments of a run of raw little-endian elements of a 16/32/64-bit float."""
    import numpy as np

    total = Moments()
    total.add_raw(np.frombuffer(buf, dtype=raw_numpy_dtype(dtype)), dtype, dtype in OVERFLOW_DTYPES)
    return total


def moments_of_array(arr: Any, dtype: str, summed: bool = True) -> Moments:
    """Moments of raw elements already in memory (a strided view's block), any shape."""
    import numpy as np

    total = Moments(summed=summed)
    total.add_raw(np.ascontiguousarray(arr).reshape(-1), dtype, dtype in OVERFLOW_DTYPES)
    return total
