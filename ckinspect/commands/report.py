"""`ckinspect --report PATH...`: a headless report of every checkpoint the paths hold.

Exit 0 when no finding reaches --fail-on, 1 when one does, 2 for usage errors (a missing path, an
unwritable --output: one line, raised as CkinspectError and printed by the CLI).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ckinspect.discover import find_checkpoints
from ckinspect.errors import CkinspectError
from ckinspect.inspect import inspect_path
from ckinspect.model import Checkpoint, fails


def run(args: argparse.Namespace) -> int:
    targets = find_checkpoints(args.paths)
    if not targets:
        raise CkinspectError(f"no checkpoint found in {', '.join(map(str, args.paths))}")
    checkpoints = [_inspect(target, args, index, len(targets)) for index, target in enumerate(targets)]
    to_terminal = not args.output and sys.stdout.isatty()
    output = render(checkpoints, args.format, color=to_terminal)
    write(output, args.output)
    findings = [f for ckpt in checkpoints for f in ckpt.findings]
    return 1 if fails(findings, args.fail_on) else 0


def _inspect(target: Any, args: argparse.Namespace, index: int, count: int) -> Checkpoint:
    if args.quick:
        return inspect_path(target, quick=True)
    from ckinspect.scan import terminal_progress

    label = f"scanning {Path(target.path).name}" + (f" ({index + 1}/{count})" if count > 1 else "")
    with terminal_progress(label, enabled=not getattr(args, "no_progress", False)) as progress:
        return inspect_path(target, quick=False, progress=progress)


def render(checkpoints: list[Checkpoint], fmt: str, color: bool = False) -> str:
    from ckinspect.report import json_report

    report = json_report.build(checkpoints)
    if fmt == "json":
        return json_report.render(report)
    if fmt == "markdown":
        from ckinspect.report import markdown

        return markdown.render(report)
    from ckinspect.report import text
    from ckinspect.report.console import text_width

    return text.render(report, width=text_width(color), color=color)


def write(output: str, destination: str | None) -> None:
    if not destination:
        sys.stdout.write(output)
        sys.stdout.flush()
        return
    from ckinspect.atomic import atomic_write_text

    try:
        atomic_write_text(destination, output)
    except OSError as exc:
        raise CkinspectError(f"{destination}: cannot write the report ({exc.strerror or exc})") from None
