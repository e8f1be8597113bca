"""ckinspect.fmt: the one writer of sizes, shapes, percents and Markdown escapes for reports, commands and TUI."""

from __future__ import annotations

import pytest

from ckinspect.fmt import human_bytes, md_code, md_text, percent, shape_text


def test_sizes_are_binary_with_one_decimal():
    assert [human_bytes(n) for n in (0, 1, 1023, 1024, 1536, 5 * 1024**4)] == [
        "0 B", "1 B", "1023 B", "1.0 KiB", "1.5 KiB", "5.0 TiB"
    ]  # fmt: skip


def test_percent_says_all_and_none_only_when_it_is():
    assert [percent(f) for f in (0.0, 0.0004, 0.001, 0.123, 0.9995, 1.0)] == [
        "0.0%", "<0.1%", "0.1%", "12.3%", ">99.9%", "100.0%"
    ]  # fmt: skip


def test_shapes():
    assert [shape_text(s) for s in ((), (10,), (3, 4), [2, 1, 5])] == ["scalar", "10", "3×4", "2×1×5"]


def test_markdown_text_and_code_spans_are_safe_in_a_table_cell():
    assert md_text("a|b\\c\nd") == "a\\|b\\\\c d"
    assert md_code("layers.0|x") == "`layers.0\\|x`"
    assert md_code("C:\\runs\\a.pt") == "`C:\\runs\\a.pt`"  # a code span shows backslashes as they are
    assert md_code("odd`name") == "`` odd`name ``"


def test_sizes_read_as_humanize_writes_them_including_where_rounding_reaches_the_next_unit():
    import random

    humanize = pytest.importorskip("humanize")

    def theirs(n: float) -> str:
        return humanize.naturalsize(n, binary=True, format="%.1f").replace(" Bytes", " B").replace(" Byte", " B")

    rng = random.Random(0)
    edges = [1024**k + d for k in range(1, 11) for d in (-(1024 ** (k - 1)) // 20 - 1, -52, -51, -1, 0, 1)]
    values = edges + [rng.randrange(1 << rng.randrange(1, 70)) for _ in range(20_000)]
    assert [human_bytes(v) for v in values] == [theirs(v) for v in values]
    assert human_bytes(1024**2 - 51) == "1.0 MiB"  # 1023.95 KiB rounds up: the unit steps up with it


def _size_texts_outside_fmt(tree):
    """(line, text) of each string a user reads that writes a size itself: a decimal unit anywhere ("100 MB"
    beside the reports' MiB), or a value formatted in an f-string right before a unit ("{n / 2**20:.1f} MiB").
    Docstrings are left out (they are for the reader of the code); a binary unit in prose ("1 GiB or more",
    "a whole number of MiB") is no size written by hand."""
    import ast
    import re

    decimal = re.compile(r"(?<![A-Za-z])[KMGTPE]B(?![A-Za-z])")
    unit_first = re.compile(r"^\s?[KMGTPE]i?B(?![A-Za-z])")
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            docstrings.update(id(v) for v in node.values)  # an f-string's pieces: read once, as the whole
            pieces = node.values
            for before, piece in zip(pieces, pieces[1:], strict=False):
                formatted = isinstance(before, ast.FormattedValue) and isinstance(piece, ast.Constant)
                if formatted and unit_first.match(str(piece.value)):
                    yield node.lineno, ast.unparse(node)
            text = "".join(str(v.value) for v in pieces if isinstance(v, ast.Constant))
            if decimal.search(text):
                yield node.lineno, text
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            written = decimal.search(node.value)
            if written:
                yield node.lineno, node.value


def test_no_size_unit_is_written_outside_fmt():
    """One size formatter everywhere: no "GB" beside "GiB", no "418.7 KiB" beside "419 KiB". Sizes a user
    reads come from fmt.human_bytes; a decimal unit, or a unit after a value formatted by hand, elsewhere
    is a second writer."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    found = []
    for folder in ("ckinspect", "trainer"):
        for path in sorted((root / folder).rglob("*.py")):
            if path.name == "fmt.py" and path.parent.name == "ckinspect":
                continue
            for line, text in _size_texts_outside_fmt(ast.parse(path.read_text(encoding="utf-8"))):
                found.append(f"{path.relative_to(root)}:{line}: {text!r}")
    assert found == []


def test_the_size_check_sees_a_hand_formatted_size():
    import ast

    code = 'a = f"{n / 2**20:.1f} MiB"\nb = "over the 100 MB limit"\nc = "1 GiB or more"\nd = f"{n:,} bytes"\n'
    assert [line for line, _ in _size_texts_outside_fmt(ast.parse(code))] == [1, 2]
