"""ckinspect: open any training checkpoint safely, see what it holds, diff, check and repair it.

Public names load lazily (PEP 562) so that `ckinspect --help` pays for nothing it does not use.
"""

from __future__ import annotations

import importlib

from ckinspect.vocab import VERSION as __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_LAZY = {
    "Checkpoint": "ckinspect.model",
    "TensorInfo": "ckinspect.model",
    "StorageInfo": "ckinspect.model",
    "Finding": "ckinspect.model",
    "open_checkpoint": "ckinspect.formats",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ckinspect' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
