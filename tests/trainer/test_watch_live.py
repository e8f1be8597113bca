"""The bundled trainer and `ckinspect watch --report` together, each in its own process, as in the README's
two-terminal demo: every save judged exactly once and in order, none mid-save, the NaN's onset named by its
step, and a save killed half-way reported only after the settle time, with the right code."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, cli_env
from tests.helpers.processes import kill_group

pytestmark = [pytest.mark.live, pytest.mark.slow]


class Watch:
    """`ckinspect watch RUN --report --format json` in a child process; its JSON lines collected as they come."""

    def __init__(self, run: Path, *args: str) -> None:
        self.events: list[dict] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ckinspect", "watch", str(run), "--report", "--format", "json", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=cli_env(),
            start_new_session=True,  # its own group: `stop` ends it and its workers whatever happened
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.append(json.loads(line))

    def wait_for(self, condition, limit: float = 300.0) -> None:
        deadline = time.monotonic() + limit
        while not condition(self.events):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"watch: {self.events!r}; stderr: {self.stderr()}")
            time.sleep(0.1)

    def stop(self) -> int | None:
        """SIGINT, as Ctrl-C; whatever comes of it, nothing of this process group outlives the test."""
        try:
            self.proc.send_signal(signal.SIGINT)
            status = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            status = None  # it ignored SIGINT: the test fails on the status, and the group is killed below
        finally:
            self.stderr_text = self.stderr()
            kill_group(self.proc)
            self.reader.join(timeout=10)
        return status

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        if self.proc.stderr is None or self.proc.stderr.closed:
            return getattr(self, "stderr_text", "")
        return self.proc.stderr.read()


def trainer(out: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "trainer", "train", "--out", str(out), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=cli_env(),
        start_new_session=True,
    )


def test_twenty_saves_each_judged_once_in_order_and_the_nan_onset_named(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    watch = Watch(run, "--fail-on", "never", "--settle", "60")
    train = trainer(run, "--steps", "40", "--save-every", "2", "--save-format", "dcp",
                    "--step-delay", "0.2", "--save-delay", "0.5", "--nan-at", "31")  # fmt: skip
    try:
        assert train.wait(timeout=900) == 0, train.stderr.read() if train.stderr else ""
        watch.wait_for(lambda events: len(events) >= 20)
        time.sleep(1.0)  # anything judged twice would show up now
    finally:
        kill_group(train)
        status = watch.stop()
    assert status == 0
    steps = list(range(2, 42, 2))
    assert [(e["event"], e["step"]) for e in watch.events] == [("judged", s) for s in steps]
    assert [e["verdict"] for e in watch.events] == ["good"] * 15 + ["damaged"] * 5  # NaN from step 31's save on
    assert [Path(e["path"]).name for e in watch.events] == [f"tiny_step{s:06d}" for s in steps]
    onset = [(e["step"], f["message"]) for e in watch.events for f in e["findings"] if f["code"] == "NONFINITE_ONSET"]
    assert len(onset) == 1 and onset[0][0] == 32
    assert onset[0][1].startswith("NaN/Inf first appears at step 32 (tiny_step000032)")
    others = {f["code"] for e in watch.events[:15] for f in e["findings"]}
    assert others == set()  # a healthy stretch of a real run: no finding, no false anomaly
    assert all(e["updates"]["step_delta"] == 2 for e in watch.events[1:])
    assert all(e["updates"]["groups"]["model"]["ratio"] > 0 for e in watch.events[1:15])


@pytest.mark.parametrize(
    ("save_format", "partial", "code"),
    [("dcp", "tiny_step000002/__0_0.distcp", "MISSING_PARTS"), ("file", "tiny_resume.pth.tmp", "LEFTOVER_TMP")],
)
def test_a_save_killed_half_way_is_reported_after_the_settle_time(tmp_path, save_format, partial, code):
    run = tmp_path / "run"
    run.mkdir()
    settle = 3.0
    watch = Watch(run, "--fail-on", "never", "--settle", str(settle), "--interval", "0.5")
    train = trainer(run, "--steps", "4", "--save-every", "2", "--save-format", save_format, "--save-delay", "600")
    try:
        deadline = time.monotonic() + 600
        while not ((run / partial).exists() and (run / partial).stat().st_size >= 64 << 10):
            assert train.poll() is None and time.monotonic() < deadline, "the trainer never reached its save"
            time.sleep(0.05)
        os.kill(train.pid, signal.SIGKILL)  # mid-save: the stall is inside the save
        train.wait(timeout=60)
        watch.wait_for(lambda events: len(events) >= 1)
        time.sleep(1.0)
    finally:
        kill_group(train)
        status = watch.stop()
    assert status == 0
    [event] = watch.events
    assert (event["event"], event["verdict"]) == ("abandoned", "incomplete")
    assert code in {f["code"] for f in event["findings"]}
    assert event["seconds_after_save"] >= settle  # judged only once its files were quiet for the settle time
