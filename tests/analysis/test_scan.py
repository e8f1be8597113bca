"""The value scan: CRC of every stored byte, NaN/Inf and fp16-range checks, stats that match torch's."""

import itertools
import math

import numpy as np
import pytest
import torch

from ckinspect.analysis.scan import scan_values
from tests.helpers.raw_zip import View, flip_byte, saved_checkpoint, simple_checkpoint, to_bf16_bits, zip_checkpoint


def codes(result):
    return [f.code for f in result.findings]


def test_a_flipped_byte_in_one_storage_is_corrupt_naming_that_tensor(tmp_path):
    torch.manual_seed(0)
    tensors = {
        "model.embed.weight": torch.randn(64, 32),
        "model.head.weight": torch.randn(16, 32),
        "step": torch.tensor(7),
    }
    path = tmp_path / "ckpt.pt"
    ckpt = saved_checkpoint(path, tensors)
    assert codes(scan_values(ckpt)) == []
    head = ckpt.tensor("model.head.weight")
    storage = ckpt.storages[head.storage_key]
    flip_byte(path, storage.offset + 100)
    assert torch.load(path, weights_only=True)["model.head.weight"].shape == (16, 32)  # torch does not notice
    result = scan_values(ckpt)
    corrupt = [f for f in result.findings if f.code == "CORRUPT"]
    assert len(corrupt) == 1
    assert corrupt[0].tensor == "model.head.weight" and "CRC mismatch" in corrupt[0].message
    assert "model.embed.weight" not in corrupt[0].message
    assert result.crc_checked == 3


def test_nan_and_inf_are_nonfinite_with_counts(tmp_path):
    x = np.zeros(1000, np.float32)
    x[[3, 5, 7]] = np.nan
    x[9] = -np.inf
    result = scan_values(simple_checkpoint(tmp_path / "c.pt", {"w": x, "ok": np.ones(4, np.float32)}))
    [finding] = result.findings
    assert finding.code == "NONFINITE" and finding.tensor == "w" and finding.severity == "error"
    assert "3 NaN and 1 Inf" in finding.message
    s = result.stats["w"]
    assert (s.nonfinite, s.nan, s.count, s.min, s.max) == (4, 3, 1000, 0.0, 0.0)


def test_values_beyond_fp16_range_warn_for_fp32_but_not_for_fp16_tensors(tmp_path):
    x = np.full(100, 0.5, np.float32)
    x[10], x[11] = 1e5, -7e4
    result = scan_values(simple_checkpoint(tmp_path / "c.pt", {"w": x, "h": np.full(4, 6e4, np.float16)}))
    [finding] = result.findings
    assert finding.code == "FP16_OVERFLOW" and finding.tensor == "w" and finding.severity == "warning"
    assert "2 of 100" in finding.message and "100000" in finding.message
    assert result.stats["w"].max_abs == 1e5 and result.stats["w"].fp16_overflow == 2


def test_bf16_stats_match_torch(tmp_path):
    torch.manual_seed(1)
    t = (torch.randn(257, 129) * 3 + 0.5).bfloat16()
    bits = t.view(torch.int16).numpy().view(np.uint16)
    result = scan_values(simple_checkpoint(tmp_path / "b.pt", {"w": bits}, dtypes={"w": "bfloat16"}))
    s, ref = result.stats["w"], t.float()
    assert s.min == ref.min().item() and s.max == ref.max().item()
    assert s.mean == pytest.approx(ref.double().mean().item(), rel=1e-6)
    assert s.std == pytest.approx(ref.double().std().item(), rel=1e-6)
    assert to_bf16_bits(ref.numpy()).tobytes() == bits.tobytes()


def test_fp16_and_fp64_and_big_multichunk_tensors(tmp_path):
    rng = np.random.default_rng(0)
    big = rng.standard_normal(3_000_000).astype(np.float32) + 2.0  # > one 8 MiB chunk, mean far from 0
    half = rng.standard_normal(5000).astype(np.float16)
    double = rng.standard_normal(5000) * 1e6
    result = scan_values(simple_checkpoint(tmp_path / "m.pt", {"big": big, "half": half, "double": double}))
    for name, arr in (("big", big), ("half", half), ("double", double)):
        s, ref = result.stats[name], arr.astype(np.float64)
        assert (s.min, s.max) == (ref.min(), ref.max())
        assert s.mean == pytest.approx(ref.mean(), rel=1e-5, abs=1e-6)
        assert s.std == pytest.approx(ref.std(ddof=1), rel=1e-5)
    assert codes(result) == ["FP16_OVERFLOW"] and result.findings[0].tensor == "double"
    assert result.bytes_scanned == big.nbytes + half.nbytes + double.nbytes


