"""Severity, verdict, repair action and global kind are enums whose values are the strings the JSON
reports, SARIF and the CLI always printed: the contract's text does not change with the type."""

from __future__ import annotations

import json
import pickle

from ckinspect.analysis.runs.model import VERDICTS
from ckinspect.formats.pickle_scan import classify_global
from ckinspect.model import Finding
from ckinspect.ops.repair import ACTIONS
from ckinspect.vocab import SEVERITY, GlobalKind, RepairKind, Severity, Verdict


def test_the_values_are_the_strings_of_the_contract():
    assert [s.value for s in Severity] == ["info", "warning", "error"]
    assert list(VERDICTS) == ["good", "incomplete", "damaged", "unsafe", "not-resumable"] == [v.value for v in Verdict]
    assert list(ACTIONS) == ["promote", "promote-keep-old", "set-aside", "nothing"] == [a.value for a in RepairKind]
    assert [k.value for k in GlobalKind] == ["allowed", "benign", "unsafe", "torchscript"]
    assert set(SEVERITY.values()) <= set(Severity)


def test_a_member_prints_serialises_and_pickles_as_its_value():
    finding = Finding("CORRUPT", "cut short")
    assert finding.severity is Severity.ERROR
    assert json.dumps(finding.to_json()) == '{"code": "CORRUPT", "severity": "error", "message": "cut short"}'
    assert (str(Severity.ERROR), f"{Severity.WARNING}", f"[{Verdict.GOOD:>6}]") == ("error", "warning", "[  good]")
    assert pickle.loads(pickle.dumps(finding)).severity is Severity.ERROR  # across the scan's worker processes
    assert Severity.ERROR == "error" and {"error": 1}[Severity.ERROR] == 1


def test_classify_global_answers_with_a_kind():
    assert classify_global("os", "system") is GlobalKind.UNSAFE
    assert classify_global("collections", "OrderedDict") is GlobalKind.ALLOWED
