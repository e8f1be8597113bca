"""Crash injection: a repair SIGKILLed at any instant never loses the newest whole checkpoint.

The folder holds one pair of each kind (promote over a cut main, promote over a missing main,
promote keeping the old main, set a partial tmp aside). A forked child plans and applies the repair
with a short pause after every filesystem step, and is SIGKILLed at a random moment; then:
  - each pair's newest whole checkpoint is still under its main name or its tmp name,
  - no file's bytes have disappeared (every original content is somewhere in the folder),
  - running the repair again finishes the job: every main holds the newest checkpoint.
A second sweep kills the process right after step 1, 2, ... N, so every boundary is hit. The pause and the
kill are injected through apply_plan's `after_step` seam (a sitecustomize for the CLI process): shipping code
reads no test hook from the environment.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import time
from pathlib import Path

import pytest

from ckinspect.ops import repair
from ckinspect.ops.repair import apply_plan, plan_repairs
from tests.helpers.torch_files import cut, save_resume, sha, tree_hashes

RANDOM_RUNS = 60
STEP_DELAY = 0.01  # seconds after each filesystem step, so kills land between steps as well as in them

# The CLI process's seam: apply_plan wrapped to pause after every step (what `pause` does for a forked child).
CLI_PAUSE = """
import functools, time
import ckinspect.ops.repair as repair

def _paused(apply_plan):
    @functools.wraps(apply_plan)
    def apply(plan, run_id=None, after_step=None):
        return apply_plan(plan, run_id, after_step=lambda step: time.sleep(0.02))
    return apply

repair.apply_plan = _paused(repair.apply_plan)
"""


def pause(seconds: float) -> repair.AfterStep:
    return lambda step: time.sleep(seconds)


def crash_after(n: int) -> repair.AfterStep:
    def hook(step: int) -> None:
        if step >= n:
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    folder = tmp_path_factory.mktemp("template")
    save_resume(folder / "cut.pth", step=10, seed=1)
    cut(folder / "cut.pth", 0.5)
    save_resume(folder / "cut.pth.tmp", step=20, seed=2)
    save_resume(folder / ".missing.pth.a1b2c3.tmp", step=20, seed=3)
    save_resume(folder / "older.pth", step=10, seed=4)
    save_resume(folder / "older.pth.tmp", step=20, seed=5)
    save_resume(folder / "fine.pth", step=20, seed=6)
    cut(save_resume(folder / "fine.pth.tmp", step=30, seed=7), 0.5)
    newest = {  # main name -> where its newest whole checkpoint starts out
        "cut.pth": "cut.pth.tmp",
        "missing.pth": ".missing.pth.a1b2c3.tmp",
        "older.pth": "older.pth.tmp",
        "fine.pth": "fine.pth",
    }
    return folder, {main: (src, sha(folder / src)) for main, src in newest.items()}


def _fresh(template, dest: Path) -> Path:
    folder, _ = template
    shutil.copytree(folder, dest)
    return dest


def _child_repair(folder: Path, after_step: repair.AfterStep) -> tuple[int, int]:
    """Fork the repair process; returns (pid, fd that becomes readable when planning is done)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the repair process: plan, say so, apply; exit without running pytest's teardown
        code = 0
        try:
            os.close(read_fd)
            plan = plan_repairs(folder)
            os.write(write_fd, b"p")
            apply_plan(plan, after_step=after_step)
        except BaseException:
            code = 3
        os._exit(code)
    os.close(write_fd)
    return pid, read_fd


def _wait_planned(fd: int) -> None:
    os.read(fd, 1)  # b"" too when the child died before planning finished
    os.close(fd)


def _check_nothing_lost(folder: Path, template) -> None:
    _, newest = template
    original = set(tree_hashes(template[0]).values())
    present = set(tree_hashes(folder).values())
    assert original <= present, "some file's bytes are gone"
    for main, (src, digest) in newest.items():
        assert digest in (sha(folder / main), sha(folder / src)), f"{main}: newest checkpoint not under its names"


