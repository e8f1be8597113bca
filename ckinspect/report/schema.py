"""The JSON report (schema 1) as a JSON Schema, for tests and for anyone validating reports.

Plain data: importing it costs nothing and needs no `jsonschema`. Additional keys are allowed
(keys may be added); the keys listed here must keep their meaning.
"""

from __future__ import annotations

from typing import Any

from ckinspect.model import COMPOSITE_PARTS
from ckinspect.vocab import FORMAT_TAGS, SEVERITY

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
        "summary": {
            "type": "object",
            "required": ["files", "errors", "warnings", "infos"],
            "properties": {"files": _COUNT, "errors": _COUNT, "warnings": _COUNT, "infos": _COUNT},
        },
    },
}
