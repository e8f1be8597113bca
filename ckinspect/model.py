"""The one data model: every reader fills a `Checkpoint`, every check and renderer reads it.

Pure data. No torch, no textual, no I/O beyond what a property needs to say what it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckinspect.dtypes import dtype_info

GROUPS: tuple[str, ...] = ("model", "optimizer", "rng", "other")

FORMATS: tuple[str, ...] = (
    "torch-zip",
    "torch-legacy",
    "safetensors",
    "sharded",
    "dcp",
    "pickle",
    "unknown",
)

# Finding codes are a stable contract (design.md); severity is fixed per code.
SEVERITY: dict[str, str] = {
    "UNSAFE_PICKLE": "error",
    "ALLOWLIST_NEEDED": "warning",
    "CORRUPT": "error",
    "LEFTOVER_TMP": "warning",
    "NONFINITE": "error",
    "FP16_OVERFLOW": "warning",
    "RESUME_INCOMPLETE": "warning",
    "HALF_PRECISION_RESUME": "warning",
    "OPTIMIZER_MISMATCH": "error",
    "STORAGE_BLOAT": "warning",
}

SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "error": 2}


@dataclass(frozen=True)
class Finding:
    code: str
    message: str
    tensor: str | None = None
    severity: str = ""

    def __post_init__(self) -> None:
        if not self.severity:
            object.__setattr__(self, "severity", SEVERITY.get(self.code, "info"))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "severity": self.severity, "message": self.message}
        if self.tensor is not None:
            out["tensor"] = self.tensor
        return out


@dataclass(frozen=True)
class StorageInfo:
    """One block of raw bytes that tensors view into.

    `offset` is the absolute position of the first raw byte in `file` when the bytes
    lie there uncompressed (torch zip members are stored, legacy storages are inline,
    safetensors buffers are raw); None when they cannot be addressed directly.
    """

    key: str
    dtype: str
    nbytes: int
    file: Path
    offset: int | None
    crc32: int | None = None  # expected CRC-32 from the zip directory, where there is one
    member: str | None = None  # zip member or shard name, for messages
    location: str = "cpu"


@dataclass(frozen=True)
class TensorInfo:
    name: str  # dotted path in the checkpoint: model.layers.0.attn.wq.weight
    dtype: str  # torch-style name without the prefix: float32, bfloat16, int64 ...
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_key: str
    storage_offset: int = 0  # in elements, as torch counts it
    group: str = "other"

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return dtype_info(self.dtype).itemsize

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def byte_offset(self) -> int:
        """Offset of the first element within its storage, in bytes."""
        return self.storage_offset * self.itemsize

    @property
    def is_contiguous(self) -> bool:
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.stride)):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True

    @property
    def span_bytes(self) -> int:
        """Bytes of storage this view reaches, from its first element to its last."""
        if self.numel == 0:
            return 0
        last = sum((size - 1) * stride for size, stride in zip(self.shape, self.stride))
        return (last + 1) * self.itemsize


@dataclass
class Checkpoint:
    path: Path
    format: str
    file_bytes: int
    tensors: list[TensorInfo] = field(default_factory=list)
    storages: dict[str, StorageInfo] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)  # step, epoch, world_size, config ...
    findings: list[Finding] = field(default_factory=list)
    globals: list[str] = field(default_factory=list)  # every "module.name" any pickle names
    layout: str = "unknown"  # which recogniser mapped the roles: trainer, minimind, nanogpt ...
    tree: Any = None  # the decoded object, TensorInfo in place of tensors; None when unread
    files: list[Path] = field(default_factory=list)  # every file it is made of (shards, .distcp)

    def tensor(self, name: str) -> TensorInfo | None:
        return next((t for t in self.tensors if t.name == name), None)

    def add(self, code: str, message: str, tensor: str | None = None) -> None:
        self.findings.append(Finding(code, message, tensor))


def worst_severity(findings: list[Finding]) -> str | None:
    return max((f.severity for f in findings), key=SEVERITY_RANK.__getitem__, default=None)


def fails(findings: list[Finding], fail_on: str) -> bool:
    """Whether these findings reach the --fail-on threshold (error, warning or never)."""
    if fail_on == "never":
        return False
    threshold = SEVERITY_RANK[fail_on]
    return any(SEVERITY_RANK[f.severity] >= threshold for f in findings)
