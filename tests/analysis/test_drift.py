"""Drift: fp16/bf16 round trips of the weights computed without torch agree with torch's own casts."""

import numpy as np
import pytest
import torch

from ckinspect.analysis.drift import logit_drift, logit_drift_reason, to_bf16, weight_drift
from tests.helpers.raw_zip import simple_checkpoint


def test_round_trip_errors_match_torch_casts(tmp_path):
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((200, 100)) * 0.02).astype(np.float32)
    w[0, :3] = [1e5, 1e-9, 3.4e38]  # fp16 overflow, fp16 underflow, bf16 overflow
    [d] = weight_drift(simple_checkpoint(tmp_path / "w.pt", {"w": w}))
    ref = torch.from_numpy(w)
    for got, dtype in ((d.fp16, torch.float16), (d.bf16, torch.bfloat16)):
        back = ref.to(dtype).float()
        finite = torch.isfinite(back)
        err = (back - ref).abs()[finite]
        assert got.max_abs == err.max().item()
        assert got.overflow == int((~finite).sum())
        assert got.underflow == int(((back == 0) & (ref != 0)).sum())
        assert got.max_rel == pytest.approx((err / ref.abs()[finite]).max().item(), rel=1e-6)
    assert (d.fp16.overflow, d.fp16.underflow, d.bf16.overflow) == (2, 1, 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_round_trip_counts_with_zeros_and_non_finite_values_match_torch(dtype):
    from ckinspect.analysis.drift import block_drift

    x = (np.random.default_rng(2).standard_normal(10_000) * 0.02).astype(dtype)
    x[::7], x[::11], x[::13], x[::17] = 0.0, 1e-9, 7e4, -1e6  # zeros, fp16 underflow, fp16 overflow
    x[:5] = [np.nan, np.inf, -np.inf, -0.0, 5e-39]
    ref = torch.from_numpy(x)
    finite = torch.isfinite(ref)
    for got, narrow in zip(block_drift(x), (torch.float16, torch.bfloat16), strict=True):
        back = ref.to(narrow).to(ref.dtype)
        kept = finite & torch.isfinite(back)
        err = (back - ref).abs()[kept]
        assert got.overflow == int((finite & ~torch.isfinite(back)).sum())
        assert got.changed == int((err != 0).sum())
        assert got.underflow == int(((back == 0) & (ref != 0))[kept].sum())
        assert got.max_abs == err.max().item()
        nonzero = ref[kept] != 0
        assert got.max_rel == pytest.approx((err[nonzero] / ref[kept][nonzero].abs()).max().item(), rel=1e-12)


def test_bf16_rounding_is_torchs_round_to_nearest_even():
    x = np.random.default_rng(1).standard_normal(100_000).astype(np.float32) * 1000
    x[:4] = [np.nan, np.inf, -0.0, 1.00390625]  # a tie: rounds to even
    assert np.array_equal(to_bf16(x), torch.from_numpy(x).bfloat16().float().numpy(), equal_nan=True)


def test_only_model_tensors_and_half_sources(tmp_path):
    arrays = {
        "model.w": np.linspace(-1, 1, 1000, dtype=np.float32),
        "model.h": np.linspace(-1, 1, 100).astype(np.float16),
        "optimizer.state.0.exp_avg": np.ones(10, np.float32),
        "model.idx": np.arange(4),
    }
    drifts = {d.name: d for d in weight_drift(simple_checkpoint(tmp_path / "r.pt", arrays))}
    assert set(drifts) == {"model.w", "model.h"}
    assert drifts["model.h"].fp16.max_abs == 0.0 and drifts["model.h"].bf16.max_abs > 0  # fp16 values lose bits in bf16


def test_logit_drift_is_skipped_cleanly_for_an_unknown_model(tmp_path):
    ckpt = simple_checkpoint(tmp_path / "w.pt", {"w": np.ones(3, np.float32)})
    assert logit_drift(ckpt) is None and "unknown" in logit_drift_reason(ckpt)


def test_logit_drift_matches_the_trainers_verify_figure(samples, open_ckpt):
    import torch

    from ckinspect.analysis.drift import logit_drift
    from trainer import experiment

    ckpt = open_ckpt(samples / "straight-60" / "tiny_resume.pth")
    ours = logit_drift(ckpt)
    resume = torch.load(samples / "straight-60" / "tiny_resume.pth", weights_only=True)
    fp16 = torch.load(samples / "straight-60" / "tiny.pth", weights_only=True)
    verify = experiment.logit_drift(resume["model"], resume["config"], other_state=fp16)  # what `trainer verify` prints
    assert ours["fp16"]["max_abs"] == verify["max_abs"] and ours["fp16"]["mean_abs"] == verify["mean_abs"]
    assert ours["fp16"]["top1_agreement"] == verify["top1_agreement"]
    assert 0 < ours["fp16"]["max_abs"] < ours["bf16"]["max_abs"]  # bf16 keeps fewer mantissa bits
    weights_only = logit_drift(open_ckpt(samples / "straight-60" / "tiny.pth"))
    assert (
        weights_only is not None and weights_only["fp16"]["max_abs"] == 0.0 and weights_only["stored_as"] == ["float16"]
    )


@pytest.mark.parametrize("whole", [False, True])
def test_logit_drift_reports_each_block_as_it_has_run(samples, open_ckpt, whole):
    """progress(done, total): every block (block by block: the embeddings, each layer, the head) or every
    format (whole model), in order, ending at the total; the figures are those of a run without a callback."""
    from ckinspect.analysis.drift import logit_drift_or_why

    ckpt = open_ckpt(samples / "straight-60" / "tiny_resume.pth")
    calls: list[tuple[int, int]] = []
    with_progress, _ = logit_drift_or_why(ckpt, whole=whole, progress=lambda done, total: calls.append((done, total)))
    without, _ = logit_drift_or_why(ckpt, whole=whole)
    assert with_progress is not None and with_progress == without
    if whole:
        assert calls == [(1, 3), (2, 3), (3, 3)]  # the reference, fp16, bf16
    else:
        blocks = with_progress["blocks"]
        assert blocks == ckpt.metadata["config"]["n_layers"] + 2
        assert calls == [(done, blocks) for done in range(blocks + 1)]
