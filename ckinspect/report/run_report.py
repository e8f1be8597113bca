"""The run view: a run's checkpoints, oldest first, each with step, time, size, verdict and reasons.

Renders the `run` object of `Run.to_json()` (the same data `ckinspect last-good --format json` prints) as
text (rich) or Markdown; the last good checkpoint is marked.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from ckinspect.fmt import human_bytes, md_code, md_text, terminal_safe
from ckinspect.vocab import NOT_JUDGED

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from rich.console import RenderableType

VERDICT_STYLE = {"good": "green", "not-resumable": "yellow"}  # every other verdict is red
LAST_GOOD_MARK = "★"


def when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds)) if seconds else "-"


def shown_path(path: str, run_path: str) -> str:
    try:
        relative = Path(path).relative_to(run_path)
    except ValueError:
        return path
    return str(relative) if str(relative) != "." else Path(path).name


def verdict_line(run: Mapping[str, Any]) -> str:
    best = run.get("last_good")
    count = len(run["checkpoints"])
    if best is None:
        return f"{count} checkpoint(s); none is whole, intact, safe and resumable"
    unjudged = sum(1 for c in run["checkpoints"] if c["verdict"] == NOT_JUDGED)
    older = f" ({unjudged} older not judged: the answer did not need them; --all judges them)" if unjudged else ""
    return f"{count} checkpoint(s); last good: {shown_path(best, run['path'])}{older}"


def text_section(run: Mapping[str, Any]) -> RenderableType:
    from rich.console import Group
    from rich.text import Text

    from ckinspect.report.console import Cell, NameTable, title_line

    rows = []
    for ckpt in run["checkpoints"]:
        mark = LAST_GOOD_MARK if ckpt["path"] == run.get("last_good") else " "
        style = "dim" if ckpt["verdict"] == NOT_JUDGED else VERDICT_STYLE.get(ckpt["verdict"], "red")
        rows.append([
            Cell(f"{mark} {terminal_safe(shown_path(ckpt['path'], run['path']))}"),
            Cell(ckpt["framework"]),
            Cell("" if ckpt["step"] is None else str(ckpt["step"])),
            Cell(when(ckpt["time"])),
            Cell(human_bytes(ckpt["size"])),
            Cell(ckpt["verdict"], style),
        ])  # fmt: skip
    headers = [("  checkpoint", "left"), ("framework", "left"), ("step", "right"), ("time", "left"),
               ("size", "right"), ("verdict", "left")]  # fmt: skip
    table = NameTable(headers, rows)  # a name too wide for its column takes a line of its own, whole
    parts: list[RenderableType] = [title_line(terminal_safe(run["path"]), "run"), table]
    for finding in run["findings"]:
        parts.append(Text(f"✗ {finding['code']}: {terminal_safe(finding['message'])}", style="red"))
    for ckpt in run["checkpoints"]:
        if ckpt["reasons"]:
            parts.append(
                Text(terminal_safe(f"{shown_path(ckpt['path'], run['path'])}: {ckpt['verdict']}"), style="bold")
            )
            parts.extend(Text(f"  {terminal_safe(reason)}") for reason in ckpt["reasons"])
    parts.append(Text(terminal_safe(verdict_line(run)), style="bold"))
    return Group(*parts)


def markdown_section(run: Mapping[str, Any]) -> list[str]:
    out = [f"### Run {md_code(run['path'])}", "", f"**{md_text(verdict_line(run))}**", ""]
    out += [
        "| | checkpoint | framework | step | time | size | verdict | reasons |",
        "|---|---|---|--:|---|--:|---|---|",
    ]
    for ckpt in run["checkpoints"]:
        mark = LAST_GOOD_MARK if ckpt["path"] == run.get("last_good") else ""
        reasons = "<br>".join(md_text(r) for r in ckpt["reasons"]) or "–"
        step = "" if ckpt["step"] is None else ckpt["step"]
        out.append(
            f"| {mark} | {md_code(shown_path(ckpt['path'], run['path']))} | {ckpt['framework']} | {step} "
            f"| {when(ckpt['time'])} | {human_bytes(ckpt['size'])} | {ckpt['verdict']} | {reasons} |"
        )
    for finding in run["findings"]:
        out.append(f"\n❌ `{finding['code']}` {md_text(finding['message'])}")
    out.append("")
    return out
