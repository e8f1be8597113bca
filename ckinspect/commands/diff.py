"""`ckinspect diff A B --report`: exit 0 identical, 1 different, 2 error (or no verdict possible)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ckinspect.analysis.inspect import inspect_path
from ckinspect.commands.emit import emit, render_ci, text_layout
from ckinspect.io.remote import is_url
from ckinspect.model import Checkpoint
from ckinspect.vocab import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, CkinspectError


def open_for_command(path: str | Path) -> Checkpoint:
    """Open + analyze + structural checks, with a usage error (exit 2) for a path that does not exist."""
    if is_url(path):  # opened by range reads; a missing or denied object is a one-line error from the read
        return inspect_path(path, quick=True)
    target = Path(path)
    if not target.exists():
        raise CkinspectError(f"{path}: no such file or folder")
    return inspect_path(target, quick=True)


def _unreadable(ckpt: Checkpoint) -> str | None:
    """Why a checkpoint cannot be diffed at all, or None (the TUI refuses to open such a diff)."""
    if ckpt.format == "unknown" or (not ckpt.tensors and any(f.code == "CORRUPT" for f in ckpt.findings)):
        why = next((f.message for f in ckpt.findings if f.code == "CORRUPT"), "not a checkpoint")
        return f"{ckpt.path}: {why}"
    return None


def run(args: argparse.Namespace) -> int:
    from ckinspect.analysis.diff import DiffResult, diff_checkpoints, raw_bytes_differ, unsafe_side, why_not_comparable
    from ckinspect.report import diff_report

    a = open_for_command(args.a)
    b = open_for_command(args.b)
    only, atol = getattr(args, "only", None), getattr(args, "atol", 0.0) or 0.0
    reason = why_not_comparable(a, b)
    if reason is not None:  # no tensor verdict: the files' own bytes decide, or nothing does
        result = DiffResult(a.path, b.path, match="tensors not compared", only=only, atol=atol, not_compared=reason)
        result.raw_bytes_differ = raw_bytes_differ(a.path, b.path)
    else:
        from ckinspect.analysis.scan import terminal_progress

        with terminal_progress("comparing", enabled=not getattr(args, "no_progress", False)) as progress:
            result = diff_checkpoints(a, b, only=only, atol=atol, progress=progress)
        if only and not (result.same or result.changed or result.only_a or result.only_b or result.unreadable):
            raise CkinspectError(f"neither file has tensors in group(s) {', '.join(only)}: nothing to compare")
        result.unsafe = unsafe_side(a, b)
        if result.unreadable or result.unsafe:
            result.raw_bytes_differ = raw_bytes_differ(a.path, b.path)
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
    return {"identical": EXIT_OK, "different": EXIT_FINDINGS}.get(result.verdict, EXIT_ERROR)
