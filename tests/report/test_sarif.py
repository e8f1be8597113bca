"""`--format sarif`: every output valid against the official SARIF 2.1.0 schema (OASIS, kept in
tests/report/sarif/ with its license) and carrying what GitHub code scanning needs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ckinspect.cli import main
from ckinspect.report.rules import RULE_TEXTS, all_codes
from ckinspect.vocab import DIFF_CODES, EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, SEVERITY
from tests.report.ci_files import (
    HOSTILE_NAME,
    SAMPLES,
    clean_weights,
    damaged_run,
    hostile_pickle,
    nonfinite_weights,
)

pytestmark = pytest.mark.torchfree

SCHEMA = json.loads((Path(__file__).parent / "sarif" / "sarif-schema-2.1.0.json").read_text())
LEVELS = {"error": "error", "warning": "warning", "info": "note"}


def validate(doc: dict) -> None:
    """The official schema, then the subset GitHub code scanning reads (docs: "SARIF support for code scanning")."""
    import jsonschema

    jsonschema.Draft4Validator.check_schema(SCHEMA)
    errors = sorted(jsonschema.Draft4Validator(SCHEMA).iter_errors(doc), key=str)
    assert not errors, errors[0]
    assert doc["version"] == "2.1.0" and doc["$schema"].endswith("sarif-schema-2.1.0.json")
    (run,) = doc["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "ckinspect" and driver["version"]
    rules = driver["rules"]
    ids = [r["id"] for r in rules]
    assert len(ids) == len(set(ids)) and len(rules) <= 25_000
    for rule in rules:
        assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"] and rule["help"]["text"]
        assert rule["defaultConfiguration"]["level"] in ("error", "warning", "note")
    assert len(run["results"]) <= 25_000
    for result in run["results"]:
        assert result["ruleId"] in ids and ids[result["ruleIndex"]] == result["ruleId"]
        assert result["message"]["text"].strip()
        assert result["level"] == rules[result["ruleIndex"]]["defaultConfiguration"]["level"]
        assert 1 <= len(result["locations"]) <= 10
        physical = result["locations"][0]["physicalLocation"]
        uri = physical["artifactLocation"]["uri"]
        assert physical["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
        assert not uri.startswith(("/", "file:")) and ":" not in uri.split("/")[0], uri  # relative, no scheme
        assert physical["region"]["startLine"] >= 1
        assert all(isinstance(v, str) and v for v in result["partialFingerprints"].values())
    fingerprints = [tuple(sorted(r["partialFingerprints"].items())) for r in run["results"]]
    assert len(fingerprints) == len(set(fingerprints))  # no two alerts merged into one
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"].endswith("/")


def sarif_of(capsys, *argv: str) -> tuple[int, dict]:
    status = main([*argv, "--format", "sarif"])
    out = capsys.readouterr().out
    return status, json.loads(out)


def results(doc: dict) -> set[tuple[str, str, str | None, str]]:
    """(ruleId, uri, tensor or None, level) of every result."""
    found = set()
    for r in doc["runs"][0]["results"]:
        where = r["locations"][0]
        tensor = where.get("logicalLocations", [{}])[0].get("name")
        found.add((r["ruleId"], where["physicalLocation"]["artifactLocation"]["uri"], tensor, r["level"]))
    return found


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A repository-like folder: a hostile pickle, NaN weights with a hostile tensor name, clean weights,
    an interrupted save; the report runs from its root, as a CI job does."""
    root = tmp_path / "repo"
    (root / "ckpts").mkdir(parents=True)
    hostile_pickle(root / "ckpts" / "evil.pkl")
    nonfinite_weights(root / "ckpts" / "nan.safetensors")
    clean_weights(root / "ckpts" / "clean.safetensors")
    shutil.copytree(SAMPLES / "interrupted", root / "run")
    monkeypatch.chdir(root)
    return root


def test_rules_cover_every_code_with_texts_and_levels_follow_severities():
    assert set(all_codes()) == set(SEVERITY) | set(DIFF_CODES)
    assert set(all_codes()) <= set(RULE_TEXTS)
    for code in all_codes():
        assert RULE_TEXTS[code].short and RULE_TEXTS[code].help and RULE_TEXTS[code].short != RULE_TEXTS[code].help


