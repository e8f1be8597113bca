"""watch judges each save of a real framework's run with the run around it, as last-good does (issue 27):
what only the run's other saves tell (an Accelerate part copied from another save: PARTS_DISAGREE; a
restart with another model: MIXED_RUN; a rank file every other save has: MISSING_PARTS) is in watch's
verdict on that save, saved one by one (live) or found all at once (a backlog), and when a later save is
what decides it, the earlier save is reported again (REJUDGED) with the verdict last-good gives it."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import torch

from ckinspect.cli import main
from ckinspect.jobs.watch import JUDGED, REJUDGED, Follower
from tests.analysis.runs.fixtures import framework_run
from tests.analysis.runs.saves import age
from tests.analysis.runs.test_verdicts import answers

pytestmark = [pytest.mark.frameworks, pytest.mark.slow]


def later() -> float:
    """An hour from now: every save copied or damaged in the test has been quiet for the settle time."""
    return time.time() + 3600


def last_good_all(run: Path, capsys) -> dict[str, tuple[str, list[str]]]:
    """last-good --all's verdict and reasons on every save, by folder or file name."""
    main(["last-good", str(run), "--all", "--format", "json"])
    listed = json.loads(capsys.readouterr().out)["run"]["checkpoints"]
    return {Path(c["path"]).name: (c["verdict"], c["reasons"]) for c in listed}


def watched(events) -> dict[str, tuple[str, list[str]]]:
    """Watch's verdict on every save: its latest event's."""
    return {e.checkpoint.path.name: (e.checkpoint.verdict, e.checkpoint.reasons) for e in events}


def codes_of(verdicts: dict[str, tuple[str, list[str]]]) -> dict[str, tuple[str, list[str]]]:
    """Each verdict with its reasons' codes only."""
    return {name: (verdict, [r.split(":", 1)[0] for r in reasons]) for name, (verdict, reasons) in verdicts.items()}


def seen(events) -> list[tuple[str, str, str, list[str]]]:
    """Each event's kind, save, verdict and finding codes (Accelerate's RNG pickles' warning left out)."""
    out = []
    for e in events:
        out.append((e.kind, e.checkpoint.path.name, e.checkpoint.verdict, sorted({f.code for f in e.findings})))
    return [(kind, name, verdict, [c for c in codes if c != "ALLOWLIST_NEEDED"]) for kind, name, verdict, codes in out]


def live(source: Path, target: Path, names: list[str]) -> list:
    """The run's saves appearing one at a time in `target`, watch polling after each. Deciding what the
    run tells of each save reads no stored byte twice, and keeps no listing of an earlier save."""
    from ckinspect.io.blobs import logging_reads

    target.mkdir(parents=True)
    watch = Follower(target.parent if target.name == "checkpoints" else target, settle=30.0, clock=later)
    events = []
    try:
        with logging_reads() as log:
            for name in names:
                copy = shutil.copytree if (source / name).is_dir() else shutil.copy2
                copy(source / name, target / name)
                events += watch.poll()
        assert log.ranges and log.read_again() == dict.fromkeys(log.ranges, 0)
        assert all(part.checkpoint is None for held in watch.saves.values() for part in held.checkpoint.parts)
        assert len(watch.context.saves) == len(names) and len(watch.context._models) == 1  # one model's shapes
    finally:
        watch.close()
    return events


def backlog(run: Path) -> list:
    watch = Follower(run, settle=30.0, clock=later)
    try:
        return watch.poll()
    finally:
        watch.close()


ACCELERATE_SAVES = ["checkpoint_0", "checkpoint_1", "checkpoint_2"]


