"""The one call the CLI and the TUI both make: open, analyze, check, and (unless quick) scan values.

    ckpt = inspect_path(target, quick=False, progress=None)
    ckpt = inspect_path(target, keep=lambda listed: Kept(names, budget))   # the scan also keeps those values
    ckpt, layout = list_path(target); check_values(ckpt, layout)           # the same, in two steps

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

    from ckinspect.analysis.layouts import Layout


def inspect_path(
    target: Any, quick: bool = False, progress: Any = None, keep: Any = None, *, structure_only: bool = False
) -> Checkpoint:
    """`structure_only`: no value will ever be read from what this returns (--quick's report, diff, last-good),
    so a DCP folder is listed from its `.metadata` alone (open_checkpoint); implies `quick`."""
    ckpt, layout = list_path(target, structure_only=structure_only)
    if not (quick or structure_only):
        check_values(ckpt, layout, progress, keep)
    return ckpt


def list_path(target: Any, *, structure_only: bool = False) -> tuple[Checkpoint, Layout]:
    """inspect_path's listing (the reader, the layout, the structural checks), and the layout check_values
    needs: what a run's structural pass keeps, so that the values of the one candidate it names are read
    from this same listing, not from the file (or the object store) listed again."""
    raw = target.path if hasattr(target, "path") else target
    ckpt = open_checkpoint(as_path(raw), structure_only=structure_only)
    step("tensors to check", len(ckpt.tensors))
    layout = analyze_layout(ckpt)
    ckpt.findings.extend(structural_findings(ckpt, layout=layout))
    return ckpt, layout


def check_values(ckpt: Checkpoint, layout: Layout, progress: Any = None, keep: Any = None) -> None:
    """The value findings of a listed checkpoint (not listed with structure_only), appended to its findings:
    CRCs, NaN/Inf and float16 range (the scan), equal storages, the weights file beside a resume file."""
    if not ckpt.tensors:
        return
    from ckinspect.analysis.scan import scan_values  # here, so --quick never pays for the value scanner

    kept = keep(ckpt) if keep is not None else None  # what to keep depends on what the listing found
    # the report shows findings only: the checks alone (no min, max, mean or std) decide them all
    ckpt.findings.extend(scan_values(ckpt, progress, kept, mean_std=False).findings)
    ckpt.findings.extend(duplicate_storages(ckpt))  # reads only candidates the listing found
    ckpt.findings.extend(weights_beside(ckpt, layout))  # reads the paired weights file, if there is one
