"""report.common.terminal_copy: every string of a report made terminal-safe, keys included, whatever holds it."""

from __future__ import annotations

from collections import OrderedDict

from ckinspect.report.common import terminal_copy


class _Name(str):
    pass


def test_every_string_is_escaped_wherever_it_sits_and_nothing_else_changes():
    shared = ["a\x1b[2Jb"]
    report = {
        "path": "plain/name.pt",
        "evil\x07": OrderedDict([("k", ("x\u202ey", 1, 2.5, None, True))]),
        "list": [shared, shared, _Name("s\x9bq")],
        "n": 3,
        7: "\ud800",
    }
    copied = terminal_copy(report)
    assert copied == {
        "path": "plain/name.pt",
        "evil\\x07": {"k": ["x\\u202ey", 1, 2.5, None, True]},
        "list": [["a\\x1b[2Jb"], ["a\\x1b[2Jb"], "s\\x9bq"],
        "n": 3,
        7: "\\ud800",
    }
    assert copied["list"][0] is copied["list"][1]  # a shared container is copied once
    assert type(copied["list"][2]) is str and type(copied["evil\\x07"]) is dict


def test_nesting_past_64_levels_is_cut():
    deep: list = ["x"]
    for _ in range(70):
        deep = [deep]
    copied = terminal_copy(deep)
    for _ in range(65):
        copied = copied[0]
    assert copied == "…"
