"""What half precision does: weight round trips through fp16 and bf16, and (where the model is known) logits.

weight_drift(ckpt)  -> [TensorDrift]: per floating model tensor, the error of x -> fp16 -> x and
                       x -> bf16 -> x (max abs, max rel, values that overflow to inf, values that
                       underflow to zero). Streams bounded blocks; numpy only, no torch.
logit_drift(ckpt)   -> dict | None: where a registered model plugin can build the model (see
                       logit_models: the bundled trainer registers one, a Hugging Face folder is
                       built in), compare logits of the fp32 weights against their fp16 and bf16
                       roundings (fp8 when asked) on the plugin's fixed, seeded batch, and the
                       perplexity on a bundled text; block by block, so a model larger than memory
                       runs (see blockwise). For the trainer's files the same figure `python -m
                       trainer verify` prints. None when not applicable; `logit_drift_reason(ckpt)`
                       says why.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckinspect.io.blobs import Blobs, UnreadableStorage
from ckinspect.io.values import decode, raw_blocks
from ckinspect.model import Checkpoint, TensorInfo
from ckinspect.record import Record, field
from ckinspect.vocab import FP8_FORMATS, LOGIT_FORMATS, REFERENCE_FORMAT

if TYPE_CHECKING:
    from ckinspect.analysis.logit_models import LogitModel

DRIFT_DTYPES = ("float32", "float16", "bfloat16", "float64")
_BLOCK_ELEMENTS = 1 << 18
BUNDLED_TEXT = "drift_text.txt"  # beside this module; the perplexity is measured on it


class RoundTrip(Record):
    """Error of storing a tensor in a narrower float type and reading it back."""

    __hash__ = None  # type: ignore[assignment]  # changed after it is built

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


class TensorDrift(Record):
    __hash__ = None  # type: ignore[assignment]  # changed after it is built

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
    """Compare finite values x with their narrow-and-back y (same shape, float32/float64).

    One pass per figure over the block and no masked copies where the values are finite (they almost
    always are): a zero rounds to zero, so `underflow` is a difference of two zero counts, and a
    relative error is |Δ|/|x| with the 0/0 of a zero skipped by fmax."""
    import numpy as np

    rt = RoundTrip()
    if not np.isfinite(x).all():
        finite = np.isfinite(x)
        x, y = x[finite], y[finite]
    if x.size == 0:
        return rt
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        diff = np.abs(y.astype(np.float64) - x) if x.dtype == np.float64 else np.abs(y - x)
        rt.changed = int(np.count_nonzero(diff))
        if rt.changed == 0:
            return rt
        if np.isinf(diff.max()):  # finite values that the narrow type cannot hold
            inf = np.isinf(y)
            rt.overflow = int(np.count_nonzero(inf))
            rt.changed -= rt.overflow
            x, y, diff = x[~inf], y[~inf], diff[~inf]
            if x.size == 0 or rt.changed == 0:
                return rt
        rt.underflow = int(x.size - np.count_nonzero(y)) - int(x.size - np.count_nonzero(x))
        rt.max_abs = float(diff.max())
        rel = np.divide(diff, np.abs(x, out=np.empty_like(x)), out=diff)  # diff is not needed after this
        rt.max_rel = float(np.fmax.reduce(rel, initial=0.0))
    return rt


def block_drift(x: Any) -> tuple[RoundTrip, RoundTrip]:
    """(fp16, bf16) round-trip errors of one block of float32 or float64 values."""
    import numpy as np

    with np.errstate(over="ignore"):
        y16 = x.astype(np.float16).astype(x.dtype)
    x32 = x if x.dtype == np.float32 else x.astype(np.float32)
    ybf = to_bf16(np.ascontiguousarray(x32)).astype(x.dtype, copy=False)
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


def worst_first(entry: Mapping[str, Any]) -> tuple[float, ...]:
    """The one order "worst first" means (the drift report and the TUI's drift screen): values that become
    inf in fp16 first, then the largest relative rounding error in fp16, then in bf16. `entry` is a
    TensorDrift's JSON (`to_json()`)."""
    return (-entry["fp16"]["overflow"], -(entry["fp16"]["max_rel"] or 0.0), -(entry["bf16"]["max_rel"] or 0.0))


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


def logit_drift_reason(ckpt: Checkpoint) -> str | None:
    """Why logit drift cannot be measured for this checkpoint (None: it can)."""
    from ckinspect.analysis.logit_models import find_model

    return find_model(ckpt)[1]


def logit_drift_or_why(
    ckpt: Checkpoint,
    drifts: list[TensorDrift] | None = None,
    formats: tuple[str, ...] = LOGIT_FORMATS,
    whole: bool = False,
    seed: int = 0,
    config: dict[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[dict[str, Any] | None, str | None]:
    """(the logit drift, None), or (None, why it was skipped): the model is unknown, some weights
    cannot be read (`drifts`: weight_drift's results, whose errors say which), or the model refuses
    the weights (a damaged state dict). The weight drift stands on its own either way. `config`: the
    architecture of a state dict that carries none (`drift --config FILE`). `progress(blocks done,
    blocks)`: called on this thread as each block has run in every format (see blockwise.run_formats)."""
    from ckinspect.analysis.logit_models import find_model

    model, reason = find_model(ckpt, config)
    unreadable = [d for d in drifts or [] if d.error]
    if reason is None and unreadable:
        reason = f"{len(unreadable)} weight tensor(s) cannot be read ({unreadable[0].error})"
    if model is None or reason is not None:
        return None, reason
    try:
        return measure_logit_drift(ckpt, model, formats, whole, seed, progress), None
    except UnreadableStorage as exc:
        return None, f"the weights cannot be read ({exc})"
    except (MemoryError, RuntimeError, ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, MemoryError) or "can't allocate memory" in first:  # numpy's, and torch's allocator
            hint = "; without --whole-model it runs one block at a time" if whole else ""
            return None, f"not enough memory to run the model ({first}){hint}"
        return None, f"the model cannot be built from these weights: {first}"


def logit_drift(
    ckpt: Checkpoint, seed: int = 0, formats: tuple[str, ...] = LOGIT_FORMATS, whole: bool = False
) -> dict[str, Any] | None:
    """Logits of the float32 weights against each rounding (fp16 and bf16 unless `formats` says; see
    measure_logit_drift). None when no registered model plugin can build the model (see logit_drift_reason).
    """
    from ckinspect.analysis.logit_models import find_model

    model, _ = find_model(ckpt)
    return None if model is None else measure_logit_drift(ckpt, model, formats, whole, seed)


def bundled_text() -> str:
    """The short English text the perplexity is measured on (shipped with ckinspect)."""
    return (Path(__file__).with_name(BUNDLED_TEXT)).read_text(encoding="utf-8")


def measure_logit_drift(
    ckpt: Checkpoint,
    model: LogitModel,
    formats: tuple[str, ...] = LOGIT_FORMATS,
    whole: bool = False,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """The model's logits with its float32 weights against the same weights rounded to each format.

    On the model's fixed, seeded batch: max and mean |Δlogit|, top-1 agreement, KL(reference || rounded).
    On the bundled text, where the model's tokenizer (or byte vocabulary) can read it: the perplexity
    of each. Runs block by block (blockwise.run_formats), or the whole model at once with `whole`.
    """
    from ckinspect.analysis.blockwise import compare_logits, perplexity, run_formats

    batch, batch_how = model.batch(seed)
    text, text_how = model.text_tokens(bundled_text())
    inputs = {"batch": batch} if text is None else {"batch": batch, "text": text}
    weights = model_tensors(ckpt, tied_once=False)
    strict = getattr(model, "strict", False)  # every model tensor of the file must be a weight of the model

    def measure(name: str, reference: Any, got: Any) -> Any:
        return compare_logits(reference, got) if name == "batch" else perplexity(got, text)

    must_use = tuple(t.name for t in weights) if strict else ()
    run = run_formats(ckpt, model, inputs, formats, whole, must_use, measure, progress)
    out: dict[str, Any] = {
        "model": model.label,
        "seed": seed,
        "reference": "float32",
        "formats": list(formats),
        "input": {"batch": list(batch.shape), "tokens": batch_how},
        "mode": run.mode,
        "blocks": run.blocks,
        "weights_read_bytes": run.bytes_read,
        "weights_held_peak_bytes": run.peak_held,  # float32 reference weights in memory at once, at most
    }
    for fmt in formats:
        out[fmt] = run.measured["batch"][fmt]
    if text is None:
        out["text"] = {"source": BUNDLED_TEXT, "skipped": text_how}
    else:
        ref_ppl = perplexity(run.logits["text"][REFERENCE_FORMAT], text)
        out["text"] = {"source": BUNDLED_TEXT, "tokenizer": text_how, "windows": list(text.shape)}
        out["text"]["perplexity"] = ref_ppl
        for fmt in formats:
            ppl = run.measured["text"][fmt]
            out[fmt]["perplexity"] = ppl
            out[fmt]["perplexity_change"] = (ppl - ref_ppl) / ref_ppl if ref_ppl else None
    stored = sorted({t.dtype for t in weights})
    unused = [t.name for t in weights if t.name not in run.used]
    if stored:
        out["stored_as"] = stored
    notes = []
    if stored and stored != ["float32"]:
        notes.append(
            f"weights are stored as {', '.join(stored)}: the reference is those values in float32, "
            f"so rounding to a format they already fit in changes nothing"
        )
    if any(fmt in FP8_FORMATS for fmt in formats):
        notes.append("fp8 is simulated: each weight tensor scaled to the format's range, rounded, scaled back")
    if unused:
        notes.append(f"{len(unused):,} tensor(s) in the file are not weights of {model.label} and were not used")
    if notes:
        out["note"] = "; ".join(notes)
    return out
