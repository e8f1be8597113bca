"""Optional compiled fast paths, one module per ``*.c`` file here (built by setup.py).

``load(name)`` gives the compiled module or None: None when it was not built (no compiler, an interpreter
it does not build for) or when ``CKINSPECT_PURE=1`` asks for the pure-Python fallback, which every caller
keeps and which gives the same answers. The tests run both.

A module built before its ``.c`` last changed (a checkout that pulled new C and was not rebuilt with
``python setup.py build_ext --inplace``) is not used either: the Python beside it may expect what only the new
C does, and an old build then answered wrong (a 160,000-tensor resume file listed with no tensors). Only a source
checkout (``setup.py`` two folders up) is compared: an installed wheel's files carry the times pip wrote them.
"""

from __future__ import annotations

import functools
import importlib
import os
from types import ModuleType

from ckinspect import settings


def load(name: str) -> ModuleType | None:
    """The compiled module ``ckinspect._native.<name>``, or None to take the pure-Python path."""
    if settings.pure():
        return None
    try:
        module = importlib.import_module(f"{__name__}.{name}")
    except ImportError:
        return None
    return None if _stale(name, module.__file__) else module


@functools.cache
def _stale(name: str, built: str | None) -> bool:
    if built is None:
        return False
    here = os.path.dirname(built)
    checkout = os.path.isfile(os.path.join(here, os.pardir, os.pardir, "setup.py"))
    return checkout and built_before_source(built, os.path.join(here, f"{name}.c"))


def built_before_source(built: str, source: str) -> bool:
    """Whether the compiled file `built` is older than the C `source` it was built from (False without a source)."""
    try:
        return os.stat(source).st_mtime_ns > os.stat(built).st_mtime_ns
    except OSError:
        return False
