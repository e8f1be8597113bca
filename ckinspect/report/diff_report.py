"""The diff of two checkpoints as text (rich tables), Markdown and JSON (schema 1 with a `diff` object).

All three are drawn from `DiffResult.to_json()`, so they cannot disagree. No torch, no textual.
"""

from __future__ import annotations

import functools
import io
import json
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ckinspect.fmt import human_bytes, md_code, md_text, percent, value_text
from ckinspect.model import Checkpoint
from ckinspect.vocab import SAME_STRUCTURE

_LIST_LIMIT = 12  # names listed before "... and N more" in text and Markdown (JSON lists all)


def number(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if not math.isfinite(x):
        return "inf" if x > 0 else "nan"
    if x == 0:
        return "0"
    return f"{x:.3g}"


def _group_note(diff: dict[str, Any], key: str) -> str:
    groups = diff.get(f"{key}_groups") or {}
    return ", ".join(f"{g} {n:,}" for g, n in sorted(groups.items(), key=lambda kv: -kv[1]))


def hint(diff: dict[str, Any]) -> str | None:
    """A next step when one side has whole groups the other lacks (a resume file against a weights file)."""
    if diff.get("only"):
        return None
    extra = {**(diff.get("only_a_groups") or {}), **(diff.get("only_b_groups") or {})}
    if extra and "model" not in extra and diff["same"] + len(diff["changed"]) > 0:
        return "hint: --only model compares the model weights alone"
    return None


def matched(diff: dict[str, Any]) -> str:
    """How the matching tensors match: bit for bit, equal values in another memory layout, or within --atol."""
    relaid, within = len(diff.get("relaid") or ()), len(diff.get("within_atol") or ())
    if not relaid and not within:
        return f"{diff['same']:,} tensors match bit for bit"
    parts = [f"{diff['same'] - relaid - within:,} bit for bit"]
    if relaid:
        parts.append(f"{relaid:,} with equal values stored in another memory layout (strides)")
    if within:
        parts.append(f"{within:,} within --atol {diff['atol']:g}")
    return f"{diff['same']:,} tensors match: " + ", ".join(parts)


def summary_line(diff: dict[str, Any]) -> str:
    verdict = diff.get("verdict") or ("identical" if diff["identical"] else "different")
    partial = _bytes_decided(diff, verdict)
    if partial is not None:
        return partial
    if verdict == "identical":
        return "identical: " + matched(diff)
    if diff.get("quick") and verdict == SAME_STRUCTURE:
        return (f"same structure: {diff['same_structure']:,} tensors match in name, dtype, shape and layout, "
                "and the other values agree; tensor values not compared (--quick)")  # fmt: skip
    return ("different: " if verdict == "different" else "no verdict: ") + ", ".join(_difference_parts(diff))


def _bytes_decided(diff: dict[str, Any], verdict: str) -> str | None:
    """The line when the tensors did not decide (not all compared, or a side not read for its safety)."""
    if diff.get("not_compared") or diff.get("unreadable") and verdict == "identical":
        return _uncompared_line(verdict)
    if diff.get("unsafe") and not (diff["changed"] or diff["only_a"] or diff["only_b"] or diff.get("unreadable")):
        return _unsafe_line(diff, verdict)
    return None


def _uncompared_line(verdict: str) -> str:
    """Tensors not compared: the files' bytes decided, or nothing could."""
    if verdict == "identical":
        return "identical: the two files are the same byte for byte (their tensors were not all compared)"
    if verdict == "different":
        return "different: the files' bytes differ (tensors not compared)"
    return "no verdict: tensors not compared, and the files' bytes cannot be compared"


def _unsafe_line(diff: dict[str, Any], verdict: str) -> str:
    """Every tensor matched, but a side was not read for its safety: the bytes decided, or nothing could."""
    if verdict == "identical":
        return "identical: the two files are the same byte for byte"
    if verdict == "different":
        return f"different: the files' bytes differ ({matched(diff)}, but {diff['unsafe']})"
    return f"no verdict: {matched(diff)}, but {diff['unsafe']} and the files' bytes cannot be compared"


def _difference_parts(diff: dict[str, Any]) -> list[str]:
    reasons: dict[str, int] = {}
    for c in diff["changed"]:
        reasons[c["reason"]] = reasons.get(c["reason"], 0) + 1
    parts = [f"{diff['same_structure']:,} same structure"] if diff.get("quick") else [f"{diff['same']:,} same"]
    parts += [f"{n:,} changed ({reason})" for reason, n in sorted(reasons.items())]
    return parts + _other_differences(diff)


def _other_differences(diff: dict[str, Any]) -> list[str]:
    """Names on one side only or unreadable, metadata and other values changed, the files' bytes."""
    counted = (("only_a", "only in A"), ("only_b", "only in B"), ("unreadable", "unreadable"))
    parts = [f"{len(diff[key]):,} {what}" for key, what in counted if diff.get(key)]
    parts += [f"{key} {va} -> {vb}" for key, (va, vb) in (diff.get("metadata_changed") or {}).items()]
    if values := diff.get("values_changed"):
        parts.append(f"{len(values):,} other value{'s' if len(values) > 1 else ''} changed")
    if diff.get("unreadable") and diff.get("raw_bytes_differ"):
        parts.append("the files' bytes differ")
    return parts


def _shape(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape)) or "scalar"