@pytest.mark.parametrize("part", ["scheduler.bin", "optimizer.bin"])
def test_an_accelerate_part_copied_from_another_save_is_parts_disagree_in_watch(tmp_path, capsys, part):
    """checkpoint_2's scheduler.bin or optimizer.bin copied from checkpoint_0: the third save, so watch
    decides it at once, with last-good's words, and steps back from it as last-good does."""
    run = framework_run("accelerate", tmp_path)
    saves = run / "checkpoints"
    (saves / "checkpoint_2" / part).write_bytes((saves / "checkpoint_0" / part).read_bytes())
    age(saves / "checkpoint_2" / part, 3600)  # quiet for long, as watch --once needs to judge it
    expected = last_good_all(run, capsys)
    verdict, [reason] = expected["checkpoint_2"]
    assert verdict == "damaged" and reason.startswith("PARTS_DISAGREE: ")
    assert reason.endswith(f"{part} comes from another save")
    for events in (live(saves, tmp_path / "live" / "checkpoints", ACCELERATE_SAVES), backlog(run)):
        assert seen(events) == [
            (JUDGED, "checkpoint_0", "good", []),
            (JUDGED, "checkpoint_1", "good", []),
            (JUDGED, "checkpoint_2", "damaged", ["PARTS_DISAGREE"]),
        ]
        assert watched(events) == expected
        assert events[1].updates is not None and events[2].updates is not None  # compared, as a finished save is
    assert set(answers(run, capsys).values()) == {str(saves / "checkpoint_1")}


def test_an_earlier_accelerate_save_is_reported_again_when_a_later_one_decides_it(tmp_path, capsys):
    """checkpoint_1's optimizer.bin copied from checkpoint_0: with one other save nothing relates its steps,
    so watch calls it good when it comes; the third save decides it, and watch reports checkpoint_1 again,
    damaged, as last-good does."""
    run = framework_run("accelerate", tmp_path)
    saves = run / "checkpoints"
    (saves / "checkpoint_1" / "optimizer.bin").write_bytes((saves / "checkpoint_0" / "optimizer.bin").read_bytes())
    age(saves / "checkpoint_1" / "optimizer.bin", 3600)  # quiet for long, as watch --once needs to judge it
    expected = last_good_all(run, capsys)
    assert expected["checkpoint_1"] == ("damaged", [
        "PARTS_DISAGREE: scheduler.bin records last_epoch 8 but optimizer.bin's per-parameter step is 2 (2 processes); "
        "in the run's 2 other saves the scheduler stepped once per process per optimizer step (Accelerate's default), "
        "and checkpoint_0 records last_epoch 4 at step 2: optimizer.bin comes from another save"])  # fmt: skip
    for events in (live(saves, tmp_path / "live" / "checkpoints", ACCELERATE_SAVES), backlog(run)):
        assert seen(events) == [
            (JUDGED, "checkpoint_0", "good", []),
            (JUDGED, "checkpoint_1", "good", []),
            (JUDGED, "checkpoint_2", "good", []),
            (REJUDGED, "checkpoint_1", "damaged", ["PARTS_DISAGREE"]),
        ]
        assert watched(events) == expected
        assert events[-1].index == 4 and events[-1].to_json()["verdict"] == "damaged"
    assert set(answers(run, capsys).values()) == {str(saves / "checkpoint_2")}


def test_a_rank_file_every_other_save_has_is_missing_parts_in_watch_once_the_others_come(tmp_path, capsys):
    """checkpoint_0 lacks random_states_1.pkl (no record names it; its two peers have one): alone it is
    good, and once a peer comes watch reports it again, incomplete, as last-good does."""
    run = framework_run("accelerate", tmp_path)
    saves = run / "checkpoints"
    (saves / "checkpoint_0" / "random_states_1.pkl").unlink()
    expected = last_good_all(run, capsys)
    assert expected["checkpoint_0"][0] == "incomplete"
    assert expected["checkpoint_0"][1][0].startswith("MISSING_PARTS: 1 rng file(s), where the run's 2 other")
    events = live(saves, tmp_path / "live" / "checkpoints", ACCELERATE_SAVES)
    assert seen(events) == [
        (JUDGED, "checkpoint_0", "good", []),
        (JUDGED, "checkpoint_1", "good", []),
        (REJUDGED, "checkpoint_0", "incomplete", ["MISSING_PARTS"]),
        (JUDGED, "checkpoint_2", "good", []),
    ]
    # the same verdicts and reasons; the count in the message is the run's when the event was (one other save)
    assert codes_of(watched(events)) == codes_of(expected)
    assert events[2].checkpoint.reasons[0].startswith("MISSING_PARTS: 1 rng file(s), where the run's 1 other")
    everything = backlog(run)
    assert seen(everything)[:3] == seen(events)[:3]  # judged before its peers were, then again
    assert codes_of(watched(everything)) == codes_of(expected)
    assert set(answers(run, capsys).values()) == {str(saves / "checkpoint_2")}


