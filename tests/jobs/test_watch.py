"""The follower behind `ckinspect watch`: each finished save judged once and in order, a save still being
written never judged, one whose writer is gone judged after the settle time, and the three anomalies."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ckinspect.analysis.inspect import inspect_path
from ckinspect.analysis.updates import compare_saves
from ckinspect.jobs.watch import ABANDONED, IN_PROGRESS, JUDGED, Follower
from tests.analysis.runs.saves import LAYERS, age, half_written, save, state

SETTLE = 30.0


class Clock:
    """Time as the test says: the settle rule is checked without waiting."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def follower(run, clock: Clock | None = None) -> Follower:
    import time

    return Follower(run, settle=SETTLE, clock=clock or Clock(time.time()))


def codes(event) -> list[str]:
    return sorted({f.code for f in event.findings})


def test_each_finished_save_is_judged_once_and_in_order(tmp_path):
    for step in (30, 10, 20):  # written out of order: judged by step
        save(tmp_path / f"ckpt-{step:04d}.pt", step)
    watch = follower(tmp_path)
    events = watch.poll()
    assert [(e.kind, e.step, e.checkpoint.verdict) for e in events] == [
        (JUDGED, 10, "good"),
        (JUDGED, 20, "good"),
        (JUDGED, 30, "good"),
    ]
    assert [e.index for e in events] == [1, 2, 3]
    assert [codes(e) for e in events] == [[], [], []]
    assert watch.poll() == []  # nothing new: nothing judged again
    save(tmp_path / "ckpt-0040.pt", 40)
    again = watch.poll()
    assert [(e.step, e.previous.name, e.updates.step_delta) for e in again] == [(40, "ckpt-0030.pt", 10)]
    assert watch.poll() == []


def test_a_file_saved_again_under_its_name_is_a_new_checkpoint(tmp_path):
    path = tmp_path / "run_resume.pth"
    save(path, 10)
    watch = follower(tmp_path)
    assert [e.step for e in watch.poll()] == [10]
    save(path, 20)  # the trainer's atomic replace: a new file under the same name
    [event] = watch.poll()
    assert (event.step, event.previous, event.updates.step_delta, codes(event)) == (20, path, 10, [])
    # compared with the bytes the replaced file held (kept open), not with itself
    before, after = state(10)["model"], state(20)["model"]
    delta = sum(float(((after[k].double() - before[k].double()) ** 2).sum()) for k in before)
    base = sum(float((before[k].double() ** 2).sum()) for k in before)
    assert event.updates.ratio("model") == pytest.approx(math.sqrt(delta / base), rel=1e-12)
    assert watch.poll() == []


def test_a_half_written_save_is_never_judged_while_its_writer_may_be_alive(tmp_path):
    save(tmp_path / "ckpt-0010.pt", 10)
    tmp = half_written(tmp_path / "ckpt-0020.pt", 20)
    clock = Clock(tmp.stat().st_mtime + 1)
    watch = follower(tmp_path, clock)
    assert [(e.kind, e.step) for e in watch.poll()] == [(JUDGED, 10)]
    clock.now += SETTLE - 2
    assert watch.poll() == []  # still inside the settle time: no verdict, certainly no "broken"
    # --once does not wait: it says the save is in progress, with no finding
    [seen] = Follower(tmp_path, settle=SETTLE, clock=clock).poll(once=True)[1:]
    assert (seen.kind, seen.checkpoint.path.name, seen.findings) == (IN_PROGRESS, "ckpt-0020.pt", [])


def test_a_save_renamed_into_place_is_judged_good_and_its_tmp_never_reported(tmp_path):
    tmp = half_written(tmp_path / "ckpt-0010.pt", 10)
    clock = Clock(tmp.stat().st_mtime + 1)
    watch = follower(tmp_path, clock)
    assert watch.poll() == []
    tmp.unlink()
    save(tmp_path / "ckpt-0010.pt", 10)  # the writer finished: tmp written whole, then renamed
    clock.now += 5 * SETTLE
    [event] = watch.poll()
    assert (event.kind, event.step, event.checkpoint.verdict, codes(event)) == (JUDGED, 10, "good", [])
    assert watch.poll() == []


