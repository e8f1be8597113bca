"""`last-good --format json` at the cost of the plain answer (issue 26): by default it judges what the answer
needs (newest first: the newer saves that failed, with their findings, then the answer) and lists the older
ones as `not-judged`; `--all` judges every checkpoint. Same answer and exit status both ways, and the same
answer as the plain path, `--verify`, `--quick` and the run view (issue 27's one definition of good)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import jsonschema
import pytest
import torch

import ckinspect
from ckinspect.analysis.runs import last_good
from ckinspect.cli import main
from ckinspect.report.schema import LAST_GOOD_1, SCHEMA_1
from ckinspect.vocab import EXIT_FINDINGS, EXIT_OK, NOT_JUDGED
from tests.analysis.runs.test_runs import ds_tag

RANK = "zero_pp_rank_{}_mp_rank_00_optim_states.pt"
MODEL = "mp_rank_00_model_states.pt"


def failing_run(root: Path) -> Path:
    """DeepSpeed tags at steps 10..50: 50 lost a rank file (incomplete), 40's weights hold NaN (damaged once its
    values are read), 30 is the answer, 20 and 10 are good but older than it."""
    run = root / "ds"
    for step in (10, 20, 30, 40, 50):
        ds_tag(run, step)
    (run / "global_step50" / RANK.format(1)).unlink()
    state = torch.load(run / "global_step40" / MODEL, weights_only=False)
    state["module"]["layer.weight"][0, 0] = float("nan")
    torch.save(state, run / "global_step40" / MODEL)
    return run


def listing(capsys, run: Path, *flags: str) -> tuple[int, dict]:
    status = main(["last-good", str(run), "--format", "json", *flags])
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, LAST_GOOD_1)
    return status, doc["run"]


def verdicts(run_json: dict) -> dict[str, str]:
    return {Path(c["path"]).name: c["verdict"] for c in run_json["checkpoints"]}


def test_json_names_the_newer_failures_the_answer_and_leaves_the_older_not_judged(tmp_path, capsys):
    run = failing_run(tmp_path)
    status, listed = listing(capsys, run)
    assert status == EXIT_OK
    assert listed["last_good"] == str(run / "global_step30")
    assert verdicts(listed) == {
        "global_step10": NOT_JUDGED,
        "global_step20": NOT_JUDGED,
        "global_step30": "good",
        "global_step40": "damaged",
        "global_step50": "incomplete",
    }
    by_name = {Path(c["path"]).name: c for c in listed["checkpoints"]}
    assert [r.split(":")[0] for r in by_name["global_step50"]["reasons"]] == ["MISSING_PARTS"]
    assert by_name["global_step40"]["values_checked"] is True  # the values said no, not the structure
    assert by_name["global_step40"]["reasons"][0].startswith(f"NONFINITE: {MODEL}: ")
    assert by_name["global_step30"]["values_checked"] is True
    for older in ("global_step10", "global_step20"):
        assert (by_name[older]["reasons"], by_name[older]["values_checked"]) == ([], False)
        assert by_name[older]["step"] == int(older.removeprefix("global_step"))  # listed, from its name
    assert "not-judged" in (main(["last-good", str(run), "--format", "markdown"]), capsys.readouterr().out)[1]


def test_all_judges_every_checkpoint_and_gives_the_same_answer(tmp_path, capsys):
    run = failing_run(tmp_path)
    status, answer_only = listing(capsys, run)
    all_status, everything = listing(capsys, run, "--all")
    assert status == all_status == EXIT_OK
    assert everything["last_good"] == answer_only["last_good"] == str(run / "global_step30")
    assert verdicts(everything) == {**verdicts(answer_only), "global_step10": "good", "global_step20": "good"}
    judged = {c["path"]: c for c in answer_only["checkpoints"] if c["verdict"] != NOT_JUDGED}
    assert judged == {c["path"]: c for c in everything["checkpoints"] if c["path"] in judged}  # judged alike
    # the plain answer, --verify, --quick (no value read: 40's NaN is not seen) and the run view agree
    for flags, expected in (([], "global_step30"), (["--verify"], "global_step30"), (["--quick"], "global_step40")):
        assert main(["last-good", str(run), *flags]) == EXIT_OK
        assert capsys.readouterr().out.strip() == str(run / expected)
        quick_all = listing(capsys, run, "--all", *flags)[1]["last_good"]
        assert quick_all == listing(capsys, run, *flags)[1]["last_good"] == str(run / expected)
    view = last_good(run, everything=True)  # the TUI's run view and --report's
    assert view.last_good is not None and str(view.last_good.path) == everything["last_good"]


def test_no_good_checkpoint_exits_1_both_ways_with_every_one_judged(tmp_path, capsys):
    run = failing_run(tmp_path)
    for step in (10, 20, 30):
        (run / f"global_step{step}" / RANK.format(0)).unlink()
    for flags in ([], ["--all"]):
        status, listed = listing(capsys, run, *flags)
        assert status == EXIT_FINDINGS and listed["last_good"] is None
        assert NOT_JUDGED not in verdicts(listed).values()  # no answer stopped the search: all were needed
    assert main(["last-good", str(run)]) == EXIT_FINDINGS


def test_json_reads_the_parts_the_plain_answer_reads(tmp_path, capsys, monkeypatch):
    """The cost contract: the JSON listing opens exactly the files the plain answer opens, not the run."""
    run = failing_run(tmp_path)
    judging = importlib.import_module("ckinspect.analysis.runs.judge")  # the package re-exports `judge`, a function
    opened: list[Path] = []

    def spy(real):
        def opening(path, *args, **kwargs):
            opened.append(Path(path))
            return real(path, *args, **kwargs)

        return opening

    for how in ("inspect_path", "list_path"):  # the full read, and the listing a candidate's values start from
        monkeypatch.setattr(judging, how, spy(getattr(judging, how)))
    read: dict[str, list[Path]] = {}
    for name, flags in (("plain", []), ("json", ["--format", "json"]), ("all", ["--all", "--format", "json"])):
        opened.clear()
        assert main(["last-good", str(run), *flags]) == EXIT_OK
        capsys.readouterr()
        read[name] = sorted(opened)
    assert read["json"] == read["plain"]
    assert {p.parent.name for p in read["plain"]} == {"global_step30", "global_step40", "global_step50"}
    assert {p.parent.name for p in read["all"]} == {f"global_step{s}" for s in (10, 20, 30, 40, 50)}


def test_the_api_judges_as_the_cli_lists(tmp_path, capsys):
    run = failing_run(tmp_path)
    for options, flags in (({}, []), ({"all": True}, ["--all"]), ({"quick": True}, ["--quick"])):
        verdict = ckinspect.judge_run(run, **options)
        assert json.loads(json.dumps(verdict.to_json())) == listing(capsys, run, *flags)[1]
        assert [c.verdict for c in verdict.candidates] == [c["verdict"] for c in verdict.to_json()["checkpoints"]]
    default = ckinspect.judge_run(run)
    assert [c.verdict for c in default.candidates][:2] == [NOT_JUDGED, NOT_JUDGED]
    assert default.last_good is not None and default.last_good.path == ckinspect.last_good(run)


def test_the_report_run_view_validates_against_the_schema(tmp_path, capsys):
    run = failing_run(tmp_path)
    assert main(["--report", str(run), "--quick", "--format", "json"]) == EXIT_FINDINGS
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, SCHEMA_1)
    (view,) = doc["runs"]
    assert NOT_JUDGED not in verdicts(view).values()  # the run view judges every checkpoint


@pytest.mark.parametrize("bad", [{"verdict": "maybe"}, {"verdict": NOT_JUDGED, "reasons": ["MISSING_PARTS: x"]}])
def test_the_schema_refuses_what_the_contract_does_not_say(tmp_path, capsys, bad):
    run = failing_run(tmp_path)
    _, listed = listing(capsys, run)
    doc = {"schema": 1, "tool": "ckinspect", "version": "0", "command": "last-good", "run": listed}
    listed["checkpoints"][0].update(bad)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, LAST_GOOD_1)


def test_hf_trainer_states_older_than_the_answer_are_not_read(tmp_path, capsys, monkeypatch):
    """An HF run is ordered by its folders' steps and each trainer_state.json read when its checkpoint is
    judged: a long run in a bucket costs no GET per save. A record that disagrees with its folder's name
    is still damage, found when that checkpoint is judged."""
    from tests.analysis.runs.test_runs import hf_checkpoint

    hf = importlib.import_module("ckinspect.analysis.runs.hf")
    run = tmp_path / "hf"
    for step in (2, 4, 6, 8):
        hf_checkpoint(run, step)
    state = json.loads((run / "checkpoint-8" / "trainer_state.json").read_text())
    (run / "checkpoint-8" / "trainer_state.json").write_text(json.dumps({**state, "global_step": 2}))
    read: list[str] = []
    real = hf.read_json

    def spy(path):
        read.append(Path(path).parent.name)
        return real(path)

    monkeypatch.setattr(hf, "read_json", spy)
    for flags, states in (
        ([], ["checkpoint-6", "checkpoint-8"]),
        (["--all"], [f"checkpoint-{s}" for s in (2, 4, 6, 8)]),
    ):
        read.clear()
        status, listed = listing(capsys, run, *flags)
        assert status == EXIT_OK and listed["last_good"] == str(run / "checkpoint-6")
        assert sorted(read) == states
        newest = next(c for c in listed["checkpoints"] if c["path"].endswith("checkpoint-8"))
        assert newest["verdict"] == "damaged"
        assert (
            newest["reasons"][0] == "PARTS_DISAGREE: folder checkpoint-8 but trainer_state.json records global_step 2"
        )
        assert newest["step"] == 2  # the record's, once read