def _another_model(path: Path) -> None:
    """A restart with a wider model saved over this Lightning checkpoint (weights only, as the test of
    last-good's mixed run does)."""
    data = torch.load(path, map_location="cpu", weights_only=False)
    data["state_dict"] = {k: torch.zeros(*(2 * d for d in v.shape)) for k, v in data["state_dict"].items()}
    data.pop("optimizer_states")
    torch.save(data, path)


def test_a_restart_with_another_model_makes_the_older_saves_mixed_run_in_watch(tmp_path, capsys):
    """Lightning's run saved live, then its newest save overwritten by a restart with a wider model: watch
    judges the new save, then reports each older one again as MIXED_RUN; no save is good, as last-good says."""
    run = framework_run("lightning", tmp_path)
    names = ["epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt", "epoch=0-step=6.ckpt"]
    folder = tmp_path / "live"
    watch = Follower(folder, settle=30.0, clock=later)
    events = []
    try:
        folder.mkdir()
        for name in names:
            shutil.copy2(run / name, folder / name)
            events += watch.poll()
        _another_model(folder / names[-1])
        events += watch.poll()
    finally:
        watch.close()
    expected = last_good_all(folder, capsys)
    assert {verdict for verdict, _ in expected.values()} == {"not-resumable"}
    assert seen(events) == [
        (JUDGED, names[0], "good", ["BOOKKEEPING_SENTINEL"]),
        (JUDGED, names[1], "good", ["BOOKKEEPING_SENTINEL"]),
        (JUDGED, names[2], "good", ["BOOKKEEPING_SENTINEL"]),
        (JUDGED, names[2], "not-resumable", ["BOOKKEEPING_SENTINEL", "RESUME_INCOMPLETE"]),
        (REJUDGED, names[0], "not-resumable", ["BOOKKEEPING_SENTINEL", "MIXED_RUN"]),
        (REJUDGED, names[1], "not-resumable", ["BOOKKEEPING_SENTINEL", "MIXED_RUN"]),
    ]
    assert watched(events) == expected
    assert watched(backlog(folder)) == expected
    assert set(answers(folder, capsys).values()) == {None}
    # the other run's save removed: the older saves are the run's newest model again, good as last-good says
    watch = Follower(folder, settle=30.0, clock=later)
    try:
        before = watch.poll()
        (folder / names[-1]).unlink()
        after = watch.poll()
    finally:
        watch.close()
    assert seen(after) == [
        (REJUDGED, names[0], "good", ["BOOKKEEPING_SENTINEL"]),
        (REJUDGED, names[1], "good", ["BOOKKEEPING_SENTINEL"]),
    ]
    assert watched(before + after) == last_good_all(folder, capsys) | {names[-1]: expected[names[-1]]}
    assert set(answers(folder, capsys).values()) == {str(folder / names[1])}


def test_watch_reports_the_earlier_save_again_in_its_lines_and_fails_on_it(tmp_path, capsys):
    """`ckinspect watch --report --once --fail-on error`: the REJUDGED line names the earlier save, its new
    verdict and the finding, and it is what makes watch exit 1."""
    run = framework_run("accelerate", tmp_path)
    saves = run / "checkpoints"
    (saves / "checkpoint_1" / "optimizer.bin").write_bytes((saves / "checkpoint_0" / "optimizer.bin").read_bytes())
    age(saves / "checkpoint_1" / "optimizer.bin", 3600)  # quiet for long: --once judges it
    assert main(["watch", str(run), "--report", "--once", "--fail-on", "error", "--format", "json"]) == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(line["event"], Path(line["path"]).name, line["verdict"]) for line in lines] == [
        ("judged", "checkpoint_0", "good"),
        ("judged", "checkpoint_1", "good"),
        ("judged", "checkpoint_2", "good"),
        ("rejudged", "checkpoint_1", "damaged"),
    ]
    assert [f["code"] for f in lines[-1]["findings"] if f["severity"] == "error"] == ["PARTS_DISAGREE"]
    main(["watch", str(run), "--report", "--once"])
    text = capsys.readouterr().out.splitlines()[-1]
    assert "checkpoints/checkpoint_1 accelerate: damaged  (judged again: the run's other saves changed" in text
    assert "| PARTS_DISAGREE (error): scheduler.bin records last_epoch 8" in text
