"""The hostile corpus (tests/hostile/corpus.py) through report, diff, repair (dry run, apply, undo),
salvage and convert, each command in one child process under a 1 GiB address-space limit.

Per case: --report's exit status and finding code; for every run: no internal error, no MemoryError,
no control character printed. After all runs: no marker file (no payload ran) and the victim file
outside every case folder holds the same bytes.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, cli_env
from tests.hostile.corpus import VICTIM, VICTIM_BYTES, build

LIMIT = 1 << 30  # the threat model's bound, for every command (salvage imports torch and still fits)
COMMANDS = ("report", "diff", "salvage", "convert", "repair")  # repair last: --apply moves files
CONTROL = ("\x1b", "\x07", "\x9b", "\u202e")

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("pickle_paths")]  # compiled pickle pass and pure path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    import torch

    root = tmp_path_factory.mktemp("hostile")
    cases = {c.name: c for c in build(root)}
    torch.save({"w": torch.ones(4), "step": 1}, root / "benign.pt")
    results = {}
    for command in COMMANDS:
        subprocess.run([sys.executable, "-m", "tests.hostile.run_cases", str(root), command, str(LIMIT)],
                       cwd=REPO, env=cli_env(), check=True, timeout=1500)  # fmt: skip
        results[command] = {r["case"]: r["runs"] for r in json.loads((root / f"results_{command}.json").read_text())}
    return root, cases, results


def _codes(run: dict) -> set[str]:
    doc = json.loads(run["stdout"])
    return {f["code"] for entry in doc["files"] for f in entry["findings"]}


def test_the_corpus_covers_every_family_with_at_least_80_cases(corpus):
    _root, cases, _results = corpus
    families = {c.family for c in cases.values()}
    assert len(cases) >= 80
    assert families == {"pickle", "semantics", "container", "folder", "containment", "bounds", "output"}


def test_report_gives_each_case_its_exit_status_and_finding(corpus):
    _root, cases, results = corpus
    wrong = []
    for name, case in cases.items():
        run = results["report"][name][0]
        codes = _codes(run) if run["exit"] in (0, 1) else set()
        if run["exit"] != case.exit or (case.code and case.code not in codes):
            wrong.append((name, run["exit"], sorted(codes), run["stderr"][:200]))
    assert wrong == []


def test_no_run_ends_in_an_internal_error_or_out_of_memory(corpus):
    _root, _cases, results = corpus
    bad = [(command, name, run["argv"][:1], (run["stderr"] or run["stdout"])[-300:])
           for command, by_case in results.items() for name, runs in by_case.items() for run in runs
           if run["exit"] not in (0, 1, 2) or "internal error" in run["stderr"] or "MemoryError" in run["stdout"]
           + run["stderr"] or "Traceback" in run["stderr"]]  # fmt: skip
    assert bad == []


def test_no_name_reaches_the_terminal_raw(corpus):
    _root, _cases, results = corpus
    for command, by_case in results.items():
        for name, runs in by_case.items():
            for run in runs:
                if "json" in run["argv"]:
                    continue  # JSON escapes control characters itself
                shown = run["stdout"] + run["stderr"]
                assert not any(c in shown for c in CONTROL), (command, name)


def test_repair_refuses_what_leaves_the_folder_and_never_promotes_a_payload(corpus):
    root, cases, results = corpus
    for name, case in cases.items():
        dry, apply, undo = results["repair"][name]
        if "undo_exit" in case.extra:
            assert undo["exit"] == case.extra["undo_exit"] and undo["stderr"].count("\n") == 1, name
        if "apply_exit" in case.extra:
            assert apply["exit"] == case.extra["apply_exit"], name
        if "tmp_kept" in case.extra:
            assert (root / "cases" / name / case.extra["tmp_kept"]).exists(), name


def test_a_hostile_file_never_passes_diff_salvage_or_convert_as_clean(corpus):
    _root, cases, results = corpus
    for name, case in cases.items():
        if case.code != "UNSAFE_PICKLE":
            continue
        for command in ("diff", "salvage", "convert"):
            for run in results[command].get(name, []):
                assert run["exit"] != 0, (command, name, run["stdout"][-300:])


def test_no_payload_ran_and_nothing_outside_the_folders_changed(corpus):
    root, _cases, _results = corpus
    assert sorted(p.name for p in root.glob("MARKER_*")) == []
    assert (root / VICTIM).read_bytes() == VICTIM_BYTES