def test_a_save_whose_writer_is_gone_is_reported_after_the_settle_time(tmp_path):
    tmp = half_written(tmp_path / "ckpt-0020.pt", 20)
    clock = Clock(tmp.stat().st_mtime + 1)
    watch = follower(tmp_path, clock)
    assert watch.poll() == []
    clock.now += SETTLE  # unchanged for the settle time: its writer is gone
    [event] = watch.poll()
    assert (event.kind, event.checkpoint.verdict, codes(event)) == (ABANDONED, "incomplete", ["LEFTOVER_TMP"])
    assert event.seconds_after_save >= SETTLE
    assert watch.poll() == []  # reported once


def test_a_dcp_folder_without_metadata_waits_then_is_missing_parts(tmp_path):
    folder = tmp_path / "tiny_step000010"
    folder.mkdir()
    (folder / "__0_0.distcp").write_bytes(b"\0" * 4096)  # the rank file; `.metadata` comes last
    clock = Clock((folder / "__0_0.distcp").stat().st_mtime + 1)
    watch = follower(tmp_path, clock)
    assert watch.poll() == []
    clock.now += SETTLE
    [event] = watch.poll()
    # the run's judge: MISSING_PARTS from the folder's records, CORRUPT from the DCP reader (no .metadata)
    assert (event.kind, event.checkpoint.framework, codes(event)) == (ABANDONED, "dcp", ["CORRUPT", "MISSING_PARTS"])
    assert event.checkpoint.verdict == "incomplete"


def test_a_save_broken_the_way_an_unfinished_one_looks_waits_for_quiet(tmp_path):
    """A writer that writes in place (no tmp): a cut file right after its last write is not called broken."""
    path = save(tmp_path / "ckpt-0010.pt", 10)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    clock = Clock(path.stat().st_mtime + 1)
    watch = follower(tmp_path, clock)
    assert watch.poll() == []
    clock.now += SETTLE
    [event] = watch.poll()
    assert (event.kind, event.checkpoint.verdict, codes(event)) == (JUDGED, "damaged", ["CORRUPT"])


def test_an_old_dead_save_is_reported_at_once(tmp_path):
    tmp = half_written(tmp_path / "ckpt-0020.pt", 20)
    age(tmp, 2 * SETTLE)
    [event] = follower(tmp_path).poll()
    assert (event.kind, codes(event)) == (ABANDONED, ["LEFTOVER_TMP"])


# ---------------------------------------------------------------------------------------------- anomalies


def test_a_steady_run_has_no_anomalies(tmp_path):
    for step in range(10, 110, 10):
        save(tmp_path / f"ckpt-{step:04d}.pt", step)
    events = follower(tmp_path).poll()
    assert len(events) == 10
    assert [codes(e) for e in events] == [[]] * 10


def test_an_update_far_outside_the_runs_history(tmp_path):
    for step in (10, 20, 30, 40, 50):
        save(tmp_path / f"ckpt-{step:04d}.pt", step, jump=30.0 if step == 50 else 1.0)
    events = follower(tmp_path).poll()
    assert [codes(e) for e in events] == [[], [], [], [], ["UPDATE_RATIO_OUTLIER"]]
    [finding] = events[-1].findings
    assert finding.severity == "warning"
    assert finding.message.startswith("model update ||Δw||/||w||")
    assert "at step 50 (ckpt-0050.pt), more than 10x above the run's median" in finding.message


def test_a_layer_that_stopped_changing(tmp_path):
    for step in (10, 20, 30, 40, 50):
        save(tmp_path / f"ckpt-{step:04d}.pt", step, frozen_from={"layers.1.wk": 30})
    events = follower(tmp_path).poll()
    assert [codes(e) for e in events] == [[], [], [], ["LAYER_FROZEN"], []]  # once, when it stops
    [finding] = events[3].findings
    assert finding.tensor == "model.layers.1.wk"
    assert finding.message.startswith("model.layers.1.wk stopped changing at step 40 (ckpt-0040.pt)")
    assert events[3].updates.layers["model.layers.1.wk"].changed == 0
    assert events[3].updates.layers["model.layers.0.wq"].changed == 1


def test_the_first_checkpoint_with_nan_names_its_step(tmp_path):
    save(tmp_path / "ckpt-0010.pt", 10)
    save(tmp_path / "ckpt-0020.pt", 20)
    save(tmp_path / "ckpt-0030.pt", 30, nan=True)
    save(tmp_path / "ckpt-0040.pt", 40, nan=True)
    events = follower(tmp_path).poll()
    assert [codes(e) for e in events] == [[], [], ["NONFINITE", "NONFINITE_ONSET"], ["NONFINITE"]]
    onset = next(f for f in events[2].findings if f.code == "NONFINITE_ONSET")
    assert onset.severity == "error"
    assert onset.tensor == "model.layers.0.wq.weight"
    assert onset.message.startswith("NaN/Inf first appears at step 30 (ckpt-0030.pt)")
    assert events[2].updates.ratio("model") is None  # no ratio across a NaN