def _differing(c: dict[str, Any]) -> str:
    if c["n_diff"] is None:
        return "-"
    return f"{c['n_diff']:,}" + (f" ({percent(c['n_diff'] / c['numel'])})" if c.get("numel") else "")


def _first_at(c: dict[str, Any]) -> str:
    return "-" if c["first_index"] is None else "[" + ",".join(map(str, c["first_index"])) + "]"


def _changed_rows(diff: dict[str, Any]) -> list[list[str]]:
    rows = []
    for c in diff["changed"]:
        a, b = c["a"], c["b"]
        dtype = a["dtype"] if a["dtype"] == b["dtype"] else f"{a['dtype']} -> {b['dtype']}"
        shape = _shape(a["shape"]) if a["shape"] == b["shape"] else f"{_shape(a['shape'])} -> {_shape(b['shape'])}"
        max_abs, max_rel = number(c["max_abs_diff"]), number(c.get("max_rel_diff"))
        rows.append([a["name"], c["reason"], dtype, shape, max_abs, max_rel, _differing(c), _first_at(c)])
    return rows


def _change(c: dict[str, Any], dtype: bool = True, shape: bool = True) -> str:
    """The reason, plus what became what when the dtype or shape changed (where the table has no column
    for it)."""
    a, b = c["a"], c["b"]
    what = [f"{a['dtype']} -> {b['dtype']}"] if dtype and a["dtype"] != b["dtype"] else []
    if shape and a["shape"] != b["shape"]:
        what.append(f"{_shape(a['shape'])} -> {_shape(b['shape'])}")
    return " ".join([c["reason"], *what])


def _differing_short(c: dict[str, Any]) -> str:
    if c["n_diff"] is not None and c["n_diff"] == c.get("numel"):
        return f"all {c['n_diff']:,}"
    return _differing(c)


