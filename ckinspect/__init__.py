"""ckinspect: open any training checkpoint safely, see what it holds, diff, check and repair it.

The Python API (ckinspect.api), torch-free where the CLI is; nothing in it prints or exits:

    report = ckinspect.inspect("runs/step_60_resume.pth")   # .format .tensors .findings .to_json() ...
    result = ckinspect.diff("a.pth", "b.pth")               # .identical .changed .to_json()
    resume = ckinspect.last_good("runs/")                   # a path, or None
    run = ckinspect.judge_run("runs/")                      # its checkpoints, verdicts and reasons

Every error is a ckinspect.CkinspectError. Public names load lazily (PEP 562) so that `import ckinspect`
and `ckinspect --help` pay for nothing they do not use.
"""

from __future__ import annotations

import importlib

from ckinspect.vocab import VERSION as __version__
from ckinspect.vocab import CkinspectError, InternalError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ckinspect.api import (
        Candidate,
        CheckpointRejected,
        DiffResult,
        Report,
        RunVerdict,
        diff,
        inspect,
        judge_checkpoint,
        judge_run,
        last_good,
    )
    from ckinspect.formats import open_checkpoint
    from ckinspect.model import Checkpoint, Finding, StorageInfo, TensorInfo

_LAZY = {
    "inspect": "ckinspect.api",
    "diff": "ckinspect.api",
    "last_good": "ckinspect.api",
    "judge_run": "ckinspect.api",
    "judge_checkpoint": "ckinspect.api",
    "Report": "ckinspect.api",
    "DiffResult": "ckinspect.api",
    "RunVerdict": "ckinspect.api",
    "Candidate": "ckinspect.api",
    "CheckpointRejected": "ckinspect.api",
    "Checkpoint": "ckinspect.model",
    "TensorInfo": "ckinspect.model",
    "StorageInfo": "ckinspect.model",
    "Finding": "ckinspect.model",
    "open_checkpoint": "ckinspect.formats",
}
_SUBPACKAGES = {"integrations": "ckinspect.integrations"}  # `ckinspect.integrations` without importing it first

__all__ = [  # spelled out for type checkers and linters; tests/api checks it against _LAZY
    "Candidate",
    "Checkpoint",
    "CheckpointRejected",
    "CkinspectError",
    "DiffResult",
    "Finding",
    "InternalError",
    "Report",
    "RunVerdict",
    "StorageInfo",
    "TensorInfo",
    "__version__",
    "diff",
    "inspect",
    "judge_checkpoint",
    "judge_run",
    "last_good",
    "open_checkpoint",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        return getattr(importlib.import_module(module), name)
    if name in _SUBPACKAGES:
        return importlib.import_module(_SUBPACKAGES[name])
    raise AttributeError(f"module 'ckinspect' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_SUBPACKAGES})
