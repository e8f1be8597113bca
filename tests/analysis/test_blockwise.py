"""Block-by-block logits: a weight rounded a chunk at a time is the weight rounded whole."""

from __future__ import annotations

import pytest
import torch

from ckinspect.analysis import blockwise
from ckinspect.analysis.blockwise import round_weight


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8_e4m3fn", "fp8_e5m2"])
def test_rounding_in_chunks_equals_rounding_the_whole_tensor(fmt, monkeypatch):
    monkeypatch.setattr(blockwise, "_ROUND_ELEMENTS", 1000)  # many chunks, the last one short
    ref = torch.randn(37, 101, generator=torch.Generator().manual_seed(0)) * 3
    ref[0, :3] = torch.tensor([7e4, 1e-9, -2e5])  # beyond fp16, below it, and the largest magnitude
    dtype = blockwise.torch_dtype(fmt)
    if fmt.startswith("fp8"):
        scale = ref.abs().max().item() / torch.finfo(dtype).max
        whole = ref.div(scale).to(dtype).float().mul_(scale)
    else:
        whole = ref.to(dtype).float()
    got = round_weight(ref, fmt)
    assert got.shape == ref.shape and got.dtype == torch.float32
    assert torch.equal(got, whole)
    assert torch.equal(round_weight(ref.t(), fmt), whole.t().contiguous())  # a strided view: the same values


def test_a_measured_run_keeps_only_the_reference_logits():
    run = blockwise.BlockRun(lambda name, ref, got: (name, float((ref - got).abs().max())))
    run.keep("batch", "fp32", torch.zeros(2, 3))
    run.keep("batch", "fp16", torch.ones(2, 3))
    assert set(run.logits["batch"]) == {"fp32"}
    assert run.measured == {"batch": {"fp16": ("batch", 1.0)}}
