"""The JSON report (schema 1) as a JSON Schema, for tests and for anyone validating reports: SCHEMA_1 for
`--report`, LAST_GOOD_1 for `last-good --format json` (its `run`, the run views' `runs` of `--report`).

Plain data: importing it costs nothing and needs no `jsonschema`. Additional keys are allowed
(keys may be added); the keys listed here must keep their meaning.
"""

from __future__ import annotations

from typing import Any

from ckinspect.model import COMPOSITE_PARTS
from ckinspect.vocab import FORMAT_TAGS, NOT_JUDGED, SEVERITY, Verdict

_COUNT = {"type": "integer", "minimum": 0}
_GROUP = {
    "type": "object",
    "required": ["tensor_count", "bytes"],
    "properties": {"tensor_count": _COUNT, "bytes": _COUNT},
}
_FINDING = {
    "type": "object",
    "required": ["code", "severity", "message"],
    "properties": {
        "code": {"enum": list(SEVERITY)},  # every finding code, from vocab (its one home)
        "severity": {"enum": ["error", "warning", "info"]},
        "message": {"type": "string", "minLength": 1},
        "tensor": {"type": "string"},
    },
}
_CUT_SHORT = {  # a file whose tensors name bytes it does not hold; not required: earlier reports lack the key
    "type": "object",
    "required": ["missing_tensors", "declared_bytes", "declared_optimizer_share", "salvage"],
    "properties": {
        "missing_tensors": {"type": "integer", "minimum": 1},
        "declared_bytes": {
            "type": "object",
            "required": ["model", "optimizer", "rng", "other"],
            "properties": {g: _COUNT for g in ("model", "optimizer", "rng", "other")},
        },
        "declared_optimizer_share": {"type": "number", "minimum": 0, "maximum": 1},
        "salvage": {"type": "string"},
    },
}
_SHAPE = {"type": "array", "items": {"type": ["integer", "null"]}}  # null: a nested tensor's ragged dimension
_COMPOSITE = {
    "type": "object",
    "required": ["name", "layout", "dtype", "shape", "bytes", "parts"],
    "properties": {
        "name": {"type": "string"},
        "layout": {"enum": list(COMPOSITE_PARTS)},
        "subclass": {"type": "string"},  # a wrapper_subclass's class: torch.distributed.tensor.DTensor ...
        "dtype": {"type": "string"},
        "shape": _SHAPE,
        "bytes": _COUNT,
        "parts": {  # part name (COMPOSITE_PARTS) -> the tensor holding it, listed in `tensors` too
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["name", "dtype", "shape", "bytes"],
                "properties": {
                    "name": {"type": "string"},
                    "dtype": {"type": "string"},
                    "shape": _SHAPE,
                    "bytes": _COUNT,
                },  # fmt: skip
            },
        },
    },
}
_FILE = {
    "type": "object",
    "required": [
        "path",
        "format",
        "file_bytes",
        "tensor_count",
        "tensor_bytes",
        "storage_bytes",
        "groups",
        "optimizer_share",
        "metadata",
        "findings",
    ],
    "properties": {
        "path": {"type": "string"},
        "format": {"enum": list(FORMAT_TAGS)},
        "file_bytes": _COUNT,
        "tensor_count": _COUNT,
        "tensor_bytes": _COUNT,
        "storage_bytes": _COUNT,
        "groups": {
            "type": "object",
            "required": ["model", "optimizer", "rng", "other"],
            "properties": {g: _GROUP for g in ("model", "optimizer", "rng", "other")},
        },
        "optimizer_share": {"type": "number", "minimum": 0, "maximum": 1},
        "metadata": {
            "type": "object",
            "properties": {
                "step": {"type": ["integer", "number", "null"]},
                "epoch": {"type": ["integer", "number", "null"]},
                "world_size": {"type": ["integer", "null"]},
            },
        },
        "findings": {"type": "array", "items": _FINDING},
        "cut_short": {"anyOf": [{"type": "null"}, _CUT_SHORT]},
        "composite_tensors": {"type": "array", "items": _COMPOSITE},  # sparse, nested, meta, per-channel quantized
    },
}
_DIFF = {
    "type": "object",
    "required": ["a", "b", "identical", "only_a", "only_b", "same", "changed"],
    "properties": {
        "a": {"type": "string"},
        "b": {"type": "string"},
        "identical": {"type": "boolean"},
        "only_a": {"type": "array", "items": {"type": "string"}},
        "only_b": {"type": "array", "items": {"type": "string"}},
        "same": _COUNT,
        "changed": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "reason"],
                "properties": {
                    "name": {"type": "string"},
                    "reason": {"enum": ["values", "shape", "dtype", "layout"]},
                    "max_abs_diff": {"type": ["number", "null"]},
                },
            },
        },
        "values_changed": {
            "type": "array",
            "items": {"type": "object", "required": ["path", "a", "b"], "properties": {"path": {"type": "string"}}},
        },
        "values_only_a": {"type": "array", "items": {"type": "string"}},
        "values_only_b": {"type": "array", "items": {"type": "string"}},
    },
}

