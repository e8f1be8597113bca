"""What half precision does: weight round trips through fp16 and bf16, and (where the model is known) logits.

weight_drift(ckpt)  -> [TensorDrift]: per floating model tensor, the error of x -> fp16 -> x and
                       x -> bf16 -> x (max abs, max rel, values that overflow to inf, values that
                       underflow to zero). Streams bounded blocks; numpy only, no torch.
logit_drift(ckpt)   -> dict | None: for a bundled-trainer checkpoint (format "ckinspect-trainer/1",
                       with its model config), rebuild the model with torch and compare logits of the
                       fp32 weights against their fp16 and bf16 roundings on a fixed, seeded batch:
                       the same figure `python -m trainer verify` prints. None when not applicable;
                       `logit_drift_reason(ckpt)` says why.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckinspect.io.blobs import Blobs, UnreadableStorage
from ckinspect.io.values import decode, raw_blocks
from ckinspect.model import Checkpoint, TensorInfo
from ckinspect.vocab import TRAINER_FORMAT

DRIFT_DTYPES = ("float32", "float16", "bfloat16", "float64")
_BLOCK_ELEMENTS = 1 << 18


@dataclass
class RoundTrip:
    """Error of storing a tensor in a narrower float type and reading it back."""

    max_abs: float = 0.0
    max_rel: float = 0.0  # over non-zero values
    overflow: int = 0  # finite values that become inf
    underflow: int = 0  # non-zero values that become zero
    changed: int = 0  # values not exactly representable

    def merge(self, other: RoundTrip) -> None:
        self.max_abs = max(self.max_abs, other.max_abs)
        self.max_rel = max(self.max_rel, other.max_rel)
        self.overflow += other.overflow
        self.underflow += other.underflow
        self.changed += other.changed

    def to_json(self) -> dict[str, Any]:
        return {
            "max_abs": finite_or_none(self.max_abs),
            "max_rel": finite_or_none(self.max_rel),
            "overflow": self.overflow,
            "underflow": self.underflow,
            "changed": self.changed,
        }


@dataclass
class TensorDrift:
    name: str
    dtype: str
    numel: int
    fp16: RoundTrip = field(default_factory=RoundTrip)
    bf16: RoundTrip = field(default_factory=RoundTrip)
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "dtype": self.dtype,
            "numel": self.numel,
            "fp16": self.fp16.to_json(),
            "bf16": self.bf16.to_json(),
        }
        if self.error:
            out["error"] = self.error
        return out


def finite_or_none(x: float) -> float | None:
    """JSON has no inf/NaN: such a figure is reported as null."""
    return x if math.isfinite(x) else None


# ---------------------------------------------------------------- weight round trips (numpy)


def to_bf16(x32: Any) -> Any:
    """float32 -> nearest bfloat16 (ties to even), returned as float32; NaN stays NaN. As torch rounds."""
    import numpy as np

    u = x32.view(np.uint32)
    with np.errstate(over="ignore"):
        rounded = (u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) & np.uint32(0xFFFF0000)
    out = rounded.view(np.float32)
    nan = np.isnan(x32)
    if nan.any():
        out = np.where(nan, x32, out)
    return out


def _round_trip(x: Any, y: Any) -> RoundTrip:
    """Compare finite values x with their narrow-and-back y (same shape, float32/float64)."""
    import numpy as np

    rt = RoundTrip()
    finite = np.isfinite(x)
    all_finite = bool(finite.all())
    if not all_finite:
        x, y = x[finite], y[finite]
    if x.size == 0:
        return rt
    with np.errstate(over="ignore", invalid="ignore"):
        inf = np.isinf(y)
        rt.overflow = int(np.count_nonzero(inf))
        if rt.overflow:
            x, y = x[~inf], y[~inf]
        diff = np.abs(y.astype(np.float64) - x) if x.dtype == np.float64 else np.abs(y - x)
    rt.changed = int(np.count_nonzero(diff))
    if rt.changed == 0:
        return rt
    rt.underflow = int(np.count_nonzero((y == 0) & (x != 0)))
    rt.max_abs = float(diff.max())
    nonzero = x != 0
    if nonzero.any():
        rt.max_rel = float((diff[nonzero] / np.abs(x[nonzero])).max())
    return rt


def block_drift(x: Any) -> tuple[RoundTrip, RoundTrip]:
    """(fp16, bf16) round-trip errors of one block of float32 or float64 values."""
    import numpy as np

    with np.errstate(over="ignore"):
        y16 = x.astype(np.float16).astype(x.dtype)
    x32 = x if x.dtype == np.float32 else x.astype(np.float32)
    ybf = to_bf16(np.ascontiguousarray(x32)).astype(x.dtype)
    return _round_trip(x, y16), _round_trip(x, ybf)


def _values(blobs: Blobs, ckpt: Checkpoint, t: TensorInfo) -> Iterator[Any]:
    """float32 (float64 for fp64) blocks of a tensor, in any order (round-trip errors do not care)."""
    import numpy as np

    storage = ckpt.storages.get(t.storage_key)
    if storage is None:
        raise UnreadableStorage(f"storage {t.storage_key} is missing")
    wide = np.float64 if t.dtype == "float64" else np.float32
    yield from raw_blocks(
        blobs, storage, t, _BLOCK_ELEMENTS, logical=False, convert=lambda raw: decode(raw, t.dtype, wide)
    )


def model_tensors(ckpt: Checkpoint, tied_once: bool = True) -> list[TensorInfo]:
    """Floating tensors of the model group (a weights file's every float tensor); tied names once unless asked."""
    from ckinspect.analysis.diff import roles

    role = roles(ckpt)
    out, seen = [], set()
    for t in ckpt.tensors:
        if t.dtype not in DRIFT_DTYPES or role.get(t.name) != "model":
            continue
        key = (t.storage_key, t.storage_offset, t.shape, t.stride, t.dtype) if tied_once else t.name
        if key in seen:
            continue
        seen.add(key)
        out.append(t)
    return out


def weight_drift(ckpt: Checkpoint, progress: Callable[[int, int], None] | None = None) -> list[TensorDrift]:
    """fp16 and bf16 round-trip errors of every floating model tensor, in checkpoint order."""
    from ckinspect.analysis.scan import worker_count

    tensors = model_tensors(ckpt)
    total = sum(t.nbytes for t in tensors)
    done = 0

    with Blobs() as blobs:

        def one(t: TensorInfo) -> TensorDrift:
            d = TensorDrift(t.name, t.dtype, t.numel)
            try:
                for block in _values(blobs, ckpt, t):
                    f16, bf = block_drift(block)
                    d.fp16.merge(f16)
                    d.bf16.merge(bf)
            except UnreadableStorage as exc:
                d.error = str(exc)
            return d

        results = []
        with ThreadPoolExecutor(max(1, worker_count())) as pool:
            for t, d in zip(tensors, pool.map(one, tensors), strict=True):
                results.append(d)
                done += t.nbytes
                if progress:
                    progress(done, total)
    return results


def drift_summary(drifts: list[TensorDrift]) -> dict[str, Any]:
    """Totals over all tensors: worst errors, and how many values overflow or underflow per format."""
    out: dict[str, Any] = {"tensors": len(drifts), "values": sum(d.numel for d in drifts)}
    for fmt in ("fp16", "bf16"):
        trips = [getattr(d, fmt) for d in drifts]
        worst = max(drifts, key=lambda d: getattr(d, fmt).max_abs, default=None)
        out[fmt] = {
            "max_abs": finite_or_none(max((r.max_abs for r in trips), default=0.0)),
            "max_rel": finite_or_none(max((r.max_rel for r in trips), default=0.0)),
            "overflow": sum(r.overflow for r in trips),
            "underflow": sum(r.underflow for r in trips),
            "worst_tensor": worst.name if worst and getattr(worst, fmt).max_abs > 0 else None,
        }
    return out


# ---------------------------------------------------------------- logit drift (torch, lazily)


def trainer_config(ckpt: Checkpoint) -> dict[str, Any] | None:
    """The bundled trainer's model config, when the checkpoint is one of its resume files."""
    tree = ckpt.tree if isinstance(ckpt.tree, dict) else {}
    tag = tree.get("format") or ckpt.metadata.get("format")
    config = ckpt.metadata.get("config") if isinstance(ckpt.metadata.get("config"), dict) else tree.get("config")
    if not isinstance(config, dict):
        return None
    if tag != TRAINER_FORMAT and ckpt.layout != "trainer":
        return None
    return config


def _looks_like_trainer_weights(ckpt: Checkpoint) -> bool:
    """A weights-only file named like the bundled trainer's model (its tiny.pth): no config inside."""
    names = {t.name.removeprefix("model.") for t in ckpt.tensors}
    return "tok_embeddings.weight" in names and "layers.0.attn.wq.weight" in names


def _inferred_config(ckpt: Checkpoint) -> Any:
    """The trainer's default ModelConfig when a weights-only file has exactly its names and shapes (imports torch)."""
    from trainer.model import infer_config

    shapes = {t.name.removeprefix("model."): t for t in model_tensors(ckpt, tied_once=False)}  # TensorInfo has .shape
    return infer_config(shapes)


def logit_drift_reason(ckpt: Checkpoint) -> str | None:
    """Why logit drift cannot be measured for this checkpoint (None: it can)."""
    if trainer_config(ckpt) is not None:
        try:
            import trainer.experiment  # noqa: F401
        except ImportError as exc:
            return f"the bundled trainer cannot be imported ({exc})"
        return None
    if _looks_like_trainer_weights(ckpt):
        try:
            import trainer.experiment  # noqa: F401
            from trainer.model import infer_config  # noqa: F401
        except ImportError as exc:
            return f"weights of the bundled trainer's model, but the trainer cannot be imported ({exc})"
        if _inferred_config(ckpt) is None:
            return "named like the bundled trainer's model, but not its default shapes, and the file carries no config"
        return None
    folder = ckpt.path if ckpt.path.is_dir() else ckpt.path.parent
    if (folder / "config.json").is_file():
        try:
            import transformers  # noqa: F401
        except ImportError:
            return "a Hugging Face folder, but transformers is not installed"
        return None
    return f"the model is unknown: no {TRAINER_FORMAT} config in the checkpoint and no config.json beside it"


def _torch_state(ckpt: Checkpoint, tensors: list[TensorInfo]) -> dict[str, Any]:
    """torch tensors (CPU, as stored) of these tensors, read from the raw bytes: works for every format."""
    import numpy as np
    import torch

    from ckinspect.analysis.diff import value_blocks

    torch_dtypes = {name: getattr(torch, name) for name in DRIFT_DTYPES}
    state: dict[str, Any] = {}
    with Blobs() as blobs:
        for t in tensors:
            blocks = list(value_blocks(blobs, ckpt, t))
            raw = np.concatenate(blocks) if blocks else np.empty(0, dtype=np.uint8)
            tensor = torch.from_numpy(np.ascontiguousarray(raw))
            if t.dtype in torch_dtypes and tensor.dtype != torch_dtypes[t.dtype]:
                tensor = tensor.view(torch_dtypes[t.dtype])
            state[t.name] = tensor.reshape(t.shape)
    return state


def logit_drift_or_why(
    ckpt: Checkpoint, drifts: list[TensorDrift] | None = None
) -> tuple[dict[str, Any] | None, str | None]:
    """(the logit drift, None), or (None, why it was skipped): the model is unknown, some weights
    cannot be read (`drifts`: weight_drift's results, whose errors say which), or the model refuses
    the weights (a damaged state dict). The weight drift stands on its own either way."""
    reason = logit_drift_reason(ckpt)
    unreadable = [d for d in drifts or [] if d.error]
    if reason is None and unreadable:
        reason = f"{len(unreadable)} weight tensor(s) cannot be read ({unreadable[0].error})"
    if reason is not None:
        return None, reason
    try:
        return _measure_logit_drift(ckpt), None
    except UnreadableStorage as exc:
        return None, f"the weights cannot be read ({exc})"
    except (RuntimeError, ValueError, KeyError, TypeError) as exc:  # load_state_dict and friends
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return None, f"the model cannot be built from these weights: {first}"


def logit_drift(ckpt: Checkpoint, seed: int = 0) -> dict[str, Any] | None:
    """fp16-vs-fp32 and bf16-vs-fp32 logits (max and mean |Δlogit|, top-1 agreement) on a fixed batch.

    None when the model is unknown or its code is not importable (see logit_drift_reason).
    """
    if logit_drift_reason(ckpt) is not None:
        return None
    return _measure_logit_drift(ckpt, seed)


def _measure_logit_drift(ckpt: Checkpoint, seed: int = 0) -> dict[str, Any] | None:
    """logit_drift, once logit_drift_reason has said the model is known and importable."""
    config = trainer_config(ckpt)
    if config is None and _looks_like_trainer_weights(ckpt):
        config = _inferred_config(ckpt)
    if config is None:
        return _transformers_logit_drift(ckpt, seed)
    import torch

    from trainer.experiment import logit_drift as trainer_logit_drift

    tensors = model_tensors(ckpt, tied_once=False)  # every name: load_state_dict wants tied ones twice
    stored = sorted({t.dtype for t in tensors})
    state = {t_name.removeprefix("model."): tensor.float() for t_name, tensor in _torch_state(ckpt, tensors).items()}
    out: dict[str, Any] = {"model": "ckinspect-trainer", "seed": seed, "reference": "float32", "stored_as": stored}
    if stored != ["float32"]:
        out["note"] = (
            f"weights are stored as {', '.join(stored)}: the reference is those values in float32, "
            f"so rounding to a format they already fit in changes nothing"
        )
    for label, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        out[label] = trainer_logit_drift(state, config, dtype, seed)
    return out


def _transformers_logit_drift(ckpt: Checkpoint, seed: int) -> dict[str, Any] | None:
    """The same measurement for a Hugging Face causal LM folder (optional: needs transformers)."""
    import torch
    from transformers import AutoModelForCausalLM

    folder: Path = ckpt.path if ckpt.path.is_dir() else ckpt.path.parent
    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    vocab = int(getattr(model.config, "vocab_size", 256))
    gen = torch.Generator().manual_seed(seed)
    inputs = torch.randint(0, vocab, (4, 64), generator=gen)
    reference_state = {k: v.clone() for k, v in model.state_dict().items()}
    out: dict[str, Any] = {"model": type(model).__name__, "seed": seed, "reference": "float32"}
    with torch.no_grad():
        ref = model(inputs).logits.float()
        for label, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
            rounded = {k: v.to(dtype).float() if v.is_floating_point() else v for k, v in reference_state.items()}
            model.load_state_dict(rounded)
            got = model(inputs).logits.float()
            delta = (ref - got).abs()
            out[label] = {
                "max_abs": delta.max().item(),
                "mean_abs": delta.mean().item(),
                "top1_agreement": (ref.argmax(-1) == got.argmax(-1)).float().mean().item(),
                "positions": int(ref.shape[0] * ref.shape[1]),
            }
        model.load_state_dict(reference_state)
    return out