def test_report_results_one_per_finding_at_the_file_and_tensor(folder, capsys):
    status, doc = sarif_of(capsys, "--report", "ckpts", "run", "--quick")
    validate(doc)
    assert status == EXIT_FINDINGS  # the format does not change the verdict
    escaped = "layer\\x1b[31m.\\u202eexe.\nweight"
    assert results(doc) == {
        ("UNSAFE_PICKLE", "ckpts/evil.pkl", None, "error"),
        ("LEFTOVER_TMP", "run/tiny_resume.pth", None, "warning"),
    }  # --quick: no value scan, so no NONFINITE yet
    status, doc = sarif_of(capsys, "--report", "ckpts", "run")
    validate(doc)
    assert results(doc) == {
        ("UNSAFE_PICKLE", "ckpts/evil.pkl", None, "error"),
        ("NONFINITE", "ckpts/nan.safetensors", escaped, "error"),
        ("LEFTOVER_TMP", "run/tiny_resume.pth", None, "warning"),
    }
    rules = {r["id"]: r for r in doc["runs"][0]["tool"]["driver"]["rules"]}
    assert {code: rules[code]["defaultConfiguration"]["level"] for code in SEVERITY} == {
        code: LEVELS[s] for code, s in SEVERITY.items()
    }
    assert "security" in rules["UNSAFE_PICKLE"]["properties"]["tags"]
    assert float(rules["UNSAFE_PICKLE"]["properties"]["security-severity"]) >= 7.0


def test_names_from_a_file_never_reach_the_document_raw(folder, capsys):
    main(["--report", "ckpts", "--format", "sarif"])
    text = capsys.readouterr().out
    doc = json.loads(text)
    validate(doc)
    strings = []

    def collect(node):
        if isinstance(node, dict):
            for v in node.values():
                collect(v)
        elif isinstance(node, list):
            for v in node:
                collect(v)
        elif isinstance(node, str):
            strings.append(node)

    collect(doc)
    assert any(HOSTILE_NAME.replace("\x1b", "\\x1b").replace("\u202e", "\\u202e") in s for s in strings)
    for s in strings:
        assert not any(ord(c) < 0x20 and c not in "\n\t" for c in s), repr(s)
        assert "\u202e" not in s and "\x1b" not in s


def test_file_names_are_percent_encoded_uris(folder, capsys):
    odd = folder / "odd dir" / "50% #1.safetensors"
    odd.parent.mkdir()
    clean_weights(odd)
    nonfinite_weights(folder / "odd dir" / "nan\x1b.safetensors")
    status, doc = sarif_of(capsys, "--report", "odd dir")
    validate(doc)
    assert status == EXIT_FINDINGS
    (uri,) = {u for _, u, _, _ in results(doc)}
    assert uri == "odd%20dir/nan%1B.safetensors"


def test_a_file_outside_the_root_gets_an_absolute_file_uri(tmp_path, capsys, monkeypatch):
    hostile_pickle(tmp_path / "evil.pkl")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    status, doc = sarif_of(capsys, "--report", str(tmp_path / "evil.pkl"))
    import jsonschema

    jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft4Validator)
    ((_, uri, _, _),) = results(doc)
    assert status == EXIT_FINDINGS and uri == (tmp_path / "evil.pkl").as_uri()


def test_clean_report_has_rules_and_no_results(folder, capsys):
    status, doc = sarif_of(capsys, "--report", "ckpts/clean.safetensors")
    validate(doc)
    assert status == EXIT_OK and doc["runs"][0]["results"] == []
    assert {r["id"] for r in doc["runs"][0]["tool"]["driver"]["rules"]} == set(all_codes())


