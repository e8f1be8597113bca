"""`ckinspect diff A B --report`: exit 0 identical, 1 different, 2 error (or no verdict possible)."""

from __future__ import annotations

import argparse

from ckinspect.analysis.diff import why_not_comparable
from ckinspect.api import compare, open_checked
from ckinspect.commands.emit import emit, render_ci, text_layout
from ckinspect.formats.tree import no_gc
from ckinspect.lifetime import keep_to_the_end
from ckinspect.model import Checkpoint
from ckinspect.vocab import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, SAME_STRUCTURE


def _unreadable(ckpt: Checkpoint) -> str | None:
    """Why a checkpoint cannot be diffed at all, or None (the TUI refuses to open such a diff)."""
    if ckpt.format == "unknown" or (not ckpt.tensors and any(f.code == "CORRUPT" for f in ckpt.findings)):
        why = next((f.message for f in ckpt.findings if f.code == "CORRUPT"), "not a checkpoint")
        return f"{ckpt.path}: {why}"
    return None


@no_gc()  # a record per tensor (descriptors, changes, report rows), no cycles: collector passes only add time
def run(args: argparse.Namespace) -> int:
    from ckinspect.report import diff_report

    quick = bool(getattr(args, "quick", False))  # structure only: no storage byte read
    a = open_checked(args.a, structure_only=quick)
    b = open_checked(args.b, structure_only=quick)
    keep_to_the_end(a, b)  # the console script then never frees them one by one (lifetime)
    only, atol = getattr(args, "only", None), getattr(args, "atol", 0.0) or 0.0
    if why_not_comparable(a, b) is not None:
        result = compare(a, b, only=only, atol=atol, quick=quick)
    else:
        from ckinspect.analysis.scan import terminal_progress

        with terminal_progress("comparing", enabled=not getattr(args, "no_progress", False)) as progress:
            result = compare(a, b, only=only, atol=atol, quick=quick, progress=progress)
    fmt = getattr(args, "format", "text")
    if fmt in ("sarif", "junit"):
        from ckinspect.report.subjects import from_diff

        text = render_ci(fmt, from_diff(a, b, result), args, f"ckinspect diff {a.path} {b.path}")
    elif fmt == "json":
        text = diff_report.render_json(diff_report.build_document(a, b, result))
    elif fmt == "markdown":
        text = diff_report.render_markdown(result.to_json(), a, b)
    else:
        text = diff_report.render_text(result.to_json(), a, b, *text_layout(args))
    emit(text, getattr(args, "output", None))
    # "unknown": some tensors could not be read and nothing else shows a difference: no honest verdict
    return {"identical": EXIT_OK, SAME_STRUCTURE: EXIT_OK, "different": EXIT_FINDINGS}.get(result.verdict, EXIT_ERROR)
