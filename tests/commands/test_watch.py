"""`ckinspect watch RUN_DIR --report`: one line per checkpoint event (text, or JSON lines), --fail-on, --once,
and following a run live by file events and by polling."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from ckinspect.commands.watch import follow, line_writer
from ckinspect.io import changes
from ckinspect.io.changes import EVENTS, POLLING, Changes
from ckinspect.jobs.watch import Follower
from tests.analysis.runs.saves import age, half_written, save
from tests.conftest import REPO, cli_env, run_cli_process


def lines_of(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_once_text_lines(run_cli, tmp_path):
    for step in (10, 20):
        save(tmp_path / f"ckpt-{step:04d}.pt", step)
    result = run_cli("watch", tmp_path, "--report", "--once")
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()
    assert first.startswith("[1] step 10 ckpt-0010.pt file: good  ")
    assert second.startswith("[2] step 20 ckpt-0020.pt file: good  Δstep 10  update model ")
    assert " optimizer " in second and "exp_avg_sq rms " in second


def test_once_json_lines_and_fail_on(run_cli, tmp_path):
    save(tmp_path / "ckpt-0010.pt", 10)
    save(tmp_path / "ckpt-0020.pt", 20, nan=True)
    tmp = half_written(tmp_path / "ckpt-0030.pt", 30)  # a save in flight: --once says so, without a verdict
    result = run_cli("watch", tmp_path, "--report", "--once", "--format", "json")
    assert result.returncode == 1
    events = lines_of(result.stdout)
    assert [(e["event"], e["step"], e["verdict"]) for e in events] == [
        ("judged", 10, "good"),
        ("judged", 20, "damaged"),
        ("in-progress", None, None),
    ]
    assert {f["code"] for f in events[1]["findings"]} == {"NONFINITE", "NONFINITE_ONSET"}
    assert events[1]["updates"]["step_delta"] == 10 and events[1]["updates"]["groups"]["model"]["ratio"] is None
    assert events[2]["findings"] == [] and events[2]["path"].endswith("ckpt-0030.pt")
    assert all(e["schema"] == 1 and e["command"] == "watch" for e in events)
    assert run_cli("watch", tmp_path, "--report", "--once", "--fail-on", "never").returncode == 0
    age(tmp, 120)  # its writer long gone: now judged, and reported as an interrupted save
    late = lines_of(run_cli("watch", tmp_path, "--report", "--once", "--format", "json", "--settle", "60").stdout)
    assert (late[-1]["event"], late[-1]["verdict"]) == ("abandoned", "incomplete")
    assert [f["code"] for f in late[-1]["findings"]] == ["LEFTOVER_TMP"]


def test_following_stops_at_the_first_finding_at_or_above_fail_on(run_cli, tmp_path):
    save(tmp_path / "ckpt-0010.pt", 10)
    save(tmp_path / "ckpt-0020.pt", 20, nan=True)
    save(tmp_path / "ckpt-0030.pt", 30)
    result = run_cli("watch", tmp_path, "--report", "--format", "json", "--poll", "--interval", "0.05")
    assert result.returncode == 1
    assert [e["step"] for e in lines_of(result.stdout)] == [10, 20]  # exits right after the event that failed


def test_a_missing_run_dir_is_one_line_and_exit_2(run_cli, tmp_path):
    result = run_cli("watch", tmp_path / "nope", "--report")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.strip() == f"ckinspect: {tmp_path / 'nope'}: no such file or folder"


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [("--jobs", "0", "expected a whole number of 1 or more, got '0'"),
     ("--keep", "-1", "expected a whole number of MiB (0 or more), got '-1'")],
)  # fmt: skip
def test_jobs_and_keep_out_of_range_are_usage_errors(run_cli, tmp_path, option, value, expected):
    result = run_cli("watch", tmp_path, "--report", "--once", option, value)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        f"ckinspect: error: argument {option}: {expected}",
        "(try: ckinspect watch --help)",
    ]


def test_keep_and_jobs_give_the_same_lines(tmp_path):
    """A backlog read by two worker processes (a real `python -m ckinspect`), and with nothing kept (every
    comparison reads both saves from their files): the same events as one process keeping the values."""
    for step in range(10, 60, 10):
        save(tmp_path / f"ckpt-{step:04d}.pt", step, nan=step == 50, frozen_from={"layers.0.wk": 30})

    def events(*args: str) -> list[dict]:
        result = run_cli_process("watch", tmp_path, "--report", "--once", "--format", "json", *args, timeout=300)
        assert result.returncode == 1, result.stderr  # the NaN at step 50
        return [{k: v for k, v in e.items() if k != "seconds_after_save"} for e in lines_of(result.stdout)]

    kept = events()
    assert [(e["index"], e["step"], sorted({f["code"] for f in e["findings"]})) for e in kept] == [
        (1, 10, []),
        (2, 20, []),
        (3, 30, []),
        (4, 40, ["LAYER_FROZEN"]),
        (5, 50, ["NONFINITE", "NONFINITE_ONSET"]),
    ]
    assert events("--jobs", "2") == kept
    assert events("--keep", "0") == kept


@pytest.mark.parametrize("poll", [False, True], ids=["events", "polling"])
def test_following_a_run_as_it_saves(tmp_path, poll):
    """Saves arrive while watch follows: each judged once, in order, none while half-written. With events the
    interval is ten minutes: only a file event can wake the follower in time."""
    out: list[dict] = []
    lock = threading.Lock()

    class Sink:
        def write(self, text: str) -> None:
            with lock:
                out.extend(json.loads(line) for line in text.splitlines())

        def flush(self) -> None:
            pass

    stop = threading.Event()
    follower = Follower(tmp_path, settle=600.0)
    interval = 0.1 if poll else 600.0
    status: list[int] = []
    thread = threading.Thread(
        target=lambda: status.append(
            follow(
                follower, line_writer("json", str(tmp_path), Sink()), "never", interval=interval, poll=poll, stop=stop
            )
        )
    )
    thread.start()
    try:
        for step in range(10, 70, 10):
            tmp = half_written(tmp_path / f"ckpt-{step:04d}.pt", step)  # seen half-written first ...
            time.sleep(0.15)
            tmp.unlink()
            save(tmp_path / f"ckpt-{step:04d}.pt", step)  # ... then whole, under its own name
            wait_for(lambda step=step: any(e["step"] == step for e in out))
    finally:
        stop.set()
        thread.join(timeout=60)
    assert status == [0]
    assert [(e["event"], e["step"], e["verdict"]) for e in out] == [("judged", s, "good") for s in range(10, 70, 10)]
    assert [e["index"] for e in out] == list(range(1, 7))


def wait_for(condition, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("watch did not report the save within the time limit")
        time.sleep(0.05)


def test_file_events_where_the_filesystem_has_them(tmp_path):
    assert Changes(tmp_path).mode == EVENTS
    assert (Changes(tmp_path, poll=True).mode, Changes(tmp_path, poll=True).why) == (POLLING, "asked for")


def test_polling_without_watchfiles_or_on_a_network_filesystem(tmp_path, monkeypatch):
    monkeypatch.setattr(changes, "filesystem_type", lambda path: "nfs4")
    nfs = Changes(tmp_path)
    assert (nfs.mode, nfs.why) == (POLLING, "nfs4 raises no file events for changes made elsewhere")
    monkeypatch.setattr(changes, "filesystem_type", lambda path: "fuse.sshfs")
    assert Changes(tmp_path).mode == POLLING
    monkeypatch.setattr(changes, "filesystem_type", lambda path: "ext4")
    monkeypatch.setitem(sys.modules, "watchfiles", None)  # not installed
    bare = Changes(tmp_path)
    assert (bare.mode, bare.why) == (POLLING, "watchfiles is not installed (pip install 'ckinspect[watch]')")


def test_the_filesystem_type_of_a_folder_is_read_from_mountinfo(tmp_path):
    assert changes.filesystem_type(tmp_path) != ""


def test_watch_report_never_imports_torch_or_textual(tmp_path):
    """The headless watch reads checkpoints like every report does: no torch, and no TUI."""
    for step in (10, 20):
        save(tmp_path / f"ckpt-{step:04d}.pt", step)
    code = (
        "import sys; from ckinspect.cli import main; status = main(['watch', sys.argv[1], '--report', '--once']); "
        "print(status, 'torch' in sys.modules, 'textual' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                            cwd=REPO, env=cli_env(), timeout=120)  # fmt: skip
    assert result.stdout.splitlines()[-1] == "0 False False", result.stderr


def test_names_from_the_run_reach_the_terminal_escaped(run_cli, tmp_path):
    save(tmp_path / "ckpt\x1b]0;pwned\x07-0010.pt", 10)
    result = run_cli("watch", tmp_path, "--report", "--once")
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert result.stdout.startswith("[1] step 10 ckpt\\x1b]0;pwned\\x07-0010.pt file: good")