def test_diff_results_sit_on_the_side_they_belong_to(tmp_path, capsys, monkeypatch):
    for name in ("straight-60", "stopped-30"):
        shutil.copytree(SAMPLES / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    status, doc = sarif_of(capsys, "diff", "straight-60/tiny.pth", "stopped-30/tiny.pth", "--report")
    validate(doc)
    found = results(doc)
    assert status == EXIT_FINDINGS
    assert {(rule, uri, level) for rule, uri, _, level in found} == {
        ("TENSOR_CHANGED", "stopped-30/tiny.pth", "error"),
    }
    tensors = {t for _, _, t, _ in found}
    assert "tok_embeddings.weight" in tensors and len(tensors) == len(found) >= 10
    status, doc = sarif_of(capsys, "diff", "straight-60/tiny.pth", "straight-60/tiny.pth", "--report")
    validate(doc)
    assert status == EXIT_OK and results(doc) == set()


def test_diff_only_in_a_is_located_at_a(tmp_path, capsys, monkeypatch):
    import numpy as np

    from tests.report.ci_files import safetensors_file

    monkeypatch.chdir(tmp_path)
    safetensors_file(tmp_path / "a.safetensors", {"w": np.ones(3, np.float32), "gone": np.zeros(2, np.float32)})
    safetensors_file(tmp_path / "b.safetensors", {"w": np.ones(3, np.float32), "new": np.zeros(2, np.float32)})
    status, doc = sarif_of(capsys, "diff", "a.safetensors", "b.safetensors", "--report")
    validate(doc)
    assert status == EXIT_FINDINGS
    assert results(doc) == {
        ("TENSOR_ONLY_IN_A", "a.safetensors", "gone", "error"),
        ("TENSOR_ONLY_IN_B", "b.safetensors", "new", "error"),
    }


def test_repair_plan_then_applied(folder, capsys):
    status, doc = sarif_of(capsys, "repair", "run")
    validate(doc)
    assert status == EXIT_FINDINGS  # a dry run with an action pending
    assert results(doc) == {("LEFTOVER_TMP", "run/tiny_resume.pth.tmp", None, "warning")}
    (result,) = doc["runs"][0]["results"]
    assert "set aside" in result["message"]["text"] and "[planned]" in result["message"]["text"]
    status, doc = sarif_of(capsys, "repair", "run", "--apply")
    validate(doc)
    assert status == EXIT_OK and results(doc) == set()  # the repair is done: nothing left to alert on
    assert not (folder / "run" / "tiny_resume.pth.tmp").exists()
    assert main(["repair", "run", "--undo", "--format", "sarif"]) == EXIT_ERROR
    assert "--undo" in capsys.readouterr().err


def test_last_good_results_are_the_findings_of_every_candidate(tmp_path, capsys, monkeypatch):
    damaged_run(tmp_path / "run")
    monkeypatch.chdir(tmp_path)
    status, doc = sarif_of(capsys, "last-good", "run")
    validate(doc)
    assert status == EXIT_OK  # i/tiny_resume.pth qualifies; the document replaces the path on stdout
    assert results(doc) == {
        ("UNSAFE_PICKLE", "run/evil.pkl", None, "error"),
        ("CORRUPT", "run/b/tiny_resume.pth", None, "error"),
        ("MISSING_PARTS", "run/step000090", None, "error"),  # from the checkpoint's records: no .metadata
        ("CORRUPT", "run/step000090", None, "error"),  # from reading the folder
        ("LEFTOVER_TMP", "run/i/tiny_resume.pth", None, "warning"),  # another save's tmp: reported, not held
    }  # weights only (c.safetensors) is no finding: it is not a resume point, and nothing is wrong with it
    (tmp_path / "run" / "i" / "tiny_resume.pth").unlink()
    status, doc = sarif_of(capsys, "last-good", "run")
    validate(doc)
    assert status == EXIT_FINDINGS  # none qualifies now
    assert ("LEFTOVER_TMP", "run/i/tiny_resume.pth", None, "warning") in results(doc)  # a save that never renamed


def test_drift_overflow_is_a_result(tmp_path, capsys, monkeypatch):
    import numpy as np

    from tests.report.ci_files import safetensors_file

    monkeypatch.chdir(tmp_path)
    safetensors_file(tmp_path / "big.safetensors", {"w": np.array([1.0, 1e6, -2e5], np.float32)})
    status, doc = sarif_of(capsys, "drift", "big.safetensors", "--report", "--fail-on", "warning")
    validate(doc)
    assert status == EXIT_FINDINGS
    assert results(doc) == {("FP16_OVERFLOW", "big.safetensors", "w", "warning")}


def test_output_file_is_the_same_document(folder, capsys):
    assert main(["--report", "ckpts/evil.pkl", "--format", "sarif", "-o", "out.sarif"]) == EXIT_FINDINGS
    assert capsys.readouterr().out == ""
    doc = json.loads((folder / "out.sarif").read_text(encoding="utf-8"))
    validate(doc)
    assert results(doc) == {("UNSAFE_PICKLE", "ckpts/evil.pkl", None, "error")}


def test_commands_without_findings_refuse_sarif(folder, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["convert", "ckpts/clean.safetensors", "out.safetensors", "--format", "sarif"])
    assert stop.value.code == EXIT_ERROR and "invalid choice: 'sarif'" in capsys.readouterr().err
    assert not (folder / "out.safetensors").exists()