_CHECKPOINT = {  # one checkpoint of a run (analysis.runs.model.RunCheckpoint.to_json)
    "type": "object",
    "required": [
        "path",
        "framework",
        "step",
        "time",
        "size",
        "verdict",
        "values_checked",
        "reasons",
        "notes",
        "parts",
        "findings",
    ],
    "properties": {
        "path": {"type": "string"},
        "framework": {"type": "string"},
        "step": {"type": ["integer", "null"]},
        "time": {"type": "number"},
        "size": _COUNT,
        # not-judged: older than the answer, which did not need it (last-good without --all): nothing read
        "verdict": {"enum": [*Verdict, NOT_JUDGED]},
        "values_checked": {"type": "boolean"},
        "reasons": {"type": "array", "items": {"type": "string"}},  # why it is not good; none when good or not judged
        "notes": {"type": "array", "items": {"type": "string"}},
        "parts": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["path", "role", "loaded_on_resume", "bytes"],
                "properties": {
                    "path": {"type": "string"},
                    "role": {"type": "string"},
                    "loaded_on_resume": {"type": "boolean"},
                    "bytes": _COUNT,
                },
            },
        },
        "findings": {"type": "array", "items": _FINDING},
    },
    "if": {"properties": {"verdict": {"const": NOT_JUDGED}}},
    "then": {"properties": {"reasons": {"maxItems": 0}, "values_checked": {"const": False}}},
}
_RUN = {
    "type": "object",
    "required": ["path", "last_good", "findings", "checkpoints"],
    "properties": {
        "path": {"type": "string"},
        "last_good": {"type": ["string", "null"]},  # the path `last-good` prints, or null (exit 1)
        "findings": {"type": "array", "items": _FINDING},  # the run's own: a `latest` naming a missing tag ...
        "checkpoints": {"type": "array", "items": _CHECKPOINT},  # oldest first
    },
}

SCHEMA_1: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "ckinspect report, schema 1",
    "type": "object",
    "required": ["schema", "tool", "version", "files", "summary"],
    "properties": {
        "schema": {"const": 1},
        "tool": {"const": "ckinspect"},
        "version": {"type": "string"},
        "files": {"type": "array", "items": _FILE},
        "diff": {"anyOf": [{"type": "null"}, _DIFF]},
        "runs": {"type": "array", "items": _RUN},  # the run view of each run folder among the paths
        "summary": {
            "type": "object",
            "required": ["files", "errors", "warnings", "infos"],
            "properties": {"files": _COUNT, "errors": _COUNT, "warnings": _COUNT, "infos": _COUNT},
        },
    },
}

LAST_GOOD_1: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "ckinspect last-good --format json, schema 1",
    "type": "object",
    "required": ["schema", "tool", "version", "command", "run"],
    "properties": {
        "schema": {"const": 1},
        "tool": {"const": "ckinspect"},
        "version": {"type": "string"},
        "command": {"const": "last-good"},
        "run": _RUN,
    },
}
