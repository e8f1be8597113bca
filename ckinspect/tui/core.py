"""The TUI's one doorway into the core: every call the screens make goes through here.

Each function imports its core module lazily and raises `NotAvailable` when that module (or
the name the contract promises) is not there yet, so a screen can say "not available yet"
instead of crashing. Nothing here imports textual; it runs inside thread workers.
"""

from __future__ import annotations

import fnmatch
import importlib
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckinspect.model import GROUPS, Checkpoint, Finding, TensorInfo, worst_severity

Progress = Callable[[float], None]  # fraction done, 0.0 .. 1.0


class NotAvailable(Exception):
    """A core function the TUI builds on is not in this checkout yet."""


def contract(module: str, name: str) -> Any:
    """`ckinspect.<module>.<name>` from the module API contract, or NotAvailable."""
    try:
        found = importlib.import_module(f"ckinspect.{module}")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith(f"ckinspect.{module.split('.')[0]}"):
            raise NotAvailable(f"ckinspect.{module} is not available yet") from None
        raise
    try:
        return getattr(found, name)
    except AttributeError:
        raise NotAvailable(f"ckinspect.{module}.{name} is not available yet") from None


def progress_adapter(report: Progress | None) -> Callable[..., None] | None:
    """A callback that accepts the shapes core modules pass: (fraction), (done, total), or keywords."""
    if report is None:
        return None

    def callback(*args: Any, **kwargs: Any) -> None:
        done = kwargs.get("done", args[0] if args else None)
        total = kwargs.get("total", args[1] if len(args) > 1 else None)
        if isinstance(done, (int, float)) and isinstance(total, (int, float)) and total > 0:
            report(min(1.0, done / total))
        elif isinstance(done, float) and 0.0 <= done <= 1.0:
            report(done)

    return callback


# ---------------------------------------------------------------- loading


def load_checkpoint(target: str | Path, progress: Progress | None = None) -> Checkpoint:
    """Structure only (quick): the first screen must not wait for a value scan."""
    inspect_path = contract("inspect", "inspect_path")
    return inspect_path(Path(target), quick=True, progress=progress_adapter(progress))


@dataclass
class ScanOutcome:
    findings: list[Finding]  # only those not already on the checkpoint
    stats: dict[str, ValueStats]  # per tensor, from the scan (no histogram)


def scan_checkpoint(ckpt: Checkpoint, progress: Progress | None = None) -> ScanOutcome:
    """The value scan: findings (NONFINITE, FP16_OVERFLOW, CRC ...) and per-tensor statistics."""
    scan_values = contract("scan", "scan_values")
    result = scan_values(ckpt, progress=progress_adapter(progress))
    found = _get(result, "findings", default=[]) or []
    known = {(f.code, f.message, f.tensor) for f in ckpt.findings}
    stats: dict[str, ValueStats] = {}
    for name, s in (_get(result, "stats", default={}) or {}).items():
        tensor = ckpt.tensor(name) if len(ckpt.tensors) < 20_000 else None
        stats[name] = ValueStats(
            count=tensor.numel if tensor is not None else 0,
            minimum=_get(s, "min", "minimum"),
            maximum=_get(s, "max", "maximum"),
            mean=_get(s, "mean"),
            std=_get(s, "std"),
            nonfinite=int(_get(s, "nonfinite", default=0) or 0),
            fp16_overflow=int(_get(s, "fp16_overflow", default=0) or 0),
        )
    return ScanOutcome([f for f in found if (f.code, f.message, f.tensor) not in known], stats)


def find_checkpoints(paths: list[Path]) -> list[Path]:
    find = contract("discover", "find_checkpoints")
    return [Path(getattr(t, "path", t)) for t in find(paths)]


# ---------------------------------------------------------------- anatomy


@dataclass(frozen=True)
class GroupBytes:
    """What the group bar draws: bytes per group (storages once) and the optimizer's share."""

    bytes: dict[str, int]
    counts: dict[str, int]
    optimizer_share: float
    tensor_bytes: int
    unused_bytes: int = 0


