"""The value scan's findings at the edges of its blocks, chunks and dtypes, with and without mean/std:
no finding may depend on where a value falls or on the fast path that min and max choose."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from ckinspect.analysis.scan import SCAN_BLOCK, scan_values
from ckinspect.io.blobs import DEFAULT_CHUNK
from ckinspect.io.values import WIDEN_ELEMENTS
from tests.helpers.raw_zip import View, flip_byte, simple_checkpoint, zip_checkpoint

pytestmark = pytest.mark.torchfree

BOTH = pytest.mark.parametrize("mean_std", [True, False], ids=["with-mean-std", "checks-only"])

# past one chunk, a last piece of more than one block, and a last block of a few values
LONG = (DEFAULT_CHUNK + SCAN_BLOCK) // 4 + 7


def scan(ckpt, mean_std):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a NaN pattern must be counted, never printed as a RuntimeWarning
        return scan_values(ckpt, mean_std=mean_std)


def finite_reference(x: np.ndarray) -> tuple[float, float, float, float]:
    with np.errstate(invalid="ignore"):  # signalling NaN patterns
        e = x.astype(np.float64)
    e = e[np.isfinite(e)]
    mean = math.fsum(e) / e.size
    return float(e.min()), float(e.max()), mean, math.sqrt(math.fsum((e - mean) ** 2) / (e.size - 1))


@BOTH
def test_nan_in_the_last_value_of_the_last_block_and_minus_inf_in_the_first(tmp_path, mean_std):
    rng = np.random.default_rng(0)
    last = rng.standard_normal(LONG).astype(np.float32)
    last[-1] = np.nan
    first = rng.standard_normal(LONG).astype(np.float32)
    first[0] = -np.inf
    result = scan(simple_checkpoint(tmp_path / "e.pt", {"last": last, "first": first}), mean_std)
    assert [(f.code, f.tensor) for f in result.findings] == [("NONFINITE", "last"), ("NONFINITE", "first")]
    assert f"1 NaN and 0 Inf among {LONG:,} values" in result.findings[0].message
    assert f"0 NaN and 1 Inf among {LONG:,} values" in result.findings[1].message
    for name, x in (("last", last), ("first", first)):
        s = result.stats[name]
        lo, hi, mean, std = finite_reference(x)
        assert (s.count, s.nonfinite) == (LONG, 1)
        if mean_std:
            assert (s.min, s.max) == (lo, hi)
            assert s.mean == pytest.approx(mean, abs=1e-9 * std) and s.std == pytest.approx(std, rel=1e-7)
        else:
            assert (s.mean, s.std) == (None, None)


@BOTH
def test_subnormals_are_values_like_any_other(tmp_path, mean_std):
    x = np.arange(1, 5001, dtype=np.float32) * np.float32(1e-45)  # every one a float32 subnormal
    x[::7] *= -1
    result = scan(simple_checkpoint(tmp_path / "s.pt", {"w": x}), mean_std)
    assert result.findings == []
    s = result.stats["w"]
    lo, hi, mean, std = finite_reference(x)
    assert (s.nonfinite, s.fp16_overflow, s.count) == (0, 0, x.size)
    if mean_std:
        assert (s.min, s.max) == (lo, hi)
        assert s.mean == pytest.approx(mean, rel=1e-6) and s.std == pytest.approx(std, rel=1e-6)


@BOTH
def test_bf16_nan_payloads_and_infinities_past_the_first_widened_block(tmp_path, mean_std):
    rng = np.random.default_rng(1)
    bits = (rng.standard_normal(3 * WIDEN_ELEMENTS + 5).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    specials = {
        0x7F81: "signalling NaN",
        0xFFC1: "negative quiet NaN with a payload",
        0x7FFF: "NaN, all payload bits",
        0x7F80: "+inf",
        0xFF80: "-inf",
    }
    where = [WIDEN_ELEMENTS + 3, 2 * WIDEN_ELEMENTS, 2 * WIDEN_ELEMENTS + 1, bits.size - 2, bits.size - 1]
    bits[where] = list(specials)
    bits[10] = 0x0001  # the smallest bf16 subnormal: a value, not a finding
    result = scan(simple_checkpoint(tmp_path / "b.pt", {"w": bits}, dtypes={"w": "bfloat16"}), mean_std)
    [finding] = result.findings
    assert finding.code == "NONFINITE" and f"3 NaN and 2 Inf among {bits.size:,} values" in finding.message
    values = (bits.astype(np.uint32) << 16).view(np.float32)
    lo, hi, mean, std = finite_reference(values)
    s = result.stats["w"]
    assert (s.nan, s.nonfinite, s.count) == (3, 5, bits.size)
    if mean_std:
        assert (s.min, s.max) == (lo, hi)
        assert s.mean == pytest.approx(mean, abs=1e-9 * std) and s.std == pytest.approx(std, rel=1e-7)


@BOTH
def test_fp16_storages_count_non_finite_values_and_never_overflow_their_own_range(tmp_path, mean_std):
    rng = np.random.default_rng(2)
    half = (rng.standard_normal(WIDEN_ELEMENTS + 100) * 100).astype(np.float16)
    half[[5, WIDEN_ELEMENTS + 1]] = [np.float16(65504), np.float16(-65504)]  # float16's own bounds
    half[7] = np.float16(2.0**-24)  # its smallest subnormal
    half[-1], half[-2] = np.float16(np.inf), np.float16(np.nan)
    result = scan(simple_checkpoint(tmp_path / "h.pt", {"h": half}), mean_std)
    [finding] = result.findings  # NONFINITE only: FP16_OVERFLOW is about saving wider values in half precision
    assert finding.code == "NONFINITE" and f"1 NaN and 1 Inf among {half.size:,} values" in finding.message
    s = result.stats["h"]
    lo, hi, mean, std = finite_reference(half)
    assert s.fp16_overflow == 0
    if mean_std:
        assert (s.min, s.max) == (lo, hi) == (-65504.0, 65504.0)
        assert s.mean == pytest.approx(mean, abs=1e-9 * std) and s.std == pytest.approx(std, rel=1e-7)


@BOTH
def test_fp32_just_past_fp16s_range_and_far_past_it(tmp_path, mean_std):
    x = np.zeros(LONG, np.float32)
    x[-1] = 65504.0  # the largest float16: no finding
    y = np.zeros(LONG, np.float32)
    y[-1], y[3] = 65520.0, -3e38  # 65520 rounds to inf in float16; -3e38 squares past float32
    z = np.zeros(LONG, np.float32)
    z[-1] = np.nextafter(np.float32(65504), np.float32(np.inf))  # the first float32 past 65504: its square too
    result = scan(simple_checkpoint(tmp_path / "o.pt", {"x": x, "y": y, "z": z}), mean_std)
    assert [(f.code, f.tensor) for f in result.findings] == [("FP16_OVERFLOW", "y"), ("FP16_OVERFLOW", "z")]
    assert f"2 of {LONG:,} values" in result.findings[0].message and "max |x| 3e+38" in result.findings[0].message
    assert f"1 of {LONG:,} values" in result.findings[1].message and "max |x| 65504" in result.findings[1].message
    assert result.stats["y"].max_abs == float(np.float32(3e38))
    if mean_std:
        assert math.isfinite(result.stats["y"].std)
        assert result.stats["y"].std == pytest.approx(finite_reference(y)[3], rel=1e-9)


@BOTH
def test_bf16_just_below_and_past_fp16s_range_either_sign(tmp_path, mean_std):
    below = np.zeros(3 * WIDEN_ELEMENTS, np.uint16)
    below[-1], below[5] = 0x477F, 0xC77F  # +-65280, the largest bfloat16 magnitude float16 can hold
    past = below.copy()
    past[-2] = 0xC780  # -65536
    result = scan(
        simple_checkpoint(
            tmp_path / "b.pt", {"below": below, "past": past}, dtypes=dict.fromkeys(["below", "past"], "bfloat16")
        ),
        mean_std,
    )
    assert [(f.code, f.tensor) for f in result.findings] == [("FP16_OVERFLOW", "past")]
    assert f"1 of {past.size:,} values" in result.findings[0].message
    assert result.stats["past"].max_abs == 65536.0 and result.stats["below"].fp16_overflow == 0
    if mean_std:
        assert (result.stats["below"].min, result.stats["below"].max) == (-65280.0, 65280.0)


@BOTH
def test_a_crc_mismatch_in_the_last_chunk_outside_every_view_is_corrupt(tmp_path, mean_std):
    rng = np.random.default_rng(3)
    storage = rng.standard_normal(LONG).astype(np.float32)
    views = {"head": View("0", "float32", (1000,))}  # the tensor uses the first 4000 bytes of a 8+ MiB storage
    path = tmp_path / "c.pt"
    ckpt = zip_checkpoint(path, {"0": storage}, views)
    assert scan(ckpt, mean_std).findings == []
    info = ckpt.storages["0"]
    flip_byte(path, info.offset + info.nbytes - 1)  # the very last byte of the storage
    result = scan(ckpt, mean_std)
    [finding] = result.findings
    assert finding.code == "CORRUPT" and "CRC mismatch" in finding.message and finding.tensor == "head"
    assert result.crc_checked == 1 and result.bytes_scanned == info.nbytes


def test_checks_only_finds_exactly_what_the_full_scan_finds(tmp_path):
    rng = np.random.default_rng(4)
    arrays = {f"layers.{i}.w": rng.standard_normal(LONG // 4).astype(np.float32) for i in range(4)}
    arrays["layers.1.w"][-1] = np.nan
    arrays["layers.2.w"][100] = 7e4
    arrays["layers.3.w"][:] = 1.0 + 1e-3 * arrays["layers.3.w"]
    ckpt = simple_checkpoint(tmp_path / "m.pt", arrays)
    full, checks = scan(ckpt, True), scan(ckpt, False)
    assert [f.to_json() for f in full.findings] == [f.to_json() for f in checks.findings]
    assert [f.code for f in full.findings] == ["NONFINITE", "FP16_OVERFLOW"]
    for name in arrays:
        a, b = full.stats[name], checks.stats[name]
        assert (a.nonfinite, a.nan, a.fp16_overflow, a.count) == (b.nonfinite, b.nan, b.fp16_overflow, b.count)
        assert b.min is None and b.max is None and b.mean is None and b.std is None and a.std is not None
    assert checks.stats["layers.2.w"].max_abs == full.stats["layers.2.w"].max_abs == 7e4
