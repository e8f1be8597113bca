"""`python -m trainer verify`: the resume experiment.

A run of 60 steps straight against one stopped at 30 and resumed: every weight and optimizer tensor
must match exactly (max |Δ| = 0.0), in both batch orders. Then the same resume with one piece of
state missing (optimizer moments, data position, fp32 master weights) shows what each piece is
worth. Plus what the files cost and what fp16 weights do to the logits.

`logit_drift` and `eval_loss` are plain functions over (state_dict, config) so ckinspect can report
the same figures.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from trainer import checkpoint
from trainer.data import fixed_batch
from trainer.model import ModelConfig, build_model, lm_loss
from trainer.train import train

STEPS, STOP, NAME = 60, 30, "tiny"
DRIFT_BATCH = 8  # sequences in the fixed logit-drift batch
EVAL_BATCH = 16


def model_from(state: dict[str, torch.Tensor], config: ModelConfig | dict[str, Any]) -> torch.nn.Module:
    with torch.random.fork_rng(devices=[]):  # building initialises weights; leave the caller's RNG alone
        model = build_model(config)
    prefixes = ("module.", "_orig_mod.", "model.")
    known = model.state_dict().keys()
    clean = {}
    for name, tensor in state.items():
        for prefix in prefixes:
            if name.startswith(prefix) and name[len(prefix) :] in known:
                name = name[len(prefix) :]
        clean[name] = tensor.float()
    model.load_state_dict(clean)
    return model.eval()


@torch.no_grad()
def logit_drift(
    model_state: dict[str, torch.Tensor],
    config: ModelConfig | dict[str, Any],
    dtype: torch.dtype = torch.float16,
    seed: int = 0,
    other_state: dict[str, torch.Tensor] | None = None,
) -> dict[str, float]:
    """Logits of `model_state` against the same weights rounded to `dtype` (or against `other_state`).

    Both run in fp32 on the same fixed held-out batch (`fixed_batch(seed, 8, max_seq_len)`), so the
    figure isolates what storing the weights in `dtype` does. Returns max_abs and mean_abs |Δlogit|,
    top1_agreement (share of positions whose argmax agrees) and positions (how many were compared).
    """
    cfg = config if isinstance(config, ModelConfig) else ModelConfig.from_dict(config)
    if other_state is None:
        other_state = checkpoint.half_weights(model_state, dtype)
    inputs, _ = fixed_batch(seed, DRIFT_BATCH, cfg.max_seq_len)
    ref = model_from(model_state, cfg)(inputs)
    got = model_from(other_state, cfg)(inputs)
    delta = (ref - got).abs()
    agree = (ref.argmax(-1) == got.argmax(-1)).float()
    return {
        "max_abs": delta.max().item(),
        "mean_abs": delta.mean().item(),
        "top1_agreement": agree.mean().item(),
        "positions": agree.numel(),
    }


@torch.no_grad()
def eval_loss(model_state: dict[str, torch.Tensor], config: ModelConfig | dict[str, Any], seed: int = 0) -> float:
    """Cross-entropy on a fixed held-out batch: the 'final loss' the ablation rows compare."""
    cfg = config if isinstance(config, ModelConfig) else ModelConfig.from_dict(config)
    inputs, targets = fixed_batch(seed, EVAL_BATCH, cfg.max_seq_len)
    return lm_loss(model_from(model_state, cfg)(inputs), targets).item()


def max_abs_diff(a: dict[str, Any], b: dict[str, Any]) -> tuple[float, float]:
    """(max |Δ| over every weight, max |Δ| over every optimizer state tensor) of two resume files."""
    dw = max((a["model"][k].float() - b["model"][k].float()).abs().max().item() for k in a["model"])
    dopt = 0.0
    for pid, state in a["optimizer"]["state"].items():
        for key, tensor in state.items():
            other = b["optimizer"]["state"][pid][key]
            dopt = max(dopt, (tensor.float() - other.float()).abs().max().item())
    return dw, dopt


def _tensors(obj: Any, prefix: str = ""):
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _tensors(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{prefix}.{i}" if prefix else str(i))


def optimizer_share(resume: dict[str, Any]) -> float:
    """Optimizer bytes / all tensor bytes of a resume file, each storage counted once."""
    seen: dict[int, tuple[str, int]] = {}
    for name, tensor in _tensors(resume):
        storage = tensor.untyped_storage()
        seen.setdefault(storage.data_ptr(), (name.split(".")[0], storage.nbytes()))
    total = sum(n for _, n in seen.values())
    return sum(n for group, n in seen.values() if group == "optimizer") / total


def run_experiment(workdir: str | Path, log=None) -> dict[str, Any]:
    work = Path(workdir)
    started = time.perf_counter()
    q = dict(name=NAME, log=log)
    train(work / "straight", STEPS, **q)
    train(work / "stopped", STEPS, stop_after=STOP, **q)
    stopped = work / "stopped" / f"{NAME}_resume.pth"
    train(work / "resumed", STEPS, resume=stopped, **q)
    train(work / "fresh-optimizer", STEPS, resume=stopped, fresh_optimizer=True, **q)
    train(work / "rewound-data", STEPS, resume=stopped, rewind_data=True, **q)
    train(work / "from-fp16", STEPS, resume=stopped, weights_from=work / "stopped" / f"{NAME}.pth", **q)
    train(work / "epoch" / "straight", STEPS, order="epoch", **q)
    train(work / "epoch" / "stopped", STEPS, stop_after=STOP, order="epoch", **q)
    train(work / "epoch" / "resumed", STEPS, resume=work / "epoch" / "stopped" / f"{NAME}_resume.pth", **q)
    # the sharded save: a torch.distributed.checkpoint folder per save, resumed from the step-30 one
    train(work / "dcp", STEPS, stop_after=STOP, save_format="dcp", **q)
    train(work / "dcp", STEPS, resume=work / "dcp" / f"{NAME}_step{STOP:06d}", save_format="dcp", **q)
    train_seconds = time.perf_counter() - started

    def res(run: str) -> dict[str, Any]:
        if run == "dcp":
            return checkpoint.load(work / "dcp" / f"{NAME}_step{STEPS:06d}")
        return checkpoint.load(work / run / f"{NAME}_resume.pth")

    straight = res("straight")
    config = straight["config"]
    straight_loss = eval_loss(straight["model"], config)
    rows: list[dict[str, Any]] = []
    for run, label, reference in (
        ("resumed", "stop 30 + resume", straight),
        ("epoch/resumed", "stop 30 + resume (epoch order)", res("epoch/straight")),
        ("dcp", "stop 30 + resume (DCP sharded save)", straight),
        ("fresh-optimizer", "ablation: fresh optimizer", straight),
        ("rewound-data", "ablation: batch order rewound", straight),
        ("from-fp16", "ablation: resume from fp16 weights", straight),
    ):
        end = res(run)
        dw, dopt = max_abs_diff(reference, end)
        loss = eval_loss(end["model"], config)
        ref_loss = straight_loss if reference is straight else eval_loss(reference["model"], config)
        rows.append(
            {
                "run": run,
                "label": label,
                "max_abs_dw": dw,
                "max_abs_dopt": dopt,
                "final_loss": loss,
                "loss_gap": loss - ref_loss,
            }
        )

    fp32_path = work / "straight" / f"{NAME}_fp32.pth"
    checkpoint.save(straight["model"], fp32_path)
    sizes = {
        "fp16_weights": (work / "straight" / f"{NAME}.pth").stat().st_size,
        "fp32_weights": fp32_path.stat().st_size,
        "resume": (work / "straight" / f"{NAME}_resume.pth").stat().st_size,
    }
    fp16 = checkpoint.load(work / "straight" / f"{NAME}.pth")
    drift = logit_drift(straight["model"], config, other_state=fp16)
    exact = all(r["max_abs_dw"] == 0.0 and r["max_abs_dopt"] == 0.0 for r in rows[:3])
    ablations_away = all(r["max_abs_dw"] > 0.0 for r in rows[3:])
    return {
        "steps": STEPS,
        "stop": STOP,
        "order": "random",
        "seed": 0,
        "parameters": sum(t.numel() for t in {v.data_ptr(): v for v in straight["model"].values()}.values()),
        "straight_final_loss": straight_loss,
        "rows": rows,
        "file_bytes": sizes,
        "optimizer_share": optimizer_share(straight),
        "logit_drift": drift,
        "bit_exact": exact,
        "ablations_away": ablations_away,
        "ok": exact and ablations_away,
        "train_seconds": train_seconds,
    }


def _num(x: float) -> str:
    return "0.0" if x == 0.0 else f"{x:.3e}"


def render(result: dict[str, Any]) -> str:
    r = result
    lines = [
        f"resume experiment: {r['steps']} steps straight vs stopped at {r['stop']} and resumed "
        f"(tiny model, {r['parameters']:,} parameters, seed {r['seed']}, order {r['order']} unless noted)",
        "",
        f"{'run':<36} {'max|Δw|':>10} {'max|Δopt|':>10} {'final loss':>11} {'loss gap':>10}",
        f"{'straight 60':<36} {'-':>10} {'-':>10} {r['straight_final_loss']:>11.4f} {'-':>10}",
    ]
    for row in r["rows"]:
        gap = "0.0" if row["loss_gap"] == 0.0 else f"{row['loss_gap']:+.2e}"
        lines.append(
            f"{row['label']:<36} {_num(row['max_abs_dw']):>10} {_num(row['max_abs_dopt']):>10} "
            f"{row['final_loss']:>11.4f} {gap:>10}"
        )
    s = r["file_bytes"]
    d = r["logit_drift"]
    lines += [
        "",
        "final loss: cross-entropy of the end weights on a fixed held-out batch. The epoch-order row is",
        "compared with a straight 60-step epoch-order run. The DCP row saves each checkpoint as a",
        "torch.distributed.checkpoint folder and resumes from the step-30 one. max|Δopt| covers AdamW's",
        "step counters too: a fresh optimizer counts 30 steps where the straight run counts 60.",
        "",
        f"files: fp16 weights {s['fp16_weights']:,} B, fp32 weights {s['fp32_weights']:,} B "
        f"({s['fp32_weights'] / s['fp16_weights']:.2f}x), resume file {s['resume']:,} B "
        f"({s['resume'] / s['fp32_weights']:.2f}x the fp32 weights)",
        f"optimizer share of the resume file: {r['optimizer_share']:.1%} of its tensor bytes",
        f"logit drift, fp16 vs fp32 weights ({d['positions']} positions of a fixed held-out batch):",
        f"  max |Δ| {d['max_abs']:.3e}, mean |Δ| {d['mean_abs']:.3e}, top-1 agreement {d['top1_agreement']:.2%}",
        "",
        (
            "PASS: resumed runs are bit-identical; every ablation ends away from the straight run"
            if r["ok"]
            else "FAIL: "
            + ("resume is not bit-exact" if not r["bit_exact"] else "an ablation matched the straight run")
        ),
        f"(11 training runs in {r['train_seconds']:.1f} s)",
    ]
    return "\n".join(lines)


def main(as_json: bool = False) -> int:
    with tempfile.TemporaryDirectory(prefix="trainer-verify-") as work:
        result = run_experiment(work)
    print(json.dumps(result, indent=2) if as_json else render(result))
    return 0 if result["ok"] else 1
