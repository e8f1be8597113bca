"""Drift: fp16/bf16 round trips of the weights computed without torch agree with torch's own casts."""

import numpy as np
import pytest
import torch

from ckinspect.analysis.drift import logit_drift, logit_drift_reason, to_bf16, weight_drift
from tests.scan.helpers import simple_checkpoint


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


# ---- damaged trainer checkpoints: the weight drift is still reported, the logit drift says why it was skipped

RESUME = "samples/straight-60/tiny_resume.pth"


def _drift_json(path):
    import json

    from tests.conftest import run_cli

    proc = run_cli("drift", path, "--report", "--format", "json")
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    return proc.returncode, json.loads(proc.stdout)["drift"]


def _load_sample():
    from tests.conftest import REPO

    return torch.load(REPO / RESUME, weights_only=True)


def test_nan_weights_give_null_logit_figures_not_invalid_json(tmp_path):
    ckpt = _load_sample()
    name = next(k for k, v in ckpt["model"].items() if v.is_floating_point() and v.dim() == 2)
    ckpt["model"][name][0, 0] = float("nan")
    torch.save(ckpt, tmp_path / "nan.pth")
    code, drift = _drift_json(tmp_path / "nan.pth")
    assert code == 0 and drift["logits"] is not None
    assert drift["logits"]["fp16"]["max_abs"] is None and drift["logits"]["fp16"]["mean_abs"] is None


def test_weights_the_model_refuses_skip_the_logit_drift_with_the_reason(tmp_path):
    ckpt = _load_sample()
    name = next(k for k in ckpt["model"] if k.endswith("weight"))
    ckpt["model"][name.replace("weight", "weig*t")] = ckpt["model"].pop(name)
    torch.save(ckpt, tmp_path / "renamed.pth")
    code, drift = _drift_json(tmp_path / "renamed.pth")
    assert code == 0 and drift["logits"] is None and drift["weights"]
    assert drift["logits_skipped"].startswith("the model cannot be built from these weights: Error(s) in loading")


def test_unreadable_weights_skip_the_logit_drift_and_exit_2(tmp_path):
    import re

    from tests.conftest import REPO

    data = bytearray((REPO / RESUME).read_bytes())
    # the central directory says member data/0 is deflated: its bytes can no longer be read in place
    entries = [m.start() for m in re.finditer(rb"PK\x01\x02", data)]
    entry = next(e for e in entries if data[e + 46 :].startswith(b"archive/data/0"))
    data[entry + 10 : entry + 12] = (8).to_bytes(2, "little")
    (tmp_path / "deflated.pth").write_bytes(data)
    code, drift = _drift_json(tmp_path / "deflated.pth")
    assert code == 2 and drift["logits"] is None
    assert [w["name"] for w in drift["weights"] if "error" in w]
    skipped = drift["logits_skipped"]
    assert re.match(r"1 weight tensor\(s\) cannot be read \(storage 0 .*has no raw byte offset", skipped)
