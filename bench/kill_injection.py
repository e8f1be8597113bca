"""Kill injection: SIGKILL the trainer at random moments while it saves, then ask `ckinspect last-good`.

    python bench/kill_injection.py --mode dcp  --trials 50     # 2 ranks under torchrun, a DCP folder per save
    python bench/kill_injection.py --mode file --trials 50     # the single-file save (<name>_resume.pth)

Each trial trains a few steps saving after every step, and is killed (one rank or the whole job, at
random) at a random moment of its training. The truth is torch's own loader: a checkpoint is whole when
torch loads every part of it (DCP: every rank's data through `.metadata`; file: torch.load with
weights_only). `last-good` must name the newest whole one, or exit 1 when none is; it must never name a
checkpoint torch cannot load. Prints the counts; exits 1 on any wrong answer.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = 6


def command(mode: str, out: Path) -> list[str]:
    train = ["-m", "trainer", "train", "--out", str(out), "--steps", str(STEPS), "--save-every", "1"]
    if mode == "dcp":
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
        return [*launcher, *train, "--save-format", "dcp"]
    return [sys.executable, *train]


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def start(mode: str, out: Path) -> tuple[subprocess.Popen[str], threading.Event, list[float]]:
    """The run, an event set when training starts, and the times its saves were reported."""
    out.mkdir(parents=True)  # the run folder a launch script names exists before the first save
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        command(mode, out),
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: killing "all" kills torchrun and every rank
    )
    training = threading.Event()
    saves: list[float] = []

    def watch() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("train:"):
                training.set()
            elif line.startswith("saved "):
                saves.append(time.monotonic())
        training.set()  # it ended before training (an error): let the caller see it

    threading.Thread(target=watch, daemon=True).start()
    return proc, training, saves


def calibrate(mode: str, work: Path) -> float:
    """Seconds from the start of training to the last save reported, uninterrupted."""
    proc, training, saves = start(mode, work / "calibrate")
    training.wait(300)
    began = time.monotonic()
    if proc.wait(300) != 0 or len(saves) != STEPS:
        raise SystemExit(f"the {mode} run fails without any kill")
    return saves[-1] - began


def kill(proc: subprocess.Popen[str], mode: str, rng: random.Random) -> str:
    """SIGKILL one rank first (half the DCP trials), then every rank and the launcher.

    torchrun starts each rank in a session of its own, so the launcher's process group is not enough."""
    ranks = children(proc.pid) if mode == "dcp" else []
    how = "all"
    if ranks and rng.random() < 0.5:
        victim = rng.choice(ranks)
        how = f"rank pid {victim}"
        _sigkill(victim)
        time.sleep(rng.uniform(0.0, 0.5))  # the others go on (or hang in a collective) a moment
    for pid in ranks:
        _sigkill(pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for pid in ranks:  # a rank is gone once /proc no longer lists it (reaped by the launcher, or orphaned)
        while Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid):
            time.sleep(0.05)
    return how


def _sigkill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:", 1)[1].split("\n", 1)[0].lower()
    except (OSError, IndexError):
        return "zombie"


def whole_by_torch(mode: str, out: Path) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint torch loads whole."""
    from trainer.checkpoint import load

    found = []
    candidates = sorted(out.glob("tiny_step*")) if mode == "dcp" else [out / "tiny_resume.pth"]
    for path in candidates:
        if not path.exists():
            continue
        try:
            state = load(path)
            found.append((int(state["step"]), path))
        except KeyboardInterrupt:
            raise
        except BaseException:  # noqa: BLE001 - any failure to load is "not whole" (DCP's CheckpointException
            continue  # derives from BaseException)
    return found


def answer(out: Path) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "ckinspect", "last-good", str(out)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        timeout=120,
    )
    return proc.returncode, proc.stdout.strip()


def trial(mode: str, work: Path, span: float, rng: random.Random, index: int) -> dict[str, object]:
    out = work / f"trial{index:03d}"
    proc, training, saves = start(mode, out)
    training.wait(300)
    delay = rng.uniform(0.0, span)
    time.sleep(delay)
    finished = proc.poll() is not None
    how = "none (it had finished)" if finished else kill(proc, mode, rng)
    whole = whole_by_torch(mode, out)
    expected = str(max(whole)[1]) if whole else None
    status, named = answer(out)
    ok = (status == 0 and named == expected) if expected else (status == 1 and named == "")
    partial = any(
        not (p / ".metadata").exists() or (p / ".metadata.tmp").exists() for p in out.glob("tiny_step*")
    ) or any(out.glob("*.tmp"))
    return {"ok": ok, "expected": expected, "named": named or None, "status": status, "how": how,
            "delay": round(delay, 2), "partial_left": partial, "whole": len(whole),
            "saves_done": len(saves)}  # fmt: skip


def run(mode: str, trials: int, seed: int, log=print) -> dict[str, int]:
    rng = random.Random(seed)
    counts = {"trials": 0, "wrong": 0, "none_whole": 0, "partial_left": 0, "killed_one_rank": 0, "finished": 0,
              "mid_run": 0}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix=f"kill-{mode}-") as tmp:
        work = Path(tmp)
        span = calibrate(mode, work) * 1.1
        log(
            f"{mode}: {STEPS} steps, a save after each, take {span / 1.1:.1f} s uninterrupted; killing within "
            f"{span:.1f} s of the start of training"
        )
        for index in range(trials):
            result = trial(mode, work, span, rng, index)
            counts["trials"] += 1
            counts["wrong"] += not result["ok"]
            counts["none_whole"] += result["expected"] is None
            counts["partial_left"] += bool(result["partial_left"])
            counts["killed_one_rank"] += str(result["how"]).startswith("rank")
            counts["finished"] += str(result["how"]).startswith("none")
            counts["mid_run"] += int(result["saves_done"]) < STEPS  # type: ignore[call-overload]
            log(f"  {index + 1:3d}: {'ok ' if result['ok'] else 'WRONG'} {result}")
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("dcp", "file"), required=True)
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    counts = run(args.mode, args.trials, args.seed)
    print(
        f"{args.mode}: {counts['trials']} kills, {counts['wrong']} wrong answers; {counts['partial_left']} left a "
        f"partial save behind, {counts['none_whole']} left no whole checkpoint (exit 1 expected), "
        f"{counts['mid_run']} stopped it before its last save, {counts['killed_one_rank']} killed one rank first, "
        f"{counts['finished']} came after the run had finished"
    )
    return 1 if counts["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