def _get(obj: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        if isinstance(obj, dict) and name in obj:
            return obj[name]
        if hasattr(obj, name):
            return getattr(obj, name)
    return default


def group_bytes(ckpt: Checkpoint) -> GroupBytes:
    summarize = contract("anatomy", "summarize")
    anatomy = summarize(ckpt)
    groups = _get(anatomy, "groups", default={}) or {}
    sizes, counts = {}, {}
    for name in GROUPS:
        entry = groups.get(name) if isinstance(groups, dict) else None
        sizes[name] = int(_get(entry, "bytes", "nbytes", default=0) or 0) if entry is not None else 0
        counts[name] = int(_get(entry, "tensor_count", "count", default=0) or 0) if entry is not None else 0
    total = int(_get(anatomy, "tensor_bytes", default=sum(sizes.values())) or 0)
    share = _get(anatomy, "optimizer_share", default=None)
    if share is None:
        share = sizes["optimizer"] / total if total else 0.0
    unused = int(_get(anatomy, "unused_storage_bytes", "unused_bytes", default=0) or 0)
    return GroupBytes(sizes, counts, float(share), total, unused)


def safe_load_verdict(ckpt: Checkpoint) -> tuple[str, str]:
    """(one-line verdict, severity) on whether `torch.load(weights_only=True)` would open it."""
    codes = {f.code for f in ckpt.findings}
    if "UNSAFE_PICKLE" in codes:
        return "UNSAFE: names code-running globals (nothing executed)", "error"
    if ckpt.format == "unknown":
        return "not a checkpoint (see findings)", "error"
    if "CORRUPT" in codes:
        return "corrupt: cannot be read whole", "error"
    if "ALLOWLIST_NEEDED" in codes:
        return "needs an allowlist for weights_only=True", "warning"
    if ckpt.format == "safetensors" or ckpt.format == "sharded":
        return "safe: no code in the format", "ok"
    return "safe: loads with weights_only=True", "ok"


def severity_badges(findings: list[Finding]) -> str:
    """'2E 1W' style badge text for a list of findings ('' when clean)."""
    counts = {"error": 0, "warning": 0, "info": 0}
    for f in findings:
        counts[f.severity] = counts.get(f.severity, 0) + 1
    parts = [f"{counts[s]}{s[0].upper()}" for s in ("error", "warning", "info") if counts.get(s)]
    return " ".join(parts)


def verdict_of(findings: list[Finding]) -> str:
    return worst_severity(findings) or "ok"


# ---------------------------------------------------------------- sizes and names


def human_bytes(n: int | float) -> str:
    """Binary units, 3 significant figures: 1.50 KiB, 123 MiB, 12 B."""
    n = float(n)
    if n < 1024:
        return f"{int(n)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        n /= 1024.0
        if n < 1024 or unit == "PiB":
            if n >= 100:
                return f"{n:.0f} {unit}"
            if n >= 10:
                return f"{n:.1f} {unit}"
            return f"{n:.2f} {unit}"
    return f"{n:.0f} PiB"  # unreachable


def human_count(n: int) -> str:
    return f"{n:,}"


def shape_text(shape: tuple[int, ...]) -> str:
    if len(shape) == 1:
        return f"({shape[0]},)"
    return "(" + ", ".join(map(str, shape)) + ")" if shape else "()"


def name_matcher(pattern: str) -> Callable[[str], bool]:
    """Substring match, or a glob when the pattern holds * ? or [ ; case-insensitive either way."""
    pattern = pattern.strip()
    if not pattern:
        return lambda name: True
    if any(ch in pattern for ch in "*?["):
        regex = re.compile(fnmatch.translate(pattern), re.IGNORECASE)
        return lambda name: regex.match(name) is not None
    needle = pattern.lower()
    return lambda name: needle in name.lower()


def module_path(name: str) -> tuple[str, ...]:
    """`model.layers.0.attn.wq.weight` -> ('model', 'layers', '0', 'attn', 'wq')."""
    parts = name.split(".")
    return tuple(parts[:-1])


# ---------------------------------------------------------------- value statistics


@dataclass
class ValueStats:
    count: int
    minimum: float | None = None
    maximum: float | None = None
    mean: float | None = None
    std: float | None = None
    nonfinite: int = 0
    fp16_overflow: int = 0
    histogram: list[int] = field(default_factory=list)
    hist_range: tuple[float, float] = (0.0, 0.0)
    sampled: bool = False  # the histogram is drawn from an evenly strided sample


FP16_MAX = 65504.0
HISTOGRAM_BINS = 24
_SAMPLE_LIMIT = 1_000_000
_CHUNK = 8 * 1024 * 1024


def _read_bytes(ckpt: Checkpoint, tensor: TensorInfo, start: int, length: int) -> Iterator[bytes]:
    """Raw bytes of a storage range: through ckinspect.blobs when it is there, else straight from the file."""
    storage = ckpt.storages.get(tensor.storage_key)
    if storage is None:
        raise NotAvailable(f"storage {tensor.storage_key!r} of {tensor.name} is not in the checkpoint")
    try:
        read_chunks = contract("blobs", "read_chunks")
    except NotAvailable:
        read_chunks = None
    if read_chunks is not None:
        for chunk in read_chunks(storage, start=start, length=length, chunk=_CHUNK):
            yield bytes(chunk)
        return
    if storage.offset is None:
        raise NotAvailable("reading compressed storages needs ckinspect.blobs (not available yet)")
    with open(storage.file, "rb") as handle:
        handle.seek(storage.offset + start)
        left = length
        while left > 0:
            data = handle.read(min(_CHUNK, left))
            if not data:
                raise NotAvailable(f"{tensor.name}: the file ends before the tensor does")
            left -= len(data)
            yield data


def _as_values(np: Any, raw: Any, dtype: str) -> Any:
    """A numpy array of the values (bf16 widened to fp32 by hand; fp8 unsupported)."""
    from ckinspect.dtypes import dtype_info

    info = dtype_info(dtype)
    if dtype == "bfloat16":
        return (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    if info.numpy is None:
        raise NotAvailable(f"value statistics for {dtype} are not supported")
    arr = np.frombuffer(raw, dtype=info.numpy)
    return arr.astype(np.uint8) if dtype == "bool" else arr


def tensor_value_stats(ckpt: Checkpoint, tensor: TensorInfo, progress: Progress | None = None) -> ValueStats:
    """min, max, mean, std, non-finite and fp16-overflow counts and a small histogram, streamed in chunks."""
    import numpy as np

    from ckinspect.dtypes import dtype_info

    info = dtype_info(tensor.dtype)
    floating = info.is_floating
    stats = ValueStats(count=tensor.numel)
    if tensor.numel == 0:
        return stats
    step = max(1, tensor.numel // _SAMPLE_LIMIT)
    stats.sampled = step > 1
    samples: list[Any] = []
    total = total_sq = 0.0
    finite_count = 0
    lo, hi = math.inf, -math.inf

    def consume(values: Any, first_index: int) -> None:
        nonlocal total, total_sq, finite_count, lo, hi
        if floating:
            mask = np.isfinite(values)
            stats.nonfinite += int(values.size - np.count_nonzero(mask))
            finite = values[mask] if stats.nonfinite else values
            if tensor.dtype != "float16":
                stats.fp16_overflow += int(np.count_nonzero(np.abs(finite) > FP16_MAX))
        else:
            finite = values
        if finite.size:
            f64 = finite.astype(np.float64)
            total += float(f64.sum())
            total_sq += float(np.square(f64).sum())
            finite_count += int(f64.size)
            lo, hi = min(lo, float(f64.min())), max(hi, float(f64.max()))
        offset = (-first_index) % step
        picked = values[offset::step]
        if floating:
            picked = picked[np.isfinite(picked)]
        samples.append(picked.astype(np.float64))

    if tensor.is_contiguous:
        itemsize = info.itemsize
        carry = b""
        index = 0
        done = 0
        for chunk in _read_bytes(ckpt, tensor, tensor.byte_offset, tensor.nbytes):
            data = carry + chunk
            usable = len(data) - len(data) % itemsize
            carry = data[usable:]
            values = _as_values(np, data[:usable], tensor.dtype)
            consume(values, index)
            index += values.size
            done += len(chunk)
            if progress is not None:
                progress(done / max(1, tensor.nbytes))
    else:
        span = tensor.span_bytes
        if span > 512 * 1024 * 1024:
            raise NotAvailable("statistics of a non-contiguous view larger than 512 MiB are not computed")
        raw = b"".join(_read_bytes(ckpt, tensor, tensor.byte_offset, span))
        flat = _as_values(np, raw, tensor.dtype)
        strides = tuple(s * flat.itemsize for s in tensor.stride)
        view = np.lib.stride_tricks.as_strided(flat, shape=tensor.shape, strides=strides)
        consume(np.ascontiguousarray(view).reshape(-1), 0)

    if finite_count:
        stats.minimum, stats.maximum = lo, hi
        stats.mean = total / finite_count
        stats.std = math.sqrt(max(0.0, total_sq / finite_count - stats.mean**2))
        sample = np.concatenate(samples) if samples else np.zeros(0)
        if sample.size:
            counts, edges = np.histogram(sample, bins=HISTOGRAM_BINS, range=(lo, hi) if hi > lo else (lo - 0.5, hi + 0.5))
            stats.histogram = [int(c) for c in counts]
            stats.hist_range = (float(edges[0]), float(edges[-1]))
    return stats


def diff_name_pairs(a: Checkpoint, b: Checkpoint) -> list[tuple[str | None, str | None]] | None:
    """How ckinspect.diff pairs tensors (it matches across layouts), in A's order; None when unknown.

    Uses a public `match_names(a, b)` when the diff module has one; until then its private matcher
    (either signature it has had). Anything unexpected gives None: the diff screen then realigns
    from the DiffResult once it arrives (`name_pairs_from_result`).
    """
    try:
        return [(x, y) for x, y in contract("diff", "match_names")(a, b)]
    except NotAvailable:
        pass
    except Exception:  # a public matcher must never take the diff screen down
        return None
    try:
        private = contract("diff", "_match")
        roles = getattr(importlib.import_module("ckinspect.diff"), "roles", None)
        if roles is not None:
            ka, kb, _ = private(a.tensors, roles(a), b.tensors, roles(b))
        else:
            ka, kb, _ = private(a, a.tensors, b, b.tensors)
        return [(ta.name, kb[k].name if k in kb else None) for k, ta in ka.items()] + [
            (None, tb.name) for k, tb in kb.items() if k not in ka
        ]
    except Exception:  # NotAvailable, or the private matcher changed shape
        return None


def name_pairs_from_result(a: Checkpoint, b: Checkpoint, result: Any) -> dict[str, str] | None:
    """A name -> B name from a DiffResult: its changes name both sides; the tensors it found equal
    are paired in file order (renamings such as a dropped `model.` prefix keep the order)."""
    only_a, only_b = _get(result, "only_a"), _get(result, "only_b")
    changed = _get(result, "changed")
    if only_a is None or only_b is None or changed is None:
        return None
    matched: dict[str, str] = {}
    for change in changed:
        x, y = _get(change, "a_name", default=""), _get(change, "b_name", default="")
        if x and y:
            matched[x] = y
    skip_a, skip_b = set(only_a) | set(matched), set(only_b) | set(matched.values())
    rest_a = [t.name for t in a.tensors if t.name not in skip_a]
    rest_b = [t.name for t in b.tensors if t.name not in skip_b]
    if len(rest_a) != len(rest_b):
        return None
    matched.update(zip(rest_a, rest_b))
    return matched


# ---------------------------------------------------------------- the backend the screens call


class Backend:
    """What the screens ask of the core. Tests pass a subclass that returns hand-built Checkpoints."""

    def load(self, target: Path, progress: Progress | None = None) -> Checkpoint:
        return load_checkpoint(target, progress)

    def scan(self, ckpt: Checkpoint, progress: Progress | None = None) -> ScanOutcome:
        return scan_checkpoint(ckpt, progress)

    def group_bytes(self, ckpt: Checkpoint) -> GroupBytes:
        return group_bytes(ckpt)

    def find(self, paths: list[Path]) -> list[Path]:
        return find_checkpoints(paths)

    def value_stats(self, ckpt: Checkpoint, tensor: TensorInfo, progress: Progress | None = None) -> ValueStats:
        return tensor_value_stats(ckpt, tensor, progress)

    def diff(self, a: Checkpoint, b: Checkpoint, progress: Progress | None = None) -> Any:
        diff_checkpoints = contract("diff", "diff_checkpoints")
        try:
            return diff_checkpoints(a, b, progress=progress_adapter(progress))
        except TypeError:  # an implementation without a progress callback
            return diff_checkpoints(a, b)

    def match_names(self, a: Checkpoint, b: Checkpoint) -> list[tuple[str | None, str | None]] | None:
        """(A name, B name) pairs as the diff matches them across layouts (model.x vs x), or None."""
        return diff_name_pairs(a, b)

    def weight_drift(self, ckpt: Checkpoint, progress: Progress | None = None) -> Any:
        weight_drift = contract("drift", "weight_drift")
        try:
            return weight_drift(ckpt, progress=progress_adapter(progress))
        except TypeError:
            return weight_drift(ckpt)

    def logit_drift(self, ckpt: Checkpoint) -> tuple[Any, str]:
        """(the logit drift, or None; why not, when None)."""
        value = contract("drift", "logit_drift")(ckpt)
        if value is not None:
            return value, ""
        try:
            reason = contract("drift", "logit_drift_reason")(ckpt) or ""
        except NotAvailable:
            reason = ""
        return None, reason or "the model is not known"

    def plan_repairs(self, path: Path) -> Any:
        return contract("repair", "plan_repairs")(path)

    def apply_plan(self, plan: Any) -> Any:
        return contract("repair", "apply_plan")(plan)

    def undo(self, folder: Path) -> Any:
        return contract("repair", "undo")(folder)


def as_record(item: Any) -> dict[str, Any]:
    """A core result item (dataclass, dict, namedtuple, plain object) as a dict of its fields."""
    import dataclasses

    if isinstance(item, dict):
        return dict(item)
    if hasattr(item, "to_json"):  # the core's own flat, stable view of a result
        return dict(item.to_json())
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}
    if hasattr(item, "_asdict"):
        return dict(item._asdict())
    return {k: v for k, v in vars(item).items() if not k.startswith("_")} if hasattr(item, "__dict__") else {"value": item}


def flatten(record: dict[str, Any]) -> dict[str, Any]:
    """One level of nesting folded into the keys: {"fp16": {"max_abs": x}} -> {"fp16_max_abs": x}."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, dict):
            for inner, v in value.items():
                out[f"{key}_{inner}"] = v
        else:
            out[key] = value
    return out


def as_records(result: Any, *names: str) -> list[dict[str, Any]]:
    """The list inside a result (result.<name> for the first name present, or the result itself)."""
    if result is None:
        return []
    items = result
    if not isinstance(result, (list, tuple)):
        items = _get(result, *names, default=None)
        if items is None:
            return []
    if isinstance(items, dict):
        items = [{"name": key, **(as_record(value) if not isinstance(value, (int, float)) else {"value": value})} for key, value in items.items()]
    return [as_record(item) for item in items]


def format_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (tuple, list)) and all(isinstance(v, int) for v in value):
        return shape_text(tuple(value))
    return str(value)