def _check_rerun_completes(folder: Path, template) -> None:
    _, newest = template
    apply_plan(plan_repairs(folder))
    for main, (_src, digest) in newest.items():
        assert sha(folder / main) == digest
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]


def _apply_duration(template, tmp_path) -> float:
    folder = _fresh(template, tmp_path)
    pid, fd = _child_repair(folder, pause(STEP_DELAY))
    _wait_planned(fd)
    start = time.monotonic()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return time.monotonic() - start


@pytest.mark.slow
def test_sigkill_at_random_instants_never_loses_the_newest_checkpoint(template, tmp_path):
    duration = sorted(_apply_duration(template, tmp_path / str(i)) for i in range(3))[1]
    rng = random.Random(1234)
    killed = runs = 0
    while killed < RANDOM_RUNS and runs < 3 * RANDOM_RUNS:  # a kill that came after the apply finished does not count
        runs += 1
        folder = _fresh(template, tmp_path / f"run{runs}")
        pid, fd = _child_repair(folder, pause(STEP_DELAY))
        _wait_planned(fd)
        time.sleep(rng.uniform(0, duration))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        killed += os.WIFSIGNALED(status)
        _check_nothing_lost(folder, template)
        _check_rerun_completes(folder, template)
        _check_nothing_lost(folder, template)
        shutil.rmtree(folder)
    print(f"\nkill injection: {killed} repairs SIGKILLed mid-apply ({runs} runs), 0 losses (apply: {duration:.2f}s)")
    assert killed == RANDOM_RUNS


def test_sigkill_after_every_single_step_never_loses_the_newest_checkpoint(template, tmp_path):
    step = 1
    while True:
        folder = _fresh(template, tmp_path / f"step{step}")
        pid, fd = _child_repair(folder, crash_after(step))
        _wait_planned(fd)
        _, status = os.waitpid(pid, 0)
        _check_nothing_lost(folder, template)
        _check_rerun_completes(folder, template)
        shutil.rmtree(folder)
        if not os.WIFSIGNALED(status):
            break  # the repair finished before reaching this step: every boundary has been hit
        step += 1
    assert step == 14  # 13 steps: the first manifest, then 6 moves each announced in the manifest before it is made


def test_sigkill_of_the_cli_process_mid_apply_loses_nothing(template, tmp_path):
    """The same through `ckinspect repair DIR --apply` as a user runs it: killed once its quarantine exists."""
    import subprocess
    import sys

    from tests.conftest import REPO, cli_env

    seam = tmp_path / "seam"
    seam.mkdir()
    (seam / "sitecustomize.py").write_text(CLI_PAUSE)
    rng = random.Random(99)
    for run in range(5):
        folder = _fresh(template, tmp_path / f"cli{run}")
        child = subprocess.Popen(
            [sys.executable, "-m", "ckinspect", "repair", str(folder), "--apply"],
            env=cli_env({"PYTHONPATH": os.pathsep.join((str(seam), str(REPO)))}),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while not (folder / ".ckinspect-quarantine").exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.25))
        child.send_signal(signal.SIGKILL)
        child.wait()
        _check_nothing_lost(folder, template)
        _check_rerun_completes(folder, template)


def test_undo_after_a_crash_at_any_step_restores_every_name_and_byte(template, tmp_path):
    from ckinspect.ops.repair import undo

    original = tree_hashes(template[0])
    step = 1
    while True:
        folder = _fresh(template, tmp_path / f"undo{step}")
        pid, fd = _child_repair(folder, crash_after(step))
        _wait_planned(fd)
        _, status = os.waitpid(pid, 0)
        result = undo(folder)
        assert not result.problems, (step, result.problems)
        restored = {k: v for k, v in tree_hashes(folder).items() if not k.startswith(".ckinspect-quarantine")}
        assert restored == original, f"undo after a kill at step {step}"
        shutil.rmtree(folder)
        if not os.WIFSIGNALED(status):
            break
        step += 1
    assert step == 14
