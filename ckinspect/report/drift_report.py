"""fp16/bf16 drift as text (rich tables), Markdown and JSON, all drawn from one dict (`drift_json`)."""

from __future__ import annotations

import io
import json
from typing import Any

from ckinspect.fmt import human_bytes, md_text
from ckinspect.model import Checkpoint
from ckinspect.report.diff_report import number

TOP = 25  # tensors shown in text/Markdown, worst first; JSON lists all


def drift_json(
    ckpt: Checkpoint, drifts: list[Any], logits: dict[str, Any] | None, logits_skipped: str | None
) -> dict[str, Any]:
    from ckinspect.analysis.drift import drift_summary, finite_or_none

    if logits:  # NaN or inf weights give NaN logits: null in JSON, as every other figure
        logits = {
            key: {k: finite_or_none(v) if isinstance(v, float) else v for k, v in value.items()}
            if isinstance(value, dict) else value
            for key, value in logits.items()
        }  # fmt: skip
    return {
        "path": str(ckpt.path),
        "summary": drift_summary(drifts),
        "weights": [d.to_json() for d in drifts],
        "logits": logits,
        "logits_skipped": logits_skipped,
    }


def build_document(ckpt: Checkpoint, drift: dict[str, Any]) -> dict[str, Any]:
    """Schema 1: the file's entry plus a `drift` object."""
    from ckinspect.report import json_report

    doc = json_report.build([ckpt])
    doc["drift"] = drift
    return doc


def _worst(drift: dict[str, Any]) -> list[dict[str, Any]]:
    from ckinspect.analysis.drift import worst_first

    return sorted(drift["weights"], key=worst_first)[:TOP]


def _summary_rows(drift: dict[str, Any]) -> list[list[str]]:
    rows = []
    for fmt in ("fp16", "bf16"):
        s = drift["summary"][fmt]
        rows.append(
            [
                fmt,
                number(s["max_abs"]),
                number(s["max_rel"]),
                f"{s['overflow']:,}",
                f"{s['underflow']:,}",
                s["worst_tensor"] or "-",
            ]
        )
    return rows


def _tensor_rows(drift: dict[str, Any]) -> list[list[str]]:
    rows = []
    for w in _worst(drift):
        f, b = w["fp16"], w["bf16"]
        rows.append(
            [
                w["name"],
                w["dtype"],
                f"{w['numel']:,}",
                number(f["max_abs"]),
                number(f["max_rel"]),
                f"{f['overflow']:,}/{f['underflow']:,}",
                number(b["max_abs"]),
                number(b["max_rel"]),
                f"{b['overflow']:,}/{b['underflow']:,}",
            ]
        )
    return rows


def _logit_formats(logits: dict[str, Any]) -> list[str]:
    return [f for f in logits.get("formats", ["fp16", "bf16"]) if isinstance(logits.get(f), dict)]


def _logit_rows(drift: dict[str, Any]) -> list[list[str]]:
    logits = drift["logits"] or {}
    rows = []
    for fmt in _logit_formats(logits):
        r = logits[fmt]
        change = r.get("perplexity_change")
        rows.append(
            [
                fmt,
                number(r["max_abs"]),
                number(r["mean_abs"]),
                "-" if r["top1_agreement"] is None else f"{r['top1_agreement']:.2%}",
                number(r.get("kl_mean")),
                "-" if change is None else f"{change * 100:+.3g}%",
                f"{r.get('positions', 0):,}",
            ]
        )
    return rows


def logit_title(logits: dict[str, Any]) -> str:
    """What the logits came from: the model, how it ran, and the seed."""
    mode = logits.get("mode")
    return f"logit drift vs fp32 ({logits.get('model')}{', ' + mode if mode else ''}, seed {logits.get('seed')})"


def logit_inputs(logits: dict[str, Any]) -> list[str]:
    """One line per input the logits came from: the seeded batch, and the bundled text (or why not)."""
    lines = []
    batch = logits.get("input") or {}
    if batch.get("tokens"):
        lines.append(f"batch: {batch['tokens']}")
    text = logits.get("text") or {}
    if text.get("skipped"):
        lines.append(f"perplexity: not measured ({text['skipped']})")
    elif text:
        windows = "x".join(str(n) for n in text.get("windows", []))
        lines.append(
            f"text: {text.get('source')}, {windows} tokens by {text.get('tokenizer')}; "
            f"fp32 perplexity {number(text.get('perplexity'))} (ppl Δ: the relative change)"
        )
    if logits.get("weights_held_peak_bytes"):
        lines.append(
            f"weights: {human_bytes(logits.get('weights_read_bytes', 0))} read, at most "
            f"{human_bytes(logits['weights_held_peak_bytes'])} held as float32 at once ({logits.get('blocks')} blocks)"
        )
    return lines


_SUMMARY_HEAD = ["format", "max |Δ|", "max rel", "-> inf", "-> 0", "worst tensor"]
_TENSOR_HEAD = ["tensor", "dtype", "values", "fp16 |Δ|", "fp16 rel", "fp16 inf/0", "bf16 |Δ|", "bf16 rel", "bf16 inf/0"]
_LOGIT_HEAD = ["logits", "max |Δ|", "mean |Δ|", "top-1", "KL", "ppl Δ", "positions"]


WIDE = 110  # from this many columns the per-tensor table also shows absolute errors


