"""fp16/bf16 drift as text (rich tables), Markdown and JSON, all drawn from one dict (`drift_json`)."""

from __future__ import annotations

import io
import json
import os
from typing import Any

from ckinspect.model import Checkpoint, Finding
from ckinspect.report.diff_report import number
from ckinspect.report.sizes import human_bytes

TOP = 25  # tensors shown in text/Markdown, worst first; JSON lists all


def drift_json(
    ckpt: Checkpoint, drifts: list[Any], logits: dict[str, Any] | None, logits_skipped: str | None
) -> dict[str, Any]:
    from ckinspect.drift import drift_summary

    return {
        "path": str(ckpt.path),
        "summary": drift_summary(drifts),
        "weights": [d.to_json() for d in drifts],
        "logits": logits,
        "logits_skipped": logits_skipped,
    }


def build_document(ckpt: Checkpoint, drift: dict[str, Any], findings: list[Finding]) -> dict[str, Any]:
    """Schema 1: the file's entry plus a `drift` object."""
    from ckinspect.report import json_report

    doc = json_report.build([ckpt])
    doc["drift"] = drift
    doc["drift"]["findings"] = [f.to_json() for f in findings]
    return doc


def _worst(drift: dict[str, Any]) -> list[dict[str, Any]]:
    def badness(w: dict[str, Any]) -> tuple[float, ...]:
        return (-w["fp16"]["overflow"], -(w["fp16"]["max_rel"] or 0.0), -(w["bf16"]["max_rel"] or 0.0))

    return sorted(drift["weights"], key=badness)[:TOP]


def _summary_rows(drift: dict[str, Any]) -> list[list[str]]:
    rows = []
    for fmt in ("fp16", "bf16"):
        s = drift["summary"][fmt]
        rows.append([fmt, number(s["max_abs"]), number(s["max_rel"]), f"{s['overflow']:,}", f"{s['underflow']:,}",
                     s["worst_tensor"] or "-"])
    return rows


def _tensor_rows(drift: dict[str, Any]) -> list[list[str]]:
    rows = []
    for w in _worst(drift):
        f, b = w["fp16"], w["bf16"]
        rows.append([w["name"], w["dtype"], f"{w['numel']:,}", number(f["max_abs"]), number(f["max_rel"]),
                     f"{f['overflow']:,}/{f['underflow']:,}", number(b["max_abs"]), number(b["max_rel"]),
                     f"{b['overflow']:,}/{b['underflow']:,}"])
    return rows


def _logit_rows(drift: dict[str, Any]) -> list[list[str]]:
    logits = drift["logits"] or {}
    rows = []
    for fmt in ("fp16", "bf16"):
        r = logits.get(fmt)
        if r:
            rows.append([f"{fmt} vs fp32", number(r["max_abs"]), number(r["mean_abs"]), f"{r['top1_agreement']:.2%}",
                         f"{r.get('positions', 0):,}"])
    return rows


_SUMMARY_HEAD = ["round trip", "max |Δ|", "max rel", "-> inf", "-> 0", "worst tensor"]
_TENSOR_HEAD = ["tensor", "dtype", "values",
                "fp16 |Δ|", "fp16 rel", "fp16 inf/0", "bf16 |Δ|", "bf16 rel", "bf16 inf/0"]
_LOGIT_HEAD = ["logits", "max |Δ|", "mean |Δ|", "top-1 agree", "positions"]


def render_text(drift: dict[str, Any], ckpt: Checkpoint | None = None, width: int | None = None) -> str:
    from rich.console import Console
    from rich.table import Table

    out = io.StringIO()
    width = width or int(os.environ.get("COLUMNS", "0") or 0) or 120
    console = Console(file=out, width=width, force_terminal=False, color_system=None, highlight=False)
    head = f"{drift['path']}"
    if ckpt is not None:
        head += f"  ({ckpt.format}, {human_bytes(ckpt.file_bytes)})"
    console.print(head)
    s = drift["summary"]
    console.print(f"{s['tensors']:,} floating model tensors, {s['values']:,} values")

    def table(title: str, headers: list[str], rows: list[list[str]]) -> None:
        t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
        first = min(48, max((len(r[0]) for r in rows), default=8))  # names stay whole where they can
        for i, h in enumerate(headers):
            t.add_column(h, justify="left" if i == 0 or h in ("dtype", "worst tensor") else "right", overflow="fold",
                         min_width=first if i == 0 else None)
        for r in rows:
            t.add_row(*r)
        console.print(t)

    table("weights stored in half precision and read back", _SUMMARY_HEAD, _summary_rows(drift))
    if drift["weights"]:
        shown = min(TOP, len(drift["weights"]))
        table(f"per tensor, worst first ({shown} of {len(drift['weights']):,})", _TENSOR_HEAD, _tensor_rows(drift))
    if drift["logits"]:
        lg = drift["logits"]
        table(f"logit drift ({lg.get('model')}, fixed batch, seed {lg.get('seed')})", _LOGIT_HEAD, _logit_rows(drift))
        if lg.get("note"):
            console.print(f"note: {lg['note']}", soft_wrap=True)
    else:
        console.print(f"logit drift: skipped: {drift['logits_skipped']}", soft_wrap=True)
    for f in drift.get("findings", []):
        console.print(f"{f['severity']} {f['code']}: {f['message']}", soft_wrap=True)
    return out.getvalue()


def _md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(esc(h) for h in headers) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(headers))) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return lines + [""]


def render_markdown(drift: dict[str, Any], ckpt: Checkpoint | None = None) -> str:
    s = drift["summary"]
    head = f"`{drift['path']}`: {s['tensors']:,} floating model tensors, {s['values']:,} values"
    lines = ["## ckinspect drift", "", head, ""]
    lines += ["### Weights stored in half precision and read back", ""] + _md_table(_SUMMARY_HEAD, _summary_rows(drift))
    if drift["weights"]:
        lines += [f"### Per tensor, worst first ({min(TOP, len(drift['weights']))} of {len(drift['weights']):,})", ""]
        lines += _md_table(_TENSOR_HEAD, _tensor_rows(drift))
    if drift["logits"]:
        lg = drift["logits"]
        lines += [f"### Logit drift ({lg.get('model')}, fixed batch, seed {lg.get('seed')})", ""]
        lines += _md_table(_LOGIT_HEAD, _logit_rows(drift))
        if drift["logits"].get("note"):
            lines += [f"_{drift['logits']['note']}_", ""]
    else:
        lines += [f"Logit drift skipped: {drift['logits_skipped']}", ""]
    for f in drift.get("findings", []):
        lines.append(f"- **{f['severity']}** `{f['code']}`: {f['message']}")
    return "\n".join(lines).rstrip() + "\n"


def render_json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, allow_nan=False) + "\n"