def test_non_contiguous_views_and_storage_offsets(tmp_path):
    rng = np.random.default_rng(2)
    base = rng.standard_normal((40, 30)).astype(np.float32)
    base[0, 0] = np.nan  # outside every view below except the full one
    views = {
        "full": View("0", "float32", (40, 30)),
        "t": View("0", "float32", (30, 39), (1, 30), offset=30),  # base[1:].T
        "cols": View("0", "float32", (40, 10), (30, 3), offset=1),  # base[:, 1::3]
        "row5": View("0", "float32", (30,), offset=150),  # base[5]
    }
    ckpt = zip_checkpoint(tmp_path / "v.pt", {"0": base}, views)
    result = scan_values(ckpt)
    for name, ref in (("t", base[1:].T), ("cols", base[:, 1::3]), ("row5", base[5])):
        s = result.stats[name]
        assert (s.min, s.max, s.nonfinite) == (ref.min(), ref.max(), 0), name
        assert s.mean == pytest.approx(ref.astype(np.float64).mean(), rel=1e-6)
    assert [f.tensor for f in result.findings] == ["full"]


def test_tied_names_share_stats_and_progress_reaches_total(tmp_path):
    x = np.arange(1000, dtype=np.float32)
    ckpt = zip_checkpoint(
        tmp_path / "t.pt", {"0": x}, {"emb": View("0", "float32", (1000,)), "out": View("0", "float32", (1000,))}
    )
    calls = []
    result = scan_values(ckpt, progress=lambda done, total: calls.append((done, total)))
    assert result.stats["emb"] == result.stats["out"] and result.stats["emb"].max == 999.0
    assert calls[0][0] == 0 and calls[-1][0] == calls[-1][1] == 4000
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(calls))


def test_storage_cut_short_is_corrupt(tmp_path):
    ckpt = simple_checkpoint(tmp_path / "c.pt", {"w": np.ones(1000, np.float32)})
    data = (tmp_path / "c.pt").read_bytes()
    storage = ckpt.storages["0"]
    (tmp_path / "c.pt").write_bytes(data[: storage.offset + 100])
    [finding] = scan_values(ckpt).findings
    assert finding.code == "CORRUPT" and finding.tensor == "w" and "cut short" in finding.message


def test_single_thread_gives_the_same_answer(tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    arrays = {f"w{i}": rng.standard_normal(100_000 * (i + 1)).astype(np.float32) for i in range(6)}
    ckpt = simple_checkpoint(tmp_path / "m.pt", arrays)
    two = scan_values(ckpt)
    monkeypatch.setenv("CKINSPECT_THREADS", "1")
    one = scan_values(ckpt)
    for name in arrays:
        assert one.stats[name].min == two.stats[name].min and math.isclose(
            one.stats[name].std, two.stats[name].std, rel_tol=1e-9
        )


def test_huge_finite_values_do_not_overflow_the_std(tmp_path):
    x = np.array([3e38, -3e38, 1.0, 2.0], np.float32)
    s = scan_values(simple_checkpoint(tmp_path / "h.pt", {"w": x})).stats["w"]
    assert s.nonfinite == 0 and math.isfinite(s.std) and s.std == pytest.approx(np.std(x.astype(np.float64), ddof=1))


def test_a_scan_of_a_few_kb_runs_on_the_calling_thread_and_a_large_one_on_the_pool(tmp_path, monkeypatch):
    """A pool started for each of a ZeRO-3 tag's 1,024 tiny rank files cost more than the scanning."""
    from ckinspect.analysis import scan as scan_module

    started = []
    real = scan_module.ThreadPoolExecutor

    def pool(*args, **kwargs):
        started.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(scan_module, "ThreadPoolExecutor", pool)
    monkeypatch.setattr(scan_module, "worker_count", lambda: 2)
    small = {"a": np.array([1.0, np.nan], np.float32), "b": np.ones(300, np.float32)}
    found = scan_values(simple_checkpoint(tmp_path / "s.pt", small)).findings
    assert [(f.code, f.tensor) for f in found] == [("NONFINITE", "a")] and started == []
    big = {f"w{i}": np.ones(scan_module.SCAN_WINDOW // 8, np.float32) for i in range(3)}  # two jobs of a window
    assert scan_values(simple_checkpoint(tmp_path / "b.pt", big)).findings == [] and started == [(2,)]