# ---------------------------------------------------------------------------------------------- the comparison


def test_update_ratios_are_the_norms_of_the_change(tmp_path):
    a, b = save(tmp_path / "a.pt", 10), save(tmp_path / "b.pt", 30, frozen_from={"layers.1.wk": 10})
    updates = compare_saves(inspect_path(a), inspect_path(b))
    before, after = state(10), state(30, frozen_from={"layers.1.wk": 10})
    delta = sum(float(((after["model"][k].double() - before["model"][k].double()) ** 2).sum()) for k in before["model"])
    base = sum(float((before["model"][k].double() ** 2).sum()) for k in before["model"])
    assert updates.step_delta == 20
    assert updates.ratio("model") == pytest.approx(math.sqrt(delta) / math.sqrt(base), rel=1e-12)
    wq = f"{LAYERS[0]}.weight"
    layer = updates.layers[f"model.{LAYERS[0]}"]
    expected = float(np.linalg.norm((after["model"][wq].double() - before["model"][wq].double()).numpy()))
    assert layer.ratio == pytest.approx(expected / float(np.linalg.norm(before["model"][wq].double().numpy())))
    assert updates.layers["model.layers.1.wk"].ratio == 0.0
    moments = updates.moments["exp_avg_sq"]
    squares = sum(float((s["exp_avg_sq"].double() ** 2).sum()) for s in after["optimizer"]["state"].values())
    assert moments.count == 4 * 256
    assert moments.rms == pytest.approx(math.sqrt(squares / moments.count), rel=1e-12)


def test_jobs_read_a_backlog_in_parallel_with_the_same_events(tmp_path):
    for step in range(10, 70, 10):
        save(tmp_path / f"ckpt-{step:04d}.pt", step, nan=step == 60, frozen_from={"layers.0.wk": 40})

    def summary(jobs: int) -> list[tuple]:
        events = Follower(tmp_path, settle=SETTLE, jobs=jobs).poll()
        return [(e.index, e.step, e.checkpoint.verdict, codes(e), e.updates and e.updates.to_json()) for e in events]

    one, three = summary(1), summary(3)
    assert [s[:4] for s in three] == [
        (1, 10, "good", []),
        (2, 20, "good", []),
        (3, 30, "good", []),
        (4, 40, "good", []),
        (5, 50, "good", ["LAYER_FROZEN"]),
        (6, 60, "damaged", ["NONFINITE", "NONFINITE_ONSET"]),
    ]
    assert three == one


# ---------------------------------------------------------------------------------------------- reads


def assert_each_file_read_once(log, files: list) -> None:
    """Every byte a Blobs read touched was read once, and each save's file was read (its values scanned)."""
    from ckinspect.io.blobs import ReadLog

    assert isinstance(log, ReadLog)
    read = log.bytes_read()
    for key, size in files:
        name = Path(key[0]).name
        assert read.get(key, 0) > 0, f"{name} never read"
        assert read[key] <= size, f"{name}: {read[key]:,} bytes read of {size:,}"
    assert log.read_again() == dict.fromkeys(log.ranges, 0)
    assert set(log.ranges) == {key for key, _ in files}  # nothing else read through Blobs


def kept_bytes(watch: Follower) -> int:
    return sum(a.nbytes for series in watch.series.values() for part in series.values.values() for a in part.values())


def identity(path) -> tuple[tuple[str, int, int], int]:
    """The read log's key of a file (path, inode, modification time), and its size."""
    st = path.stat()
    return (str(path), st.st_ino, st.st_mtime_ns), st.st_size


