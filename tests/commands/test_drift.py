"""`ckinspect drift --report` as a user runs it (through the CLI's `main`, in this process): the weight
drift of any file, and for the trainer's files the logit drift, or the reason it was skipped."""

import json
import re

import torch

from tests.conftest import REPO, run_cli


def test_drift_report(tmp_path):
    torch.manual_seed(0)
    torch.save({"tok.weight": torch.randn(40, 8), "norm.weight": torch.ones(8)}, tmp_path / "a.pt")
    proc = run_cli("drift", tmp_path / "a.pt", "--report", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    drift = json.loads(proc.stdout)["drift"]
    assert {w["name"] for w in drift["weights"]} == {"tok.weight", "norm.weight"}
    assert drift["logits"] is None and drift["logits_skipped"]
    text = run_cli("drift", tmp_path / "a.pt", "--report")
    assert text.returncode == 0 and "bf16" in text.stdout


# ---- damaged trainer checkpoints: the weight drift is still reported, the logit drift says why it was skipped

RESUME = "samples/straight-60/tiny_resume.pth"


def _drift_json(path):
    proc = run_cli("drift", path, "--report", "--format", "json")
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    return proc.returncode, json.loads(proc.stdout)["drift"]


def _load_sample():
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
    assert drift["logits_skipped"] == (
        f"the model cannot be built from these weights: the file has 1 weight(s) the model does not have: "
        f"'model.{name.replace('weight', 'weig*t')}'"
    )


def test_unreadable_weights_skip_the_logit_drift_and_exit_2(tmp_path):
    data = bytearray((REPO / RESUME).read_bytes())
    # the central directory says member data/0 is deflated, but its bytes are not a deflate stream (torch.load fails)
    entries = [m.start() for m in re.finditer(rb"PK\x01\x02", data)]
    entry = next(e for e in entries if data[e + 46 :].startswith(b"archive/data/0"))
    data[entry + 10 : entry + 12] = (8).to_bytes(2, "little")
    (tmp_path / "deflated.pth").write_bytes(data)
    code, drift = _drift_json(tmp_path / "deflated.pth")
    assert code == 2 and drift["logits"] is None
    assert [w["name"] for w in drift["weights"] if "error" in w]
    skipped = drift["logits_skipped"]
    assert re.match(r"1 weight tensor\(s\) cannot be read \(archive/data/0 in deflated.pth: bad deflate data", skipped)
