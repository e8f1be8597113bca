"""Optional dependencies: torch is an extra (`ckinspect[torch]`), needed only to write torch files, to
measure logit drift and to train. Reading, reporting, diffing, repairing and writing safetensors never need it.
"""

from __future__ import annotations

import importlib.util

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType

TORCH_INSTALL = "pip install 'ckinspect[torch]'"


def has_torch() -> bool:
    """Whether torch can be imported, without importing it (~3 s and ~200 MB)."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # an import hook that refuses it, or a half-removed module
        return False


def needs_torch_message(purpose: str) -> str:
    """The one line a user sees when `purpose` needs torch and it is not installed."""
    return f"{purpose} needs torch, which is not installed: {TORCH_INSTALL}"


def require_torch(purpose: str) -> ModuleType:
    """torch, or a CkinspectError (one line, exit 2) that says what needs it and how to install it."""
    from ckinspect.vocab import CkinspectError

    if not has_torch():
        raise CkinspectError(needs_torch_message(purpose))
    import torch

    return torch
