"""`--format junit`: one testcase per checkpoint, a failure per finding at or above --fail-on, read back
by junitparser (the parser CI dashboards' tooling uses) with the counts it recomputes itself."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET

import pytest

from ckinspect.cli import main
from ckinspect.vocab import EXIT_FINDINGS, EXIT_OK
from tests.report.ci_files import SAMPLES, clean_weights, damaged_run, hostile_pickle, nonfinite_weights

pytestmark = pytest.mark.torchfree


def parse(text: str, tmp_path):
    """(suite, {testcase name: (failure types, system-out)}) as junitparser reads the file."""
    from junitparser import Failure, JUnitXml

    path = tmp_path / "junit.xml"
    path.write_text(text, encoding="utf-8")
    xml = JUnitXml.fromfile(str(path))
    (suite,) = list(xml)
    declared = (suite.tests, suite.failures, suite.errors, suite.skipped)
    suite.update_statistics()  # recount from the testcases: the declared counts must agree
    assert declared == (suite.tests, suite.failures, suite.errors, suite.skipped)
    cases = {}
    for case in suite:
        failures = [r for r in case.result if isinstance(r, Failure)]
        assert len(failures) == len(case.result)  # nothing but failures: no errors, no skips
        assert all(f.message and f.text for f in failures)
        cases[case.name] = (sorted(f.type for f in failures), case.system_out or "")
    return suite, cases


@pytest.fixture
def folder(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    (root / "ckpts").mkdir(parents=True)
    hostile_pickle(root / "ckpts" / "evil.pkl")
    nonfinite_weights(root / "ckpts" / "nan.safetensors")
    clean_weights(root / "ckpts" / "clean.safetensors")
    shutil.copytree(SAMPLES / "interrupted", root / "run")
    monkeypatch.chdir(root)
    return root


def junit_of(capsys, *argv: str) -> tuple[int, str]:
    status = main([*argv, "--format", "junit"])
    return status, capsys.readouterr().out


def test_one_testcase_per_checkpoint_and_a_failure_per_finding_at_or_above_fail_on(folder, capsys, tmp_path):
    status, text = junit_of(capsys, "--report", "ckpts", "run")
    suite, cases = parse(text, tmp_path)
    assert status == EXIT_FINDINGS
    assert set(cases) == {
        "ckpts/clean.safetensors",
        "ckpts/evil.pkl",
        "ckpts/nan.safetensors",
        "run/tiny.pth",
        "run/tiny_resume.pth",
    }
    assert cases["ckpts/evil.pkl"][0] == ["UNSAFE_PICKLE"]
    assert cases["ckpts/nan.safetensors"][0] == ["NONFINITE"]
    assert cases["ckpts/clean.safetensors"] == ([], "")
    # LEFTOVER_TMP is a warning: below the default --fail-on error, listed in system-out instead
    assert cases["run/tiny_resume.pth"][0] == [] and "LEFTOVER_TMP (warning)" in cases["run/tiny_resume.pth"][1]
    assert (suite.tests, suite.failures) == (5, 2)

    status, text = junit_of(capsys, "--report", "ckpts", "run", "--fail-on", "warning")
    suite, cases = parse(text, tmp_path)
    assert status == EXIT_FINDINGS and cases["run/tiny_resume.pth"] == (["LEFTOVER_TMP"], "")
    assert suite.failures == 3

    status, text = junit_of(capsys, "--report", "ckpts", "run", "--fail-on", "never")
    suite, cases = parse(text, tmp_path)
    assert status == EXIT_OK and suite.failures == 0
    assert "UNSAFE_PICKLE (error)" in cases["ckpts/evil.pkl"][1]


def test_hostile_names_are_escaped_and_the_xml_stays_well_formed(folder, capsys, tmp_path):
    status, text = junit_of(capsys, "--report", "ckpts/nan.safetensors")
    ET.fromstring(text.encode("utf-8"))  # XML 1.0 forbids most control characters: it would not parse
    assert "\x1b" not in text and "\u202e" not in text
    _, cases = parse(text, tmp_path)
    assert status == EXIT_FINDINGS and cases["ckpts/nan.safetensors"][0] == ["NONFINITE"]
    assert "layer\\x1b[31m.\\u202eexe." in text


def test_diff_testcases_are_the_two_files(tmp_path, capsys, monkeypatch):
    for name in ("straight-60", "stopped-30"):
        shutil.copytree(SAMPLES / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    status, text = junit_of(capsys, "diff", "straight-60/tiny.pth", "stopped-30/tiny.pth", "--report")
    suite, cases = parse(text, tmp_path)
    assert status == EXIT_FINDINGS and set(cases) == {"straight-60/tiny.pth", "stopped-30/tiny.pth"}
    assert cases["straight-60/tiny.pth"][0] == []
    changed = cases["stopped-30/tiny.pth"][0]
    assert changed and set(changed) == {"TENSOR_CHANGED"} and suite.failures == len(changed)


def test_repair_fails_each_leftover_that_needs_the_user(folder, capsys, tmp_path):
    status, text = junit_of(capsys, "repair", "run")
    suite, cases = parse(text, tmp_path)
    assert status == EXIT_FINDINGS and cases == {"run/tiny_resume.pth.tmp": (["LEFTOVER_TMP"], "")}
    status, text = junit_of(capsys, "repair", "run", "--apply")
    suite, cases = parse(text, tmp_path)
    assert status == EXIT_OK and cases == {"run/tiny_resume.pth.tmp": ([], "")} and suite.failures == 0


def test_last_good_fails_each_candidate_by_what_keeps_it_from_resuming(tmp_path, capsys, monkeypatch):
    damaged_run(tmp_path / "run")
    monkeypatch.chdir(tmp_path)
    status, text = junit_of(capsys, "last-good", "run")
    suite, cases = parse(text, tmp_path)
    assert status == EXIT_OK and suite.name == "ckinspect last-good run"
    assert {name: failures for name, (failures, _) in cases.items()} == {
        "run/evil.pkl": ["UNSAFE_PICKLE"],
        "run/c.safetensors": ["RESUME_INCOMPLETE"],  # weights only: no optimizer state or step
        "run/i/tiny_resume.pth": [],  # the last good one
        "run/b/tiny_resume.pth": ["CORRUPT"],
        "run/step000090": ["CORRUPT", "MISSING_PARTS"],
    }
    assert cases["run/i/tiny_resume.pth"][1].startswith("LEFTOVER_TMP (warning): tiny_resume.pth.tmp is partial")
    assert (suite.tests, suite.failures) == (5, 5)
