"""The text report: rich tables with humanized sizes, drawn from the JSON report's data.

Reads well at 80 columns: long tensor names fold, the widest table has six narrow columns.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from typing import Any

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ckinspect.fmt import human_bytes, percent, shape_text
from ckinspect.report.common import (
    ALL_TENSORS_UP_TO,
    finding_counts,
    largest,
    metadata_line,
    optimizer_share,
    summary_line,
    terminal_copy,
)
from ckinspect.report.console import Wrapped, finish, make_console, make_table, title_line
from ckinspect.vocab import GROUPS

SEVERITY_STYLE = {"error": ("✗", "bold red"), "warning": ("!", "yellow"), "info": ("i", "cyan")}


def render(report: Mapping[str, Any], width: int = 80, color: bool = False, verbose: bool = False) -> str:
    """One file: every detail. Several: the summary first, then only what needs a look (findings);
    `verbose` adds each file's groups and tensors."""
    # names and messages come from the file: no control sequence reaches the terminal. Only the tensors a
    # table shows are copied: a 1024-rank DCP save lists millions
    report = terminal_copy({**report, "files": [_shown_tensors(entry) for entry in report["files"]]})
    buffer = io.StringIO()
    console = make_console(buffer, width, color)
    files = report["files"]
    if len(files) > 1 and not verbose and report.get("diff") is None and not report.get("runs"):
        console.print(summary_table(files))
        for entry in files:
            if entry["findings"] or entry.get("cut_short"):
                console.print()
                console.print(title_line(entry["path"], entry["format"], human_bytes(entry["file_bytes"])))
                if entry.get("cut_short"):
                    console.print(cut_short_line(entry))
                console.print(findings_block(entry["findings"]))
        console.print()
        console.print(Text("--verbose adds each checkpoint's groups and tensors", style="dim"))
        console.print(summary_line(report["summary"]))
        return finish(buffer)
    for index, entry in enumerate(files):
        if index:
            console.print()
        console.print(file_section(entry))
    if len(files) > 1:
        console.print()
        console.print(summary_table(files))
    if report.get("runs"):
        from ckinspect.report.run_report import text_section

        for run in report["runs"]:
            console.print()
            console.print(text_section(run))
    if report.get("diff") is None:
        console.print(summary_line(report["summary"]))
    return finish(buffer)


