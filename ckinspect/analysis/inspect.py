"""The one call the CLI and the TUI both make: open, analyze, check, and (unless quick) scan values.

    ckpt = inspect_path(target, quick=False, progress=None)
    ckpt = inspect_path(target, keep=lambda listed: Kept(names, budget))   # the scan also keeps those values

`target` is a `discover.Target` or a path. Never raises for bad content (that is a CORRUPT finding);
raises CkinspectError only for a path that cannot be opened at all.
"""

from __future__ import annotations

from ckinspect.analysis.anatomy import analyze_layout
from ckinspect.analysis.checks import duplicate_storages, structural_findings
from ckinspect.analysis.pairs import weights_beside
from ckinspect.formats import open_checkpoint
from ckinspect.io.remote import as_path
from ckinspect.model import Checkpoint
from ckinspect.steps import step

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def inspect_path(
    target: Any, quick: bool = False, progress: Any = None, keep: Any = None, *, structure_only: bool = False
) -> Checkpoint:
    """`structure_only`: no value will ever be read from what this returns (--quick's report, diff, last-good),
    so a DCP folder is listed from its `.metadata` alone (open_checkpoint); implies `quick`."""
    raw = target.path if hasattr(target, "path") else target
    ckpt = open_checkpoint(as_path(raw), structure_only=structure_only)
    quick = quick or structure_only
    step("tensors to check", len(ckpt.tensors))
    layout = analyze_layout(ckpt)
    ckpt.findings.extend(structural_findings(ckpt, layout=layout))
    if not quick and ckpt.tensors:
        from ckinspect.analysis.scan import scan_values  # here, so --quick never pays for the value scanner

        kept = keep(ckpt) if keep is not None else None  # what to keep depends on what the listing found
        # the report shows findings only: the checks alone (no min, max, mean or std) decide them all
        ckpt.findings.extend(scan_values(ckpt, progress, kept, mean_std=False).findings)
        ckpt.findings.extend(duplicate_storages(ckpt))  # reads only candidates the listing found
        ckpt.findings.extend(weights_beside(ckpt, layout))  # reads the paired weights file, if there is one
    return ckpt
