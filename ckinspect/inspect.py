"""The one call the CLI and the TUI both make: open, analyze, check, and (unless quick) scan values.

    ckpt = inspect_path(target, quick=False, progress=None)

`target` is a `discover.Target` or a path. Never raises for bad content (that is a CORRUPT finding);
raises CkinspectError only for a path that cannot be opened at all.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from typing import Any

from ckinspect.anatomy import analyze_layout
from ckinspect.checks import structural_findings
from ckinspect.formats import open_checkpoint
from ckinspect.model import Checkpoint


def inspect_path(target: Any, quick: bool = False, progress: Any = None) -> Checkpoint:
    path = Path(target.path if hasattr(target, "path") else os.fspath(target))
    ckpt = open_checkpoint(path)
    layout = analyze_layout(ckpt)
    ckpt.findings.extend(structural_findings(ckpt, layout=layout))
    if not quick:
        scan = optional_module("ckinspect.scan")
        if scan is not None and ckpt.tensors:
            ckpt.findings.extend(scan.scan_values(ckpt, progress).findings)
    return ckpt


def optional_module(name: str) -> Any:
    """A module another part of the team owns, or None while it has not landed (import errors inside it still raise)."""
    if importlib.util.find_spec(name) is None:
        return None
    return importlib.import_module(name)
