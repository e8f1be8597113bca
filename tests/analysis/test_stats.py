"""One statistics implementation (analysis.stats) for the value scan and the TUI, sound where the
naive sum of squares is not: values far from zero with a small spread."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ckinspect.analysis.scan import scan_values
from ckinspect.analysis.stats import Moments, block_moments
from ckinspect.analysis.value_stats import tensor_value_stats
from ckinspect.formats import open_checkpoint
from ckinspect.io.safetensors_write import Entry, write_safetensors


def _naive_std(x: np.ndarray) -> float:
    """The TUI's old formula: float64 running sums of x and x^2, then E[x^2] - E[x]^2."""
    n = x.size
    total, total_sq = float(x.sum()), float(np.square(x).sum())
    mean = total / n
    return math.sqrt(max(0.0, (total_sq - n * mean**2) / (n - 1)))


def _file(tmp_path, values: np.ndarray):
    path = tmp_path / "offset.safetensors"
    dtype = str(values.dtype)
    write_safetensors(path, [Entry("w", dtype, values.shape, lambda: [values.tobytes()])])
    ckpt = open_checkpoint(path)
    return ckpt, next(t for t in ckpt.tensors if t.name == "w")


@pytest.mark.parametrize(
    ("dtype", "offset", "rel"),
    [("float64", 1e8, 1e-9), ("float32", 1e4, 1e-4)],
)
def test_scan_and_tui_get_the_std_of_a_large_offset_with_a_small_spread(tmp_path, dtype, offset, rel):
    rng = np.random.default_rng(0)
    # 3 million values: several blocks of the scan and of the TUI, so the merge is exercised too
    values = (offset + rng.normal(0.0, 1e-2, 3_000_000)).astype(dtype)
    exact = values.astype(np.float64)
    want_std, want_mean = float(np.std(exact, ddof=1)), float(exact.mean())
    if dtype == "float64":
        assert abs(_naive_std(exact) - want_std) > 10 * want_std  # what the TUI printed before: off by 100x
    ckpt, tensor = _file(tmp_path, values)

    scanned = scan_values(ckpt).stats["w"]
    shown = tensor_value_stats(ckpt, tensor)

    for got in (scanned.std, shown.std):
        assert got == pytest.approx(want_std, rel=rel)
    for got in (scanned.mean, shown.mean):
        assert abs(got - want_mean) < 1e-3 * want_std  # the mean is off by far less than the spread
    assert (scanned.min, scanned.max) == (shown.minimum, shown.maximum) == (float(exact.min()), float(exact.max()))
    assert scanned.count == shown.count == values.size


def test_moments_merged_in_any_order_agree_with_one_pass():
    rng = np.random.default_rng(1)
    x = 5e6 + rng.normal(0.0, 3e-3, 100_000)
    parts = np.array_split(x, 7)
    forward, backward = Moments(), Moments()
    for p in parts:
        forward.merge(block_moments(p, count_overflow=False))
    for p in reversed(parts):
        backward.merge(block_moments(p, count_overflow=False))
    want = float(np.std(x, ddof=1))
    assert forward.stats().std == pytest.approx(want, rel=1e-9)
    assert backward.stats().std == pytest.approx(want, rel=1e-9)
    assert forward.n == backward.n == x.size


def test_non_finite_values_and_fp16_overflow_are_counted_and_left_out_of_the_moments():
    x = np.array([1.0, 2.0, np.nan, np.inf, -np.inf, 70000.0, 3.0], dtype=np.float32)
    s = block_moments(x, count_overflow=True).stats()
    assert (s.nonfinite, s.nan, s.fp16_overflow, s.count) == (3, 1, 1, 7)
    finite = np.array([1.0, 2.0, 70000.0, 3.0])
    assert (s.min, s.max, s.max_abs) == (1.0, 70000.0, 70000.0)
    assert s.mean == pytest.approx(finite.mean()) and s.std == pytest.approx(np.std(finite, ddof=1))


def _exact(x: np.ndarray) -> tuple[float, float]:
    """mean and std (ddof=1) to the last bit: math.fsum, two passes."""
    e = x.astype(np.float64)
    mean = math.fsum(e) / e.size
    mean += math.fsum(e - mean) / e.size
    return mean, math.sqrt(math.fsum((e - mean) ** 2) / (e.size - 1))


_N = 1_200_000  # several of the scan's blocks
_rng = np.random.default_rng(5)
PRECISION_CASES = {
    "normal": _rng.standard_normal(_N).astype(np.float32),
    "uniform": _rng.random(_N).astype(np.float32),
    "norm weights near 1": (1.0 + 1e-3 * _rng.standard_normal(_N)).astype(np.float32),
    "1e4 + 1e-2 noise": (1e4 + 1e-2 * _rng.standard_normal(_N)).astype(np.float32),
    "exp_avg_sq": (np.abs(_rng.standard_normal(_N)) * 1e-6).astype(np.float32),
    "constant": np.full(_N, 0.1, np.float32),
    "alternating +-1000": (np.where(np.arange(_N) % 2, 1e3, -1e3) + _rng.standard_normal(_N)).astype(np.float32),
    "log-uniform magnitudes": (
        np.exp(_rng.uniform(np.log(1e-20), np.log(6e4), _N)) * _rng.choice([-1.0, 1.0], _N)
    ).astype(np.float32),
    "sorted": np.sort(_rng.standard_normal(_N)).astype(np.float32),
    "1e8 + noise, float64": 1e8 + 1e-2 * _rng.standard_normal(_N),
}


@pytest.mark.parametrize("name", list(PRECISION_CASES))
def test_the_scans_mean_and_std_agree_with_exact_float64_on_random_and_adversarial_data(tmp_path, name):
    # measured with the per-row sums (3M values of each): std within 1.8e-8 relative, mean within 1e-9 std
    # or one ulp; the whole-block float32 sums before were up to 3.3e-6 off in std and 1.9e-4 std in mean
    values = PRECISION_CASES[name]
    ckpt, _ = _file(tmp_path, values)
    s = scan_values(ckpt).stats["w"]
    mean, std = _exact(values)
    assert (s.min, s.max, s.count) == (float(values.min()), float(values.max()), values.size)
    if std == 0:
        assert s.std == 0 and s.mean == mean
        return
    assert abs(s.mean - mean) <= max(1e-8 * std, 2 * math.ulp(mean))  # at 1e8 a float64 ulp is 1.5e-8
    assert s.std == pytest.approx(std, rel=1e-7)
