"""The Markdown report, fit for a CI job summary (`>> $GITHUB_STEP_SUMMARY`): one overview table,
then per checkpoint its groups, findings, and the largest tensors folded in a <details> block."""

from __future__ import annotations

from collections.abc import Mapping

from ckinspect.fmt import human_bytes, md_code, md_text, percent, shape_text
from ckinspect.report.common import (
    composite_rows,
    finding_counts,
    largest,
    metadata_line,
    optimizer_share,
    summary_line,
)
from ckinspect.vocab import GROUPS, SEVERITY_RANK

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

ICON = {"error": "❌", "warning": "⚠️", "info": "ℹ️"}


def render(report: Mapping[str, Any]) -> str:
    files = report["files"]
    out = ["## ckinspect report", ""]
    if files:
        out.append(f"**{summary_line(report['summary'])}**")
        out.append("")
        out += [
            "| checkpoint | format | size | tensors | optimizer share | findings |",
            "|---|---|--:|--:|--:|---|",
        ]
        for entry in files:
            share = percent(optimizer_share(entry)) if entry["groups"]["optimizer"]["tensor_count"] else "–"
            status = _status(entry["findings"])
            out.append(
                f"| {md_code(entry['path'])} | {entry['format']} | {human_bytes(entry['file_bytes'])} "
                f"| {entry['tensor_count']:,} | {share} | {status} |"
            )
        out.append("")
    for entry in files:
        out += file_section(entry)
    if report.get("runs"):
        from ckinspect.report.run_report import markdown_section

        for run in report["runs"]:
            out += markdown_section(run)
    return "\n".join(out).rstrip() + "\n"


def _status(findings: list[Mapping[str, Any]]) -> str:
    if not findings:
        return "✅ none"
    worst = max((f["severity"] for f in findings), key=SEVERITY_RANK.__getitem__)
    return f"{ICON[worst]} {finding_counts(findings)}"


def file_section(entry: Mapping[str, Any]) -> list[str]:
    layout = f" · {entry['layout']} layout" if entry.get("layout") not in (None, "unknown") else ""
    out = [f"### {md_code(entry['path'])}", "", f"{entry['format']}{layout} · {human_bytes(entry['file_bytes'])}"]
    meta = metadata_line(entry["metadata"])
    if meta:
        out[-1] += f" · {md_text(meta)}"
    out.append("")
    out += [_finding_item(f) for f in entry["findings"]] or ["✅ no findings"]
    out.append("")
    if entry["tensor_count"]:
        out += _tensor_part(entry)
    out += composites_details(entry)
    return out


def _finding_item(finding: Mapping[str, Any]) -> str:
    tensor = f" ({md_code(finding['tensor'])})" if finding.get("tensor") else ""
    return f"- {ICON.get(finding['severity'], '')} **{finding['code']}** {md_text(finding['message'])}{tensor}"


def _tensor_part(entry: Mapping[str, Any]) -> list[str]:
    """The groups table, the optimizer share and unused storage, what a cut left out, and the tensors."""
    out = [*_groups_table(entry), ""]
    short = entry.get("cut_short")
    line = _share_line(entry)
    if line:
        out += [line, ""]
    if short:
        out += [
            f"❌ **{short['missing_tensors']:,} of {entry['tensor_count']:,} tensors missing** (cut short): "
            f"{md_code(short['salvage'])} keeps the whole ones.",
            "",
        ]
    return out + tensors_details(entry)


def _share_line(entry: Mapping[str, Any]) -> str:
    short = entry.get("cut_short")
    unused = entry.get("unused_bytes", entry["storage_bytes"] - entry["tensor_bytes"])
    line = ""
    if short and (entry["groups"]["optimizer"]["bytes"] or short["declared_bytes"]["optimizer"]):
        line = (
            f"Optimizer share: **{percent(short['declared_optimizer_share'])}** of the declared sizes "
            f"({percent(entry['optimizer_share'])} of the bytes present)."
        )
    elif entry["groups"]["optimizer"]["bytes"]:
        line = f"Optimizer share: **{percent(entry['optimizer_share'])}** of tensor bytes."
    if unused:
        line += f" {human_bytes(unused)} of storage is used by no tensor."
    return line.strip()


def _groups_table(entry: Mapping[str, Any]) -> list[str]:
    """As the text report's: for a file cut short, the bytes present, the declared ones and their shares."""
    total = entry["tensor_bytes"]
    declared = (entry.get("cut_short") or {}).get("declared_bytes")
    whole = sum(declared.values()) if declared else 0
    if declared:
        out = ["| group | tensors | present | declared | share |", "|---|--:|--:|--:|--:|"]
    else:
        out = ["| group | tensors | size | share |", "|---|--:|--:|--:|"]
    for group in GROUPS:
        stats = entry["groups"][group]
        if not stats["tensor_count"]:
            continue
        size = human_bytes(stats["bytes"])
        if declared:
            share = percent(declared[group] / whole) if whole else "–"
            out.append(f"| {group} | {stats['tensor_count']:,} | {size} | {human_bytes(declared[group])} | {share} |")
        else:
            share = percent(stats["bytes"] / total) if total else "–"
            out.append(f"| {group} | {stats['tensor_count']:,} | {size} | {share} |")
    declared_total = f" **{human_bytes(whole)}** |" if declared else ""
    out.append(f"| **total** | **{entry['tensor_count']:,}** | **{human_bytes(total)}** |{declared_total} |")
    return out


def composites_details(entry: Mapping[str, Any]) -> list[str]:
    """Sparse, nested, meta, per-channel quantized tensors and wrapper subclasses as wholes (report/common)."""
    rows = composite_rows(entry)
    if not rows:
        return []
    out = [f"<details><summary>Composite tensors ({len(rows)} of {len(entry['composite_tensors']):,})</summary>", "",
           "| composite | layout | dtype | shape | size | parts |", "|---|---|---|---|--:|---|"]  # fmt: skip
    for name, kind, dtype, shape, size, parts in rows:
        out.append(f"| {md_code(name)} | {md_code(kind)} | {dtype} | {shape} | {size} | {md_code(parts)} |")
    out += ["", "</details>", ""]
    return out


def tensors_details(entry: Mapping[str, Any]) -> list[str]:
    tensors = entry.get("tensors", [])
    if not tensors:
        return []
    shown = largest(tensors)
    file_bytes = entry["file_bytes"]
    out = [
        f"<details><summary>Largest tensors ({len(shown)} of {len(tensors):,})</summary>",
        "",
        "| tensor | group | dtype | shape | size | of file |",
        "|---|---|---|---|--:|--:|",
    ]
    for t in shown:
        if t.get("missing"):  # its bytes are not in the file (cut short)
            size, share = "**missing**", "–"
        else:
            size, share = human_bytes(t["bytes"]), percent(t["bytes"] / file_bytes) if file_bytes else "–"
        shape = shape_text(t["shape"])
        out.append(f"| {md_code(t['name'])} | {t['group']} | {t['dtype']} | {shape} | {size} | {share} |")
    out += ["", "</details>", ""]
    return out
