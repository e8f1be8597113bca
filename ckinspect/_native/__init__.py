"""Optional compiled fast paths, one module per ``*.c`` file here (built by setup.py).

``load(name)`` gives the compiled module or None: None when it was not built (no compiler, an interpreter
it does not build for) or when ``CKINSPECT_PURE=1`` asks for the pure-Python fallback, which every caller
keeps and which gives the same answers. The tests run both.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ckinspect import settings


def load(name: str) -> ModuleType | None:
    """The compiled module ``ckinspect._native.<name>``, or None to take the pure-Python path."""
    if settings.pure():
        return None
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ImportError:
        return None