def _shown_tensors(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    """The entry with only the tensors tensors_table shows (and how many there are)."""
    tensors = entry.get("tensors", [])
    if len(tensors) <= ALL_TENSORS_UP_TO:
        return entry
    return {**entry, "tensors": largest(tensors), "tensors_total": len(tensors)}


def file_section(entry: Mapping[str, Any]) -> RenderableType:
    parts: list[RenderableType] = []
    layout = f"{entry['layout']} layout" if entry.get("layout") not in (None, "unknown") else ""
    parts.append(title_line(entry["path"], entry["format"], layout, human_bytes(entry["file_bytes"])))
    meta = metadata_line(entry["metadata"])
    if meta:
        parts.append(Text(meta, style="dim"))
    if entry["tensor_count"]:
        parts.append(groups_table(entry))
        parts.append(Text(bytes_line(entry)))
        if entry.get("cut_short"):
            parts.append(cut_short_line(entry))
        parts.append(tensors_table(entry))
    else:
        parts.append(Text("no tensors", style="dim"))
    parts.append(findings_block(entry["findings"]))
    return Group(*parts)


def groups_table(entry: Mapping[str, Any]) -> Table:
    """Bytes and share per group; for a file cut short, the bytes present beside the declared ones, and
    the share of the declared (what the whole file held)."""
    table = make_table(show_footer=True)
    total = entry["tensor_bytes"]
    declared = (entry.get("cut_short") or {}).get("declared_bytes")
    table.add_column("group", footer="total")
    table.add_column("tensors", justify="right", footer=f"{entry['tensor_count']:,}")
    table.add_column("present" if declared else "size", justify="right", footer=human_bytes(total))
    if declared:
        table.add_column("declared", justify="right", footer=human_bytes(sum(declared.values())))
    table.add_column("share", justify="right", footer="100.0%" if total else "-")
    for group in GROUPS:
        stats = entry["groups"][group]
        if not stats["tensor_count"]:
            continue
        row: tuple[str, ...]
        if declared:
            whole = sum(declared.values())
            share = percent(declared[group] / whole) if whole else "-"
            row = (human_bytes(stats["bytes"]), human_bytes(declared[group]), share)
        else:
            row = (human_bytes(stats["bytes"]), percent(stats["bytes"] / total) if total else "-")
        table.add_row(group, f"{stats['tensor_count']:,}", *row)
    return table


def bytes_line(entry: Mapping[str, Any]) -> str:
    parts = []
    short = entry.get("cut_short")
    if short and (entry["groups"]["optimizer"]["bytes"] or short["declared_bytes"]["optimizer"]):
        parts.append(
            f"optimizer share {percent(short['declared_optimizer_share'])} of the declared sizes "
            f"({percent(entry['optimizer_share'])} of the bytes present)"
        )
    elif entry["groups"]["optimizer"]["bytes"]:
        parts.append(f"optimizer share {percent(entry['optimizer_share'])} of tensor bytes")
    unused = entry.get("unused_bytes", entry["storage_bytes"] - entry["tensor_bytes"])
    parts.append(f"storages {human_bytes(entry['storage_bytes'])}")
    line = " · ".join(parts)
    if unused:
        line += f", {human_bytes(unused)} used by no tensor"
    return line


def tensors_table(entry: Mapping[str, Any]) -> Table:
    tensors = entry.get("tensors", [])
    file_bytes = entry["file_bytes"]
    total = entry.get("tensors_total", len(tensors))
    if total > ALL_TENSORS_UP_TO:
        shown = largest(tensors)
        title = f"largest {len(shown)} of {total:,} tensors (--format json lists all)"
    else:
        shown = tensors
        title = None
    table = make_table(title)
    table.add_column("tensor", overflow="fold", ratio=1, min_width=16)
    table.add_column("group", no_wrap=True)
    table.add_column("dtype", no_wrap=True)
    table.add_column("shape", overflow="fold", max_width=18)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("of file", justify="right", no_wrap=True)
    for t in shown:
        if t.get("missing"):  # its bytes are not in the file (cut short): as the TUI shows it
            size, share = Text("missing", style="bold red"), "—"
        else:
            size, share = Text(human_bytes(t["bytes"])), percent(t["bytes"] / file_bytes) if file_bytes else "-"
        table.add_row(Wrapped(t["name"]), t["group"], t["dtype"], shape_text(t["shape"]), size, share)
    return table


def cut_short_line(entry: Mapping[str, Any]) -> RenderableType:
    """A file cut short says so, and what recovers the rest (`ckinspect salvage`), as the TUI's header does."""
    short = entry["cut_short"]
    return Wrapped(
        f"✗ {short['missing_tensors']:,} of {entry['tensor_count']:,} tensors missing (cut short): "
        f"{short['salvage']} keeps the whole ones",
        style="bold red",
    )


def findings_block(findings: list[Mapping[str, Any]]) -> RenderableType:
    if not findings:
        return Text("✓ no findings", style="green")
    table = Table.grid(padding=(0, 1))
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    for finding in findings:
        mark, style = SEVERITY_STYLE.get(finding["severity"], ("?", ""))
        head = Text(f"{mark} {finding['code']}", style=style)
        message = finding["message"]
        if finding.get("tensor") and finding["tensor"] not in message:
            message += f" [{finding['tensor']}]"
        table.add_row(head, Wrapped(message))
    return table


def summary_table(files: list[Mapping[str, Any]]) -> RenderableType:
    base = common_folder([entry["path"] for entry in files])
    title = Text.assemble(("summary", "bold"), f" of {len(files)} checkpoints" + (f" in {base}" if base else ""))
    table = make_table(collapse_padding=True)  # one space between columns: room for folder/name.pth at 80
    table.add_column("checkpoint", overflow="fold", ratio=1)
    table.add_column("format", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("optim", justify="right", no_wrap=True)
    table.add_column("findings", no_wrap=True)
    for entry in files:
        table.add_row(
            escape(_relative(entry["path"], base) if base else entry["path"]),
            entry["format"],
            human_bytes(entry["file_bytes"]),
            percent(optimizer_share(entry)) if entry["groups"]["optimizer"]["tensor_count"] else "-",
            finding_counts(entry["findings"]) or "none",
        )
    return Group(title, table)


def _relative(path: str, base: str) -> str:
    """`path` from inside `base` (common_folder's), a URL's scheme set aside."""
    scheme = base[: len(base) - len(base.split("://")[-1])]  # "s3://", or "" for a local folder
    return os.path.relpath(path[len(scheme) :], base[len(scheme) :])


def common_folder(paths: list[str]) -> str:
    """The folder all these checkpoints are in, when it is more than the current one; else "". URLs under
    one scheme keep their `scheme://` (commonpath would fold its two slashes into one)."""
    schemes = {p.split("://", 1)[0] + "://" if "://" in p else "" for p in paths}
    scheme = schemes.pop() if len(schemes) == 1 else None
    if scheme is None:
        return ""  # URLs of several kinds, or URLs and local paths
    try:
        base = os.path.commonpath([os.path.dirname(p[len(scheme) :]) or "." for p in paths])
    except ValueError:  # absolute and relative paths mixed
        return ""
    return "" if base in ("", ".") else scheme + base
