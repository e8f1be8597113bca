"""The JSON report, schema 1 (report/schema.py): a stable contract for CI and scripts.

Keys beyond the schema (`layout`, `unused_bytes`, `tensors`, `composite_tensors`) are additions; none changes the
meaning of a schema key. Sizes are exact bytes; `optimizer_share` is a fraction of `tensor_bytes`.
`cut_short` is null for a file that holds every byte its tensors reach; for a file cut short it gives
`missing_tensors`, `declared_bytes` per group (what the whole file held), `declared_optimizer_share`
(the share a reader should quote: `optimizer_share` only counts what survived) and the `salvage`
command that keeps the whole tensors; those tensors' entries carry `"missing": true`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence

from ckinspect._native import load as load_native
from ckinspect.analysis.anatomy import CutShort, bits_by_dtype, cut_short, missing_tensors, summarize
from ckinspect.analysis.params import optimizer_params
from ckinspect.fmt import bounded_repr, bounded_str
from ckinspect.formats.tree import no_gc
from ckinspect.model import RAGGED, Checkpoint, CompositeTensor, Finding, TensorInfo
from ckinspect.vocab import GROUPS, VERSION

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SCHEMA_VERSION = 1
_MAX_DEPTH = 8
_MAX_ITEMS = 200
_MAX_TEXT = 500
_MAX_NODES = 20_000  # metadata values one jsonable() call visits at most


def build(checkpoints: Sequence[Checkpoint], diff: Any = None) -> dict[str, Any]:
    """Schema-1 report of these checkpoints (already analyzed and checked), and of a diff if given."""
    with no_gc():  # one small dict per tensor, no cycles: collector passes would only add time
        files = [file_entry(ckpt) for ckpt in checkpoints]
    findings: list[Finding] = [f for ckpt in checkpoints for f in ckpt.findings]
    return {
        "schema": SCHEMA_VERSION,
        "tool": "ckinspect",
        "version": VERSION,
        "files": files,
        "diff": diff.to_json() if diff is not None and hasattr(diff, "to_json") else diff,
        "summary": summary(len(files), findings),
    }


def summary(file_count: int, findings: Sequence[Finding]) -> dict[str, int]:
    counts = {"error": 0, "warning": 0, "info": 0}
    for finding in findings:
        counts[finding.severity] = counts.get(finding.severity, 0) + 1
    return {"files": file_count, "errors": counts["error"], "warnings": counts["warning"], "infos": counts["info"]}


def file_entry(ckpt: Checkpoint) -> dict[str, Any]:
    anatomy = summarize(ckpt)
    missing = missing_tensors(ckpt)
    short = cut_short(ckpt, missing)
    metadata = {"step": None, "epoch": None, "world_size": None}
    metadata.update({bounded_str(k, _MAX_TEXT): jsonable(v) for k, v in ckpt.metadata.items()})
    return {
        "path": str(ckpt.path),
        "format": ckpt.format,
        "layout": ckpt.layout,
        "file_bytes": ckpt.file_bytes,
        "tensor_count": anatomy.tensor_count,
        "tensor_bytes": anatomy.tensor_bytes,
        "storage_bytes": anatomy.storage_bytes,
        "unused_bytes": anatomy.unused_bytes,
        "groups": {
            g: {"tensor_count": anatomy.groups[g].tensor_count, "bytes": anatomy.groups[g].bytes} for g in GROUPS
        },
        "optimizer_share": round(anatomy.optimizer_share, 6),
        "metadata": metadata,
        "findings": [f.to_json() for f in ckpt.findings],
        "cut_short": None if short is None else _cut_short(ckpt, short),
        "tensors": tensor_entries(ckpt.tensors, optimizer_params(ckpt), {t.name for t in missing}, ckpt.composites),
        "composite_tensors": composite_entries(ckpt.composites),
    }


def _cut_short(ckpt: Checkpoint, short: CutShort) -> dict[str, Any]:
    import shlex  # only a cut-short file's salvage line needs it: not every JSON report's imports

    return {
        "missing_tensors": short.missing_tensors,
        "declared_bytes": short.declared_bytes,
        "declared_optimizer_share": round(short.optimizer_share, 6),
        "salvage": f"ckinspect salvage {shlex.quote(str(ckpt.path))} OUT",
    }


def _json_shape(shape: tuple[int, ...]) -> list[int | None]:
    return [None if n == RAGGED else n for n in shape]


def composite_entries(composites: Sequence[CompositeTensor]) -> list[dict[str, Any]]:
    """One entry per sparse, nested, meta or per-channel quantized tensor: its layout, logical shape and
    parts (each also listed among the tensors, with `part_of`)."""
    return [
        {
            "name": c.name,
            "layout": c.layout,
            **({"subclass": c.subclass} if c.subclass else {}),
            "dtype": c.dtype,
            "shape": _json_shape(c.shape),
            "bytes": c.nbytes,
            "parts": {
                role: {"name": t.name, "dtype": t.dtype, "shape": list(t.shape), "bytes": t.nbytes}
                for role, t in c.parts.items()
            },
        }
        for c in composites
    ]


def tensor_entries(
    tensors: Sequence[TensorInfo],
    params: dict[str, str] | None = None,
    missing: set[str] | frozenset[str] = frozenset(),
    composites: Sequence[CompositeTensor] = (),
) -> list[dict[str, Any]]:
    """One entry per tensor; an optimizer state tensor tied to its parameter carries it as `param`, a
    tensor whose bytes the file lacks (`missing`: names) `"missing": true`, a part of a composite tensor
    (composite_entries) the composite's name as `part_of`."""
    params = params or {}
    part_of = {t.name: c.name for c in composites for t in c.parts.values()}
    bits_of = bits_by_dtype(tensors)
    out = []
    marked = params or missing or part_of  # a state dict has none of them: no lookups per tensor
    for t in tensors:
        nbytes = math.prod(t.shape) * bits_of[t.dtype] + 7 >> 3
        entry = {"name": t.name, "group": t.group, "dtype": t.dtype, "shape": list(t.shape), "bytes": nbytes}
        if marked and t.name in params:
            entry["param"] = params[t.name]
        if marked and (t.name in missing or t.name in part_of):
            _mark_missing_or_part(entry, t.name, missing, part_of)
        out.append(entry)
    return out


