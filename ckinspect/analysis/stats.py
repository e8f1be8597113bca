"""Value statistics: the one implementation that the value scan and the TUI's details pane share.

min, max, mean, std (with Bessel's correction, as torch.std), NaN/Inf and beyond-float16 counts,
accumulated block by block in float64 and merged in any order (Chan et al.'s parallel update), so
the threads of the scan can each take a part. Inside a block the sum of squares is centred whenever
the spread is small next to the mean, so a tensor near 1e6 with a spread of 1e-3 gets its std right,
where E[x^2] - E[x]^2 would cancel to noise. No torch; numpy inside the functions.

    m = Moments()
    for block in blocks:                 # float32/float64 arrays
        m.merge(block_moments(block, count_overflow=True))
    m.stats()                            # TensorStats: min, max, mean, std, nonfinite, fp16_overflow, max_abs ...
"""

from __future__ import annotations

import math
from typing import Any

from ckinspect.io.values import WIDEN_BLOCK, raw_numpy_dtype, widen_block
from ckinspect.record import Record
from ckinspect.vocab import FP16_MAX

# fp16 weights cannot overflow fp16; the warning is about saving wider values in half precision.
OVERFLOW_DTYPES = ("float32", "bfloat16", "float64")


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

    def merge(self, other: Moments) -> None:
        self.nan += other.nan
        self.inf += other.inf
        self.over += other.over
        if other.n == 0:
            return
        if other.mn < self.mn:
            self.mn = other.mn
        if other.mx > self.mx:
            self.mx = other.mx
        if self.n == 0:
            self.n, self.mean, self.m2 = other.n, other.mean, other.m2
            return
        n = self.n + other.n
        delta = other.mean - self.mean
        self.mean += delta * other.n / n
        self.m2 += other.m2 + delta * delta * self.n * other.n / n
        self.n = n

    def stats(self) -> TensorStats:
        count = self.n + self.nan + self.inf
        if self.n == 0:
            return TensorStats(None, None, None, None, self.nan + self.inf, self.over, None, self.nan, count)
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


def block_moments(x: Any, count_overflow: bool) -> Moments:
    """Moments of one contiguous float32/float64 block; extra passes only when something is unusual."""
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
    n = x.size
    m.n, m.mn, m.mx = n, float(mn), float(mx)
    if count_overflow and max(-m.mn, m.mx) > FP16_MAX:
        m.over = int(np.count_nonzero(np.abs(x) > FP16_MAX))
    if x.dtype == np.float32 and max(-m.mn, m.mx) > 1e18:  # squares would overflow float32 accumulators
        x = x.astype(np.float64)
    total = float(x.sum(dtype=x.dtype))
    mean = total / n
    sumsq = float(np.dot(x, x))
    m2 = sumsq - total * mean
    if m2 < 1e-2 * sumsq:  # spread tiny next to the mean (norm weights near 1): E[x^2]-E[x]^2 cancels; centre first
        d = x - x.dtype.type(mean)
        m2 = float(np.dot(d, d)) - float(d.sum(dtype=d.dtype)) ** 2 / n
    m.mean, m.m2 = mean, max(m2, 0.0)
    return m


def moments_of_bytes(buf: memoryview | bytes, dtype: str) -> Moments:
    """Moments of a run of raw little-endian elements of a 16/32/64-bit float, in blocks of WIDEN_BLOCK bytes."""
    import numpy as np

    raw = np.frombuffer(buf, dtype=raw_numpy_dtype(dtype))
    over = dtype in OVERFLOW_DTYPES
    per = WIDEN_BLOCK // raw.itemsize
    total = Moments()
    for i in range(0, raw.size, per):
        total.merge(block_moments(widen_block(raw[i : i + per], dtype), over))
    return total


def moments_of_array(arr: Any, dtype: str) -> Moments:
    """Moments of raw elements already in memory (a strided view's block), any shape."""
    import numpy as np

    flat = np.ascontiguousarray(arr).reshape(-1)
    return moments_of_bytes(flat.data.cast("B"), dtype)