def test_each_save_is_read_once_over_a_run(tmp_path):
    from ckinspect.io.blobs import logging_reads

    watch = follower(tmp_path)
    files, events = [], []
    with logging_reads() as log:
        for step in range(10, 70, 10):  # saved one by one, each judged before the next: the live case
            files.append(identity(save(tmp_path / f"ckpt-{step:04d}.pt", step, frozen_from={"layers.0.wk": 40})))
            events += watch.poll()
        for step in (70, 80, 90):  # a backlog of three, judged in one poll
            files.append(identity(save(tmp_path / f"ckpt-{step:04d}.pt", step)))
        events += watch.poll()
    # what stays held: the newest save's compared values (4 weights and 8 moments of 16x16 float32), nothing more
    assert kept_bytes(watch) == 12 * 16 * 16 * 4
    watch.close()
    assert [(e.step, codes(e)) for e in events][4:] == [(50, ["LAYER_FROZEN"]), (60, []), (70, []), (80, []), (90, [])]
    assert all(e.updates is not None and e.updates.ratio("model") > 0 for e in events[1:])
    assert_each_file_read_once(log, files)


def test_a_file_saved_again_under_its_name_is_read_once_each_time(tmp_path):
    from ckinspect.io.blobs import logging_reads

    path = tmp_path / "run_resume.pth"
    watch = follower(tmp_path)
    files, ratios = [], []
    with logging_reads() as log:
        for step in (10, 20, 30, 40):
            files.append(identity(save(path, step)))  # os.replace: a new file under the same name
            [event] = watch.poll()
            ratios.append(event.updates and event.updates.ratio("model"))
    watch.close()
    assert len({key for key, _ in files}) == 4
    assert ratios[0] is None and all(r is not None and r > 0 for r in ratios[1:])
    assert_each_file_read_once(log, files)


def test_worker_processes_read_a_backlog_and_this_process_reads_nothing_again(tmp_path):
    """With --jobs 2 each save is read (listed, scanned, its values kept) by a worker process; the comparison
    here takes the values the workers sent, so this process reads no stored byte at all."""
    from ckinspect.io.blobs import logging_reads

    for step in range(10, 60, 10):
        save(tmp_path / f"ckpt-{step:04d}.pt", step)
    watch = Follower(tmp_path, settle=SETTLE, jobs=2)
    try:
        with logging_reads() as log:
            events = watch.poll()
        assert watch.pool is not None  # a backlog of five: read by the workers
    finally:
        watch.close()
    assert [e.step for e in events] == [10, 20, 30, 40, 50]
    assert all(e.updates is not None and e.updates.ratio("model") > 0 for e in events[1:])
    assert log.ranges == {}


def test_each_dcp_save_is_read_once(tmp_path):
    """The bundled trainer's --save-format dcp: a folder per save, its tensors in one .distcp file."""
    import warnings

    import torch.distributed.checkpoint as dcp

    from ckinspect.io.blobs import logging_reads

    watch = follower(tmp_path)
    files, events = [], []
    with logging_reads() as log:
        for step in (10, 20, 30, 40):
            folder = tmp_path / f"run_step{step:06d}"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "torch.distributed is disabled ... single process"
                dcp.save(state(step), checkpoint_id=str(folder))
            files += [identity(p) for p in sorted(folder.glob("*.distcp"))]
            events += watch.poll()
    watch.close()
    assert [(e.step, e.checkpoint.framework, codes(e)) for e in events] == [(s, "dcp", []) for s in (10, 20, 30, 40)]
    assert all(e.updates.ratio("model") > 0 and e.updates.ratio("optimizer") > 0 for e in events[1:])
    assert_each_file_read_once(log, files)


def test_a_save_larger_than_the_keep_budget_is_kept_in_part_with_the_same_figures(tmp_path):
    from ckinspect.io.blobs import logging_reads

    for step in range(10, 60, 10):
        save(tmp_path / f"ckpt-{step:04d}.pt", step, frozen_from={"layers.1.wk": 30})

    def run(keep_bytes: int) -> tuple[list, int, int]:
        watch = Follower(tmp_path, settle=SETTLE, keep_bytes=keep_bytes)
        with logging_reads() as log:
            events = [(e.step, codes(e), e.updates and e.updates.to_json()) for e in watch.poll()]
        held = kept_bytes(watch)
        watch.close()
        return events, held, sum(log.read_again().values())

    whole, held, again = run(1 << 20)
    assert (held, again) == (12 * 1024, 0)
    part, held, again = run(5000)  # four of the twelve 1 KiB tensors: the others are read again when compared
    assert part == whole
    assert held == 4 * 1024 and again > 0
    assert run(0)[0] == whole  # nothing kept: every comparison reads both saves from their files
    assert [c for _, c, _ in whole] == [[], [], [], ["LAYER_FROZEN"], []]
