"""The text report: rich tables with humanized sizes, drawn from the JSON report's data.

Reads well at 80 columns: long tensor names fold, the widest table has six narrow columns.
"""

from __future__ import annotations

import functools
import io
import os
from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from ckinspect.fmt import human_bytes, percent, shape_text
from ckinspect.report.common import (
    ALL_TENSORS_UP_TO,
    composite_rows,
    finding_counts,
    largest,
    metadata_line,
    optimizer_share,
    summary_line,
    terminal_copy,
)
from ckinspect.report.console import (
    Cell,
    Cropped,
    NameTable,
    Title,
    Wrapped,
    finish,
    make_console,
    make_table,
    wrap_words,
)
from ckinspect.vocab import GROUPS

SEVERITY_STYLE = {"error": ("✗", "bold red"), "warning": ("!", "yellow"), "info": ("i", "cyan")}


def render(report: Mapping[str, Any], width: int = 80, color: bool = False, verbose: bool = False) -> str:
    """One file: every detail. Several, or a run folder: the summary first (a run's timeline and verdict,
    then one line per file), then only what needs a look (findings); `verbose` adds each file's groups
    and tensors."""
    # names and messages come from the file: no control sequence reaches the terminal. Only the tensors a
    # table shows are copied: a 1024-rank DCP save lists millions
    report = terminal_copy({**report, "files": [_shown_tensors(entry) for entry in report["files"]]})
    buffer = io.StringIO()
    console = make_console(buffer, width, color)
    say = functools.partial(console.print, crop=False)  # a name wider than the line overflows it, never cut
    files = report["files"]
    if (len(files) > 1 or report.get("runs")) and not verbose and report.get("diff") is None:
        _summary_first(say, report)
    else:
        _every_detail(say, report)
    return finish(buffer)


def _summary_first(say: Callable[..., None], report: Mapping[str, Any]) -> None:
    """Several files or a run folder: the run's timeline and verdict, one line per file, then only the
    files that need a look, each with its findings."""
    if report.get("runs"):  # a run folder: its timeline and last good answer are the summary
        from ckinspect.report.run_report import text_section

        for run in report["runs"]:
            say(Cropped(text_section(run)))
            say()
    say(summary_table(report["files"]))
    for paths, entry in needing_a_look(report["files"]):
        say()
        say(Title(paths[0], entry["format"], human_bytes(entry["file_bytes"])))
        if len(paths) > 1:
            say(Text(f"and {len(paths) - 1} more file(s) with the same findings (--verbose lists each)", style="dim"))
        if entry.get("cut_short"):
            say(cut_short_line(entry))
        say(findings_block(entry["findings"]))
    say()
    say(Text("--verbose adds each file's groups and tensors", style="dim"))
    say(summary_line(report["summary"]))


def _every_detail(say: Callable[..., None], report: Mapping[str, Any]) -> None:
    """One file (or --verbose, or a diff's two): every file's section, then the table and the runs."""
    files = report["files"]
    for index, entry in enumerate(files):
        if index:
            say()
        say(file_section(entry))
    if len(files) > 1:
        say()
        say(summary_table(files))
    if report.get("runs"):
        from ckinspect.report.run_report import text_section

        for run in report["runs"]:
            say()
            say(Cropped(text_section(run)))
    if report.get("diff") is None:
        say(summary_line(report["summary"]))


