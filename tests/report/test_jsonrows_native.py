"""The JSON report's tensor list in one C pass (ckinspect/_native/jsonrows.c) against json.dumps, which stays the
oracle: the same text for every list of flat records it takes (names with quotes, control characters, non-ASCII and
astral characters, lone surrogates; negative and 64-bit ints; True, False, None; lists), and None (json.dumps then
answers) for everything else."""

from __future__ import annotations

import json
import os
import random
from collections import OrderedDict

import pytest

from ckinspect._native import load
from ckinspect.report.json_report import _ONE_PER_LINE, _listing, render
from ckinspect.settings import PURE as PURE_ENV

pytestmark = pytest.mark.torchfree
NATIVE = load("jsonrows")
needs_native = pytest.mark.skipif(NATIVE is None, reason="ckinspect._native.jsonrows not built")


def _dumps(rows):
    return json.dumps(rows, allow_nan=False, separators=(", ", ": "), check_circular=False)


def test_the_compiled_encoder_is_built_where_ci_builds_it():
    if os.environ.get("CKINSPECT_EXPECT_NATIVE") and not os.environ.get(PURE_ENV):
        assert NATIVE is not None, "ckinspect._native.jsonrows was not built: `pip install -e .` needs a C compiler"


_AWKWARD = ['plain.weight', 'q"uote', "back\\slash", "new\nline\t\r\b\f", "\x00\x1f\x7f", "caf\u00e9", "\u2028",
            "\U0001f600 astral", "lone \ud800 surrogate", "\udfff", "", "~ !#$%&'()*+,-./"]  # fmt: skip


@needs_native
def test_the_tensor_entries_it_takes_are_json_dumps_text():
    rows = [
        {"name": name, "group": "model", "dtype": "float32", "shape": [4, 0, 1 << 40], "bytes": 16} for name in _AWKWARD
    ]
    rows += [
        {"name": "a", "group": "optimizer", "dtype": "int64", "shape": [], "bytes": 0, "param": "w", "missing": True},
        {"name": "b", "shape": [None, -3, True, False, "x"], "part_of": "c", "n": -(1 << 63), "m": (1 << 63) - 1},
        {},
    ]
    assert NATIVE.encode(rows) == _dumps(rows)
    assert NATIVE.encode([]) == "[]"


@needs_native
def test_random_records_are_json_dumps_text():
    rng = random.Random(7)
    alphabet = [chr(c) for c in (*range(0, 0x80), 0xA0, 0xFF, 0x100, 0x7FF, 0xD7FF, 0xD800, 0xDFFF, 0xFFFF, 0x10000,
                                 0x10FFFF)]  # fmt: skip

    def text():
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))

    def scalar():
        return rng.choice([text(), rng.randint(-(1 << 63), (1 << 63) - 1), rng.randint(-9, 9), True, False, None])

    for _ in range(300):
        rows = [
            {text(): scalar() if rng.random() < 0.8 else [scalar() for _ in range(rng.randint(0, 4))]
             for _ in range(rng.randint(0, 6))}
            for _ in range(rng.randint(0, 5))
        ]  # fmt: skip
        assert NATIVE.encode(rows) == _dumps(rows)


@needs_native
@pytest.mark.parametrize(
    "rows",
    [
        [{"bytes": 1.5}],  # a float: json's repr and its NaN rule
        [{"shape": [[1]]}],  # nested deeper than one list
        [{"x": {"y": 1}}],
        [{1: "int key"}],  # json converts non-str keys
        [OrderedDict(a=1)],  # a dict subclass
        [{"n": 1 << 64}],  # beyond 64 bits
        [{"t": (1, 2)}],  # a tuple
        ({"a": 1},),  # not a list
        [["not a dict"]],
    ],
)
def test_what_it_does_not_spell_it_leaves_to_json(rows):
    assert NATIVE.encode(rows) is None
    assert NATIVE.encode(rows, _ONE_PER_LINE) is None


def _spliced(rows):
    """The report's tensor list as json.dumps and a split make it (json_report._listing's own fallback)."""
    body = _dumps(rows)[1:-1]
    return "[\n        " + body.replace('}, {"name": ', '},\n        {"name": ') + "\n      ]"


@needs_native
def test_one_row_per_line_is_the_spliced_text():
    rows = [{"name": name, "group": "model", "dtype": "bfloat16", "shape": [2, 3], "bytes": 12} for name in _AWKWARD]
    rows.insert(3, {"group": "other", "name": "not first"})  # not led by "name": stays on the line before
    rows.append({"name": '}, {"name": ', "x": '}, {"name": '})  # what the split looks for, inside strings
    assert NATIVE.encode(rows, _ONE_PER_LINE) == _spliced(rows)
    assert NATIVE.encode(rows[:1], _ONE_PER_LINE) == _spliced(rows[:1])


def test_the_reports_tensor_list_is_the_same_on_both_paths(pickle_paths):
    rows = [{"name": name, "group": "model", "dtype": "bfloat16", "shape": [2, 3], "bytes": 12} for name in _AWKWARD]
    assert _listing(rows) == _spliced(rows)
    assert _listing([]) == "[]"
    assert _listing([{"bytes": 1.5}]) == _spliced([{"bytes": 1.5}])  # declined by the C pass: json.dumps's


def test_names_and_values_that_spell_the_reports_own_marks_stay_where_they_are(pickle_paths):
    """render splices each file's tensor list in where a mark stands in the indented JSON: a tensor name or a
    metadata value that spells such a mark must neither receive another file's list nor break the document."""
    hostile = "\0tensors\0"

    def entry(name):
        return {"path": name, "metadata": {"note": hostile}, "tensors": [{"name": hostile, "bytes": 1}],
                "findings": [], "other": None}  # fmt: skip

    report = {"schema": 1, "files": [entry("a"), entry("b"), {"path": "c", "tensors": None}], "summary": {}}
    text = render(report)
    assert json.loads(text) == report