def value_rows(diff: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(path, A, B) of each non-tensor value that differs, the counters (step, epoch) first."""
    rows = [(key, value_text(va), value_text(vb)) for key, (va, vb) in (diff.get("metadata_changed") or {}).items()]
    rows += [(v["path"], value_text(v["a"]), value_text(v["b"])) for v in diff.get("values_changed") or ()]
    return rows


def _values_table(diff: dict[str, Any]) -> Any:
    from ckinspect.report.console import Cell, NameTable

    rows = [[Cell(path), Cell(va), Cell(vb)] for path, va, vb in value_rows(diff)]
    headers = [("value", "left"), ("A", "left"), ("B", "left")]
    return NameTable(headers, rows, "values that differ (beside the tensors)")


# The changed-tensor table uses the width it is given (80 in a pipe, the terminal's up to 200). When the
# columns do not all fit beside a name column of NAME_ROOM, they are dropped in this order, first dropped
# first; the tensor's name, max |Δ| and how many values differ always stay. A dropped dtype or shape that
# changed is still said, in the change column (or the title, when every row has the same change).
DROP_ORDER = ("shape", "dtype", "first at", "max rel")
NAME_ROOM = 32  # names longer than their column take a line of their own, whole: never split or cut


def _changed_cells(c: dict[str, Any], change: str) -> dict[str, str]:
    a, b = c["a"], c["b"]
    return {
        "tensor": a["name"],
        "change": change,
        "dtype": a["dtype"] if a["dtype"] == b["dtype"] else f"{a['dtype']} -> {b['dtype']}",
        "shape": _shape(a["shape"]) if a["shape"] == b["shape"] else f"{_shape(a['shape'])} -> {_shape(b['shape'])}",
        "max |Δ|": number(c["max_abs_diff"]),
        "max rel": number(c.get("max_rel_diff")),
        "differing": _differing_short(c),
        "first at": _first_at(c),
    }


def changed_columns(rows: list[dict[str, str]], width: int, wanted: list[str]) -> list[str]:
    """The columns of `wanted` that fit `width` beside the names, dropping in DROP_ORDER."""
    columns = list(wanted)
    longest_name = max((len(r["tensor"]) for r in rows), default=0)

    def need(cols: list[str]) -> int:
        others = [max(len(col), *(len(r[col]) for r in rows)) for col in cols if col != "tensor"]
        return min(longest_name, NAME_ROOM) + sum(others) + 2 * len(others)

    for dropped in DROP_ORDER:
        if need(columns) <= width:
            break
        if dropped in columns:
            columns.remove(dropped)
    return columns


def _changed_table(diff: dict[str, Any], width: int) -> Any:
    """Tensor name first; columns that would repeat one value on every row go to the title instead."""
    from ckinspect.report.console import Cell, NameTable

    changes = [_change(c) for c in diff["changed"]]
    same_change = len(set(changes)) == 1
    rows = [_changed_cells(c, change) for c, change in zip(diff["changed"], changes, strict=True)]
    columns = changed_columns(rows, width, _wanted_columns(diff, same_change))
    same_change, changes = _settle_change(diff, rows, columns, same_change, changes)
    columns = [col for col in columns if col != "change" or not same_change]
    title = f"changed tensors: {changes[0]}" if same_change else "changed tensors"
    headers = [(col, "right" if col in _NUMERIC else "left") for col in columns]
    return NameTable(headers, [[Cell(row[col]) for col in columns] for row in rows], title)


def _wanted_columns(diff: dict[str, Any], same_change: bool) -> list[str]:
    wanted = ["tensor", *([] if same_change else ["change"]), "dtype", "shape", "max |Δ|", "max rel", "differing"]
    # "first at" locates a sparse change (one flipped byte); a column of [0,0] says nothing
    pinpoint = any(any(c["first_index"] or ()) for c in diff["changed"])
    return wanted + (["first at"] if pinpoint else [])


def _settle_change(
    diff: dict[str, Any], rows: list[dict[str, str]], columns: list[str], same_change: bool, changes: list[str]
) -> tuple[bool, list[str]]:
    """Each row's change says what its columns do not; one change for every row goes to the title."""
    for c, row in zip(diff["changed"], rows, strict=True):  # what became what, unless its column says it
        row["change"] = _change(c, dtype="dtype" not in columns, shape="shape" not in columns)
    if not same_change and len({row["change"] for row in rows}) == 1:  # the same once columns say the rest
        return True, [rows[0]["change"]]
    return same_change, changes


_HEADERS = ["tensor", "reason", "dtype", "shape", "max |Δ|", "max rel", "differing", "first at"]
_NUMERIC = ("max |Δ|", "max rel", "differing")


def _head(names: Sequence[str]) -> tuple[list[str], int]:
    return list(names[:_LIST_LIMIT]), max(0, len(names) - _LIST_LIMIT)


def _name_lists(diff: dict[str, Any]) -> Iterator[tuple[str, list[str], int]]:
    """(heading, names shown, how many more) of each non-empty list of names: only in A, only in B,
    within --atol; the same lists for the text and the Markdown renderer."""
    lists = (
        ("only_a", "only in A"),
        ("only_b", "only in B"),
        ("within_atol", f"within --atol {diff['atol']:g}"),
        ("relaid", "equal values in another memory layout"),
    )
    for key, title in lists:
        names = diff.get(key) or []
        if names:
            shown, more = _head(names)
            note = _group_note(diff, key)
            yield f"{title} ({len(names):,}{': ' + note if note else ''})", shown, more


def render_text(
    diff: dict[str, Any],
    a: Checkpoint | None = None,
    b: Checkpoint | None = None,
    width: int = 80,
    color: bool = False,
) -> str:
    from rich.text import Text

    from ckinspect.fmt import terminal_safe
    from ckinspect.report.common import terminal_copy
    from ckinspect.report.console import finish, make_console, title_line

    diff = terminal_copy(diff)  # tensor names and paths come from the files
    out = io.StringIO()
    console = make_console(out, width, color)
    for side, path, ckpt in (("A", diff["a"], a), ("B", diff["b"], b)):
        details = (ckpt.format, f"{len(ckpt.tensors):,} tensors", human_bytes(ckpt.file_bytes)) if ckpt else ()
        console.print(Text.assemble(f"{side}  ", title_line(path, *details)))
    console.print(Text(f"matching: {diff['match']}", style="dim"))
    console.print(Text(summary_line(diff), style="bold green" if diff["identical"] else "bold yellow"))
    if diff["changed"]:
        console.print(_changed_table(diff, width), crop=False)  # a name wider than the line overflows it
    if value_rows(diff):
        console.print(_values_table(diff), crop=False)
    _text_lists(functools.partial(console.print, markup=False, soft_wrap=True), diff)  # names are not markup
    for side, ckpt in (("A", a), ("B", b)):
        for f in _refusals(ckpt)[:3]:
            console.print(
                Text.assemble((f"{side} {_REFUSAL_WORD[f.code]}", "bold red"), f": {terminal_safe(f.message)}"),
                soft_wrap=True,
            )
    if advice := hint(diff):
        console.print(Text(advice, style="dim"))
    return finish(out)


_REFUSAL_WORD = {"CORRUPT": "is damaged", "UNSAFE_PICKLE": "is refused"}


def _refusals(ckpt: Checkpoint | None) -> list[Any]:
    """A side's CORRUPT and UNSAFE_PICKLE findings: why its tensors may be missing from the diff."""
    return [f for f in (ckpt.findings if ckpt else []) if f.code in _REFUSAL_WORD]


def render_markdown(diff: dict[str, Any], a: Checkpoint | None = None, b: Checkpoint | None = None) -> str:
    lines = ["## ckinspect diff", ""]
    lines.append(f"- **A**: {md_code(diff['a'])}" + (f" ({a.format}, {len(a.tensors):,} tensors)" if a else ""))
    lines.append(f"- **B**: {md_code(diff['b'])}" + (f" ({b.format}, {len(b.tensors):,} tensors)" if b else ""))
    lines.append(f"- **matching**: {diff['match']}")
    lines += ["", f"**{summary_line(diff)}**", ""]
    lines += _markdown_tables(diff)
    lines += _markdown_name_lists(diff)
    lines += _markdown_not_compared(diff, a, b)
    if advice := hint(diff):
        lines += ["", f"_{advice}_"]
    return "\n".join(lines).rstrip() + "\n"


def _text_lists(say: Callable[[str], object], diff: dict[str, Any]) -> None:
    """The names only in A, only in B ..., then what could not be compared, one line each."""
    for heading, shown, more in _name_lists(diff):
        say(f"{heading}:")
        for n in shown:
            say(f"  {n}")
        if more:
            say(f"  ... and {more:,} more")
    unreadable = diff.get("unreadable") or []
    for item in unreadable[:_LIST_LIMIT]:
        say(f"cannot compare {item['name']}: {item['message']}")
    if len(unreadable) > _LIST_LIMIT:
        say(f"... and {len(unreadable) - _LIST_LIMIT:,} more tensors that cannot be compared")
    if diff.get("not_compared"):
        say(f"tensors not compared: {diff['not_compared']}")


def _markdown_tables(diff: dict[str, Any]) -> list[str]:
    """The changed tensors' table and the other values' table, each followed by a blank line."""
    lines = []
    if diff["changed"]:
        lines.append("| " + " | ".join(md_text(h) for h in _HEADERS) + " |")
        lines.append("|" + "|".join("---:" if h in _NUMERIC else "---" for h in _HEADERS) + "|")
        for row in _changed_rows(diff):
            lines.append("| " + " | ".join(md_code(c) if i == 0 else md_text(c) for i, c in enumerate(row)) + " |")
        lines.append("")
    if rows := value_rows(diff):
        lines += ["| value | A | B |", "|---|---|---|"]
        lines += [f"| {md_code(path)} | {md_text(va)} | {md_text(vb)} |" for path, va, vb in rows]
        lines.append("")
    return lines


def _markdown_name_lists(diff: dict[str, Any]) -> list[str]:
    """The names only in A, only in B ..., each list folded in a <details> block."""
    lines = []
    for heading, shown, more in _name_lists(diff):
        lines += [f"<details><summary>{heading[0].upper()}{heading[1:]}</summary>", ""]
        lines.extend(f"- {md_code(n)}" for n in shown)
        if more:
            lines.append(f"- ... and {more:,} more")
        lines += ["", "</details>", ""]
    return lines


def _markdown_not_compared(diff: dict[str, Any], a: Checkpoint | None, b: Checkpoint | None) -> list[str]:
    """What could not be compared: unreadable tensors, tensors left out, and each side's refusals."""
    unreadable = diff.get("unreadable") or []
    lines = [
        f"- cannot compare {md_code(item['name'])}: {md_text(item['message'])}" for item in unreadable[:_LIST_LIMIT]
    ]
    if len(unreadable) > _LIST_LIMIT:
        lines.append(f"- ... and {len(unreadable) - _LIST_LIMIT:,} more tensors that cannot be compared")
    if diff.get("not_compared"):
        lines.append(f"- tensors not compared: {diff['not_compared']}")
    for side, ckpt in (("A", a), ("B", b)):
        for f in _refusals(ckpt)[:3]:
            lines.append(f"- **{side} {_REFUSAL_WORD[f.code]}** ({f.code}): {md_text(f.message)}")
    return lines


def build_document(a: Checkpoint, b: Checkpoint, result: Any) -> dict[str, Any]:
    """The schema-1 document: both files' entries plus `diff`."""
    from ckinspect.report import json_report

    return json_report.build([a, b], diff=result)


def render_json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, allow_nan=False) + "\n"