def _mark_missing_or_part(entry: dict[str, Any], name: str, missing: set[str] | frozenset[str],
                          part_of: dict[str, str]) -> None:  # fmt: skip
    if name in missing:
        entry["missing"] = True
    if name in part_of:
        entry["part_of"] = part_of[name]


def jsonable(value: Any, depth: int = 0, budget: list[int] | None = None) -> Any:
    """Metadata as plain JSON: tensors become a short description, odd objects their (short) repr. At most
    _MAX_NODES values are visited per call, so a structure a pickle shares a billion times over (its memo
    can) costs what the report prints, not what the structure unfolds to."""
    if budget is None:
        budget = [_MAX_NODES]
    budget[0] -= 1
    if value is None or isinstance(value, (bool, int, str, float)):
        return _json_scalar(value)
    if isinstance(value, TensorInfo):
        return f"tensor {value.dtype} {list(value.shape)}"
    if depth >= _MAX_DEPTH or budget[0] <= 0:
        return "..."
    return _json_other(value, depth, budget)


def _json_other(value: Any, depth: int, budget: list[int]) -> Any:
    """A container's first _MAX_ITEMS values, a byte string's length, anything else its bounded repr."""
    if isinstance(value, Mapping):
        items = list(value.items())[:_MAX_ITEMS]
        return {bounded_str(k, _MAX_TEXT): jsonable(v, depth + 1, budget) for k, v in items}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, depth + 1, budget) for v in value[:_MAX_ITEMS]]
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    return bounded_repr(value, _MAX_TEXT)


def _json_scalar(value: None | bool | int | str | float) -> Any:
    """None, a bool, an int, a str or a float as JSON holds it, bounded: a huge int or a long str shortened,
    NaN and Inf (not JSON) spelled out."""
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return bounded_repr(value, _MAX_TEXT)  # str() of a million-digit int is slow, past 4300 digits refused
    return value if not isinstance(value, str) or len(value) <= _MAX_TEXT else value[:_MAX_TEXT] + "..."


def render(report: dict[str, Any]) -> str:
    """Indented JSON, except that each tensor is one line: readable, and fast for 50,000 tensors
    (json's indenting encoder is pure Python; the compact one is C)."""
    mark = _TENSORS_MARK + os.urandom(16).hex()  # a name or value from the file cannot spell it (billions of tries)
    tensor_lists = []
    files = []
    for entry in report["files"]:
        tensors = entry.get("tensors")
        if tensors is not None:
            tensor_lists.append(tensors)
        files.append({k: (mark if k == "tensors" and v is not None else v) for k, v in entry.items()})
    text = json.dumps({**report, "files": files}, indent=2, allow_nan=False)
    chunks: list[str] = []
    spelled = json.dumps(mark)
    for tensors in tensor_lists:  # each list where its mark is, in order; nothing already spliced in is searched
        head, _, text = text.partition(spelled)
        chunks += (head, _listing(tensors))
    chunks += (text, "\n")
    return "".join(chunks)


def _listing(tensors: list[dict[str, Any]]) -> str:
    """The tensor entries as JSON, one per line. In one C pass where built (_native/jsonrows.c: json's encoder
    spends most of 50,000 entries on joining small strings); else json.dumps, then a line break between entries:
    `{"name"` cannot occur inside a JSON string (its quote would be escaped), so that split is exact."""
    if not tensors:
        return "[]"
    native = load_native("jsonrows")
    listing = native.encode(tensors, _ONE_PER_LINE) if native is not None else None
    if listing is None:
        # (fresh flat dicts from tensor_entries cannot contain themselves: no cycle bookkeeping per entry)
        body = json.dumps(tensors, allow_nan=False, separators=(", ", ": "), check_circular=False)[1:-1]
        listing = "[\n        " + body.replace('}, {"name": ', '},\n        {"name": ') + "\n      ]"
    return listing


_ONE_PER_LINE = ("[\n        ", "\n      ]", "name", ",\n        ")  # jsonrows.encode's layout of _listing
_TENSORS_MARK = "\0tensors\0"  # json escapes a NUL, so no real value can look like this