def _shown_tensors(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    """The entry with only the tensors tensors_table shows (and how many there are)."""
    tensors = entry.get("tensors", [])
    if len(tensors) <= ALL_TENSORS_UP_TO:
        return entry
    return {**entry, "tensors": largest(tensors), "tensors_total": len(tensors)}


def needing_a_look(files: list[Mapping[str, Any]]) -> list[tuple[list[str], Mapping[str, Any]]]:
    """Files with findings, those whose findings read the same (24 rank files each lacking the step counter)
    once, with the paths of the others."""
    groups: dict[Any, tuple[list[str], Mapping[str, Any]]] = {}
    for entry in files:
        if not (entry["findings"] or entry.get("cut_short")):
            continue
        same = tuple((f["code"], f["severity"], f["message"], f.get("tensor")) for f in entry["findings"])
        key = (same, entry["format"]) if not entry.get("cut_short") else (entry["path"],)
        groups.setdefault(key, ([], entry))[0].append(entry["path"])
    return list(groups.values())


def file_section(entry: Mapping[str, Any]) -> RenderableType:
    parts: list[RenderableType] = []
    layout = f"{entry['layout']} layout" if entry.get("layout") not in (None, "unknown") else ""
    parts.append(Title(entry["path"], entry["format"], layout, human_bytes(entry["file_bytes"])))
    meta = metadata_line(entry["metadata"])
    if meta:
        parts.append(Text(meta, style="dim"))
    if entry["tensor_count"]:
        parts.append(Cropped(groups_table(entry)))
        parts.append(Text(bytes_line(entry)))
        if entry.get("cut_short"):
            parts.append(cut_short_line(entry))
        parts.append(tensors_table(entry))
    else:
        parts.append(Text("no tensors", style="dim"))
    if entry.get("composite_tensors"):
        parts.append(composites_table(entry))
    parts.append(findings_block(entry["findings"]))
    return Group(*parts)


def composites_table(entry: Mapping[str, Any]) -> NameTable:
    """Sparse, nested, meta, quantized-per-channel tensors and wrapper subclasses as wholes (report/common)."""
    total = len(entry["composite_tensors"])
    rows = [[Cell(name), Cell(kind), Cell(dtype), Cell(shape), Cell(size), Cell(parts)]
            for name, kind, dtype, shape, size, parts in composite_rows(entry)]  # fmt: skip
    title = "composite tensors (each part is also listed as a tensor)"
    if total > len(rows):
        title = f"first {len(rows)} of {total:,} composite tensors (--format json lists all)"
    headers = [("composite", "left"), ("layout", "left"), ("dtype", "left"), ("shape", "left"), ("size", "right"),
               ("parts", "left")]  # fmt: skip
    return NameTable(headers, rows, title)


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


def tensors_table(entry: Mapping[str, Any]) -> NameTable:
    """Tensor names whole on every width (a long one takes a line of its own), shapes never folded."""
    tensors = entry.get("tensors", [])
    file_bytes = entry["file_bytes"]
    title = ""
    shown = tensors
    total = entry.get("tensors_total", len(tensors))  # render copied only the shown ones (_shown_tensors)
    if total > ALL_TENSORS_UP_TO:
        shown = largest(tensors)
        title = f"largest {len(shown)} of {total:,} tensors (--format json lists all)"
    rows = []
    for t in shown:
        if t.get("missing"):  # its bytes are not in the file (cut short): as the TUI shows it
            size, share = Cell("missing", "bold red"), Cell("—")
        else:
            size = Cell(human_bytes(t["bytes"]))
            share = Cell(percent(t["bytes"] / file_bytes) if file_bytes else "-")
        rows.append([Cell(t["name"]), Cell(t["group"]), Cell(t["dtype"]), Cell(shape_text(t["shape"])), size, share])
    headers = [("tensor", "left"), ("group", "left"), ("dtype", "left"), ("shape", "left"), ("size", "right"),
               ("of file", "right")]  # fmt: skip
    return NameTable(headers, rows, title)


def cut_short_line(entry: Mapping[str, Any]) -> RenderableType:
    """A file cut short says so, and what recovers the rest (`ckinspect salvage`), as the TUI's header does."""
    short = entry["cut_short"]
    return Wrapped(
        f"✗ {short['missing_tensors']:,} of {entry['tensor_count']:,} tensors missing (cut short): "
        f"{short['salvage']} keeps the whole ones",
        style="bold red",
    )


def findings_block(findings: list[Mapping[str, Any]]) -> RenderableType:
    """One finding a paragraph: its code, then the message wrapped at spaces under a hanging indent, so a
    name in it is never split (a word wider than the line overflows it)."""
    if not findings:
        return Text("✓ no findings", style="green")
    return FindingLines(findings)


class FindingLines:
    def __init__(self, findings: list[Mapping[str, Any]]) -> None:
        self.findings = findings

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        heads = [f"{SEVERITY_STYLE.get(f['severity'], ('?', ''))[0]} {f['code']}" for f in self.findings]
        indent = max(len(h) for h in heads) + 1
        for finding, head in zip(self.findings, heads, strict=True):
            message = finding["message"]
            if finding.get("tensor") and finding["tensor"] not in message:
                message += f" [{finding['tensor']}]"
            lines = wrap_words(message, max(20, options.max_width - indent))
            out = Text(no_wrap=True, overflow="ignore")
            out.append(head.ljust(indent), style=SEVERITY_STYLE.get(finding["severity"], ("?", ""))[1])
            out.append(("\n" + " " * indent).join(lines))
            yield out


def summary_table(files: list[Mapping[str, Any]]) -> RenderableType:
    base = common_folder([entry["path"] for entry in files])
    title = Text.assemble(("summary", "bold"), f" of {len(files)} checkpoints" + (f" in {base}" if base else ""))
    rows = [
        [
            Cell(_relative(entry["path"], base) if base else entry["path"]),
            Cell(entry["format"]),
            Cell(human_bytes(entry["file_bytes"])),
            Cell(percent(optimizer_share(entry)) if entry["groups"]["optimizer"]["tensor_count"] else "-"),
            Cell(finding_counts(entry["findings"]) or "none"),
        ]
        for entry in files
    ]
    headers = [("checkpoint", "left"), ("format", "left"), ("size", "right"), ("optim", "right"), ("findings", "left")]
    table = NameTable(headers, rows)  # a path too long for its column on a line of its own, whole
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