def render_text(drift: dict[str, Any], ckpt: Checkpoint | None = None, width: int = 80, color: bool = False) -> str:
    from rich.text import Text

    from ckinspect.report.common import terminal_copy
    from ckinspect.report.console import finish, make_console, title_line
    from ckinspect.report.text import findings_block

    drift = terminal_copy(drift)  # tensor names and the path come from the file
    out = io.StringIO()
    console = make_console(out, width, color)
    console.print(title_line(drift["path"], *((ckpt.format, human_bytes(ckpt.file_bytes)) if ckpt else ())))
    s = drift["summary"]
    console.print(Text(f"{s['tensors']:,} floating model tensors, {s['values']:,} values", style="dim"))

    console.print(_summary_table(drift))
    if drift["weights"]:
        console.print(_tensor_table(drift, wide=width >= WIDE))
    if drift["logits"]:
        _print_logits(console, drift)
    else:
        console.print(f"logit drift skipped: {drift['logits_skipped']}", markup=False)
    if drift.get("findings"):
        console.print(findings_block(drift["findings"]))
    return finish(out)


def _summary_table(drift: dict[str, Any]) -> Any:
    from rich.markup import escape

    from ckinspect.report.console import make_table

    summary = make_table("weights stored in half precision and read back")
    for h in _SUMMARY_HEAD[:-1]:
        summary.add_column(h, justify="left" if h == "format" else "right", no_wrap=True)
    summary.add_column(_SUMMARY_HEAD[-1], overflow="fold", ratio=1)
    for row in _summary_rows(drift):
        summary.add_row(*row[:-1], escape(row[-1]))
    return summary


def _print_logits(console: Any, drift: dict[str, Any]) -> None:
    """The logit table, the inputs it was measured on, and its note."""
    from ckinspect.report.console import make_table

    lg = drift["logits"]
    logits = make_table(logit_title(lg))
    for h in _LOGIT_HEAD:
        logits.add_column(h, justify="left" if h == "logits" else "right", no_wrap=True)
    for row in _logit_rows(drift):
        logits.add_row(*row)
    console.print(logits)
    for line in logit_inputs(lg):
        console.print(line, markup=False)
    if lg.get("note"):
        console.print(f"note: {lg['note']}", markup=False)


def _tensor_table(drift: dict[str, Any], wide: bool) -> Any:
    """Worst first; one dtype for all goes in the title, and absolute errors only where there is room."""
    from rich.markup import escape

    from ckinspect.report.console import make_table

    worst = _worst(drift)
    dtypes = sorted({w["dtype"] for w in worst})
    title = f"per tensor, worst first ({len(worst)} of {len(drift['weights']):,}"
    table = make_table(title + (f", all {dtypes[0]})" if len(dtypes) == 1 else ")"))
    table.add_column("tensor", overflow="fold", ratio=1, min_width=16)
    if len(dtypes) > 1:
        table.add_column("dtype", no_wrap=True)
    table.add_column("values", justify="right", no_wrap=True)
    for fmt in ("fp16", "bf16"):
        if wide:
            table.add_column(f"{fmt}\nmax |Δ|", justify="right", no_wrap=True)
        table.add_column(f"{fmt}\nmax rel", justify="right", no_wrap=True)
        table.add_column(f"{fmt}\ninf/0", justify="right", no_wrap=True)
    for w in worst:
        row = [escape(w["name"])] + ([w["dtype"]] if len(dtypes) > 1 else []) + [f"{w['numel']:,}"]
        for fmt in ("fp16", "bf16"):
            r = w[fmt]
            row += ([number(r["max_abs"])] if wide else []) + [
                number(r["max_rel"]),
                f"{r['overflow']:,}/{r['underflow']:,}",
            ]
        table.add_row(*row)
    return table


def _md_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    lines = [
        "| " + " | ".join(md_text(h) for h in headers) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(headers))) + "|",
    ]
    lines += ["| " + " | ".join(md_text(c) for c in r) + " |" for r in rows]
    return lines + [""]


def render_markdown(drift: dict[str, Any], ckpt: Checkpoint | None = None) -> str:
    from ckinspect.fmt import md_code, md_text

    s = drift["summary"]
    head = f"{md_code(drift['path'])}: {s['tensors']:,} floating model tensors, {s['values']:,} values"
    lines = ["## ckinspect drift", "", head, ""]
    lines += ["### Weights stored in half precision and read back", ""] + _md_table(_SUMMARY_HEAD, _summary_rows(drift))
    if drift["weights"]:
        lines += [f"### Per tensor, worst first ({min(TOP, len(drift['weights']))} of {len(drift['weights']):,})", ""]
        lines += _md_table(_TENSOR_HEAD, _tensor_rows(drift))
    if drift["logits"]:
        lg = drift["logits"]
        title = md_text(logit_title(lg))
        lines += [f"### {title[:1].upper()}{title[1:]}", ""]
        lines += _md_table(_LOGIT_HEAD, _logit_rows(drift))
        lines += [f"- {md_text(line)}" for line in logit_inputs(lg)] + ([""] if logit_inputs(lg) else [])
        if drift["logits"].get("note"):
            lines += [f"_{drift['logits']['note']}_", ""]
    else:
        lines += [f"Logit drift skipped: {drift['logits_skipped']}", ""]
    for f in drift.get("findings", []):
        lines.append(f"- **{f['severity']}** `{f['code']}`: {md_text(f['message'])}")
    return "\n".join(lines).rstrip() + "\n"


def render_json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, allow_nan=False) + "\n"
