"""`ckinspect watch` following a run: how long after a save completes its verdict appears, the watcher's CPU
time and peak memory over the whole run, against one `ckinspect --report` of one of the same saves.

    python bench/bench_watch.py --saves 100                  # the bundled trainer saving a DCP folder every step
    python bench/bench_watch.py --saves 60 --replay 1.5      # a writer 1.5x faster than one core judges: --jobs 1 vs 2

Trainer mode: the trainer runs in one process, `ckinspect watch RUN --report --format json` in another
under `/usr/bin/time -v`. The latency of each verdict is the watch's own `seconds_after_save`: from the
newest modification of the save's files to the verdict being written.

Replay mode (`--replay FACTOR`): `--saves` DCP saves are made once by the trainer (kept in `--work`), then
one core's judging rate is measured here (a Follower over all of them, CPU seconds), and a writer copies
them into a fresh run folder FACTOR times faster than that, each finished the way DCP finishes a save
(`.metadata` renamed into place last), while `ckinspect watch --jobs N` follows it, for each N of
`--jobs`. It prints the backlog (saves finished, not yet judged) over time, the lag from each save's
`.metadata` to its verdict line, and whether every save was judged exactly once and in order.

Peak memory is sampled from the watch's whole process tree (its worker processes included: proportional
set size, so pages they share are counted once) and also given as /usr/bin/time's maximum resident set
of the watch process. Report the machine's load (`uptime`) with the figures: the box is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def peak_rss_kib(stderr: str) -> int:
    match = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr)
    return int(match.group(1)) if match else 0


def cpu_seconds(stderr: str) -> float:
    """User + system seconds of the process /usr/bin/time ran (and the children it waited for)."""
    user = re.search(r"User time \(seconds\): ([\d.]+)", stderr)
    system = re.search(r"System time \(seconds\): ([\d.]+)", stderr)
    return (float(user.group(1)) if user else 0.0) + (float(system.group(1)) if system else 0.0)


def env() -> dict[str, str]:
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), out.get("PYTHONPATH", "")) if p)
    return out


def tree_kib(root: int) -> int:
    """Proportional set size of `root` and all its descendants (kB), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        match = re.search(r"^Pss:\s+(\d+) kB", text, re.M)
        total += int(match.group(1)) if match else 0
    return total


class Watch:
    """`ckinspect watch RUN --report --format json` under /usr/bin/time -v; its lines timed as they arrive."""

    def __init__(self, run: Path, *args: str) -> None:
        self.events: list[tuple[float, dict]] = []  # (arrival, event)
        self.proc = subprocess.Popen(
            ["/usr/bin/time", "-v", sys.executable, "-m", "ckinspect", "watch", str(run), "--report",
             "--format", "json", "--fail-on", "never", "--settle", "120", *args],  # fmt: skip
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), start_new_session=True,
        )  # fmt: skip
        self.peak_tree_kib = 0
        self.backlog: list[tuple[float, int]] = []  # (time, saves finished and not judged), sampled
        self.finished = 0  # set by the writer
        self._stop = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._sample, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.append((time.monotonic(), json.loads(line)))

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak_tree_kib = max(self.peak_tree_kib, tree_kib(self.proc.pid))
            self.backlog.append((time.monotonic(), self.finished - len(self.events)))
            self._stop.wait(0.25)

    def wait_for(self, count: int, limit: float = 600.0) -> None:
        deadline = time.monotonic() + limit
        while len(self.events) < count and time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.05)

    def stop(self) -> str:
        self._stop.set()
        self.backlog.append((time.monotonic(), self.finished - len(self.events)))  # after the last verdict
        os.killpg(self.proc.pid, signal.SIGINT)
        _, err = self.proc.communicate(timeout=120)
        return err


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def judged_once_in_order(events: list[dict], expected: list[str]) -> tuple[bool, bool]:
    names = [Path(e["path"]).name for e in events if e["event"] == "judged"]
    return names == sorted(names, key=expected.index), sorted(names) == sorted(expected) and len(set(names)) == len(
        names
    )


def keep_option(args: argparse.Namespace) -> list[str]:
    """--keep only when asked: the bench also measures a checkout from before watch had it."""
    return ["--keep", str(args.keep)] if args.keep is not None else []


def one_report_kib(save: Path) -> int:
    one = subprocess.run(
        ["/usr/bin/time", "-v", sys.executable, "-m", "ckinspect", "--report", str(save), "--format", "json"],
        capture_output=True, text=True, env=env(),
    )  # fmt: skip
    return peak_rss_kib(one.stderr)


# ---------------------------------------------------------------------------------------------- trainer mode


def trainer_mode(args: argparse.Namespace, work: Path) -> int:
    run = work / "run"
    if run.exists():
        shutil.rmtree(run)
    run.mkdir(parents=True)
    watch = Watch(run, "--jobs", str(args.jobs[0]), *keep_option(args))
    started = time.monotonic()
    train = subprocess.run(
        [sys.executable, "-m", "trainer", "train", "--out", str(run), "--steps", str(args.saves),
         "--save-every", "1", "--save-format", "dcp"],  # fmt: skip
        capture_output=True, text=True, env=env(),
    )  # fmt: skip
    if train.returncode != 0:
        print(train.stderr, file=sys.stderr)
        return 2
    trained = time.monotonic() - started
    watch.wait_for(args.saves)
    err = watch.stop()
    report_peak = one_report_kib(sorted(run.iterdir())[-1])

    events = [e for _, e in watch.events]
    judged = [e for e in events if e["event"] == "judged"]
    in_order, once = judged_once_in_order(events, sorted(p.name for p in run.iterdir()))
    latency = sorted(e["seconds_after_save"] for e in judged)
    print(f"run: {args.saves} DCP saves by the bundled trainer in {trained:.1f} s; watch (--jobs {args.jobs[0]} "
          f"{' '.join(keep_option(args))}) judged {len(judged)} (in order: {in_order}, each once: {once})")  # fmt: skip
    if latency:
        print(f"verdict after the save completed: median {statistics.median(latency):.2f} s, "
              f"p95 {percentile(latency, 0.95):.2f} s, max {latency[-1]:.2f} s")  # fmt: skip
    watch_peak, cpu = peak_rss_kib(err), cpu_seconds(err)
    print(f"watch CPU over the whole run: {cpu:.1f} s ({cpu / max(1, len(judged)) * 1000:.0f} ms a save); "
          f"load {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"peak memory: watch over the whole run {watch_peak / 1024:.0f} MiB (its process tree, PSS sampled: "
          f"{watch.peak_tree_kib / 1024:.0f} MiB); one `ckinspect --report` of one save {report_peak / 1024:.0f} MiB; "
          f"ratio {watch_peak / max(1, report_peak):.2f}x")  # fmt: skip
    return 0


# ---------------------------------------------------------------------------------------------- replay mode


def make_source(work: Path, saves: int) -> Path:
    """`saves` DCP saves of the bundled trainer, made once and kept for later runs of this bench."""
    source = work / f"source-{saves}"
    done = source / "complete"
    if done.exists():
        return source
    if source.exists():
        shutil.rmtree(source)
    source.mkdir(parents=True)
    train = subprocess.run(
        [sys.executable, "-m", "trainer", "train", "--out", str(source), "--steps", str(saves), "--save-every", "1",
         "--save-format", "dcp"],  # fmt: skip
        capture_output=True, text=True, env=env(),
    )  # fmt: skip
    if train.returncode != 0:
        raise SystemExit(train.stderr)
    done.write_text("")
    return source


def one_core_rate(source: Path) -> tuple[float, float]:
    """Saves judged per CPU second by one Follower here (jobs 1), and the CPU seconds per save."""
    sys.path.insert(0, str(REPO))
    from ckinspect.jobs.watch import Follower

    follower = Follower(source, settle=120, jobs=1)
    cpu = time.process_time()
    count = len(follower.poll())
    cpu = time.process_time() - cpu
    follower.close()
    return count / cpu, cpu / count


def replay(source: Path, run: Path, rate: float, watch: Watch) -> list[tuple[str, float]]:
    """Copy each save into `run` at `rate` saves a second, `.metadata` last (renamed into place); return
    (name, time its save completed)."""
    finished: list[tuple[str, float]] = []
    saves = sorted(p for p in source.iterdir() if p.is_dir())
    start = time.monotonic()
    for i, save in enumerate(saves):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        target = run / save.name
        target.mkdir()
        for member in sorted(save.iterdir()):
            if member.name != ".metadata":
                shutil.copyfile(member, target / member.name)
        shutil.copyfile(save / ".metadata", target / ".metadata.tmp")
        os.replace(target / ".metadata.tmp", target / ".metadata")
        finished.append((save.name, time.monotonic()))
        watch.finished = len(finished)
    return finished


def replay_mode(args: argparse.Namespace, work: Path) -> int:
    source = make_source(work, args.saves)
    saves = sorted(p.name for p in source.iterdir() if p.is_dir())
    rate_one, per_save = one_core_rate(source)
    rate = args.replay * rate_one
    load = os.getloadavg()[0]
    print(f"one core judges {rate_one:.1f} saves/s here ({per_save * 1000:.0f} ms CPU a save, {args.saves} DCP saves "
          f"of the bundled trainer); the writer saves {rate:.1f}/s ({args.replay:g}x); load {load:.1f}")  # fmt: skip
    results = {}
    for jobs in args.jobs:
        run = work / f"replay-jobs{jobs}"
        if run.exists():
            shutil.rmtree(run)
        run.mkdir()
        watch = Watch(run, "--jobs", str(jobs), *keep_option(args), "--interval", "0.2")
        time.sleep(3.0)  # the watch started and looked once at the empty folder
        finished = replay(source, run, rate, watch)
        written = finished[-1][1] - finished[0][1]
        watch.wait_for(len(saves))
        err = watch.stop()
        done_at = dict(finished)
        judged = [(t, e) for t, e in watch.events if e["event"] == "judged"]
        lags = sorted(t - done_at[Path(e["path"]).name] for t, e in judged)
        in_order, once = judged_once_in_order([e for _, e in watch.events], saves)
        drained = (judged[-1][0] - finished[-1][1]) if judged else float("nan")
        results[jobs] = (watch.backlog, finished[0][1], lags, drained)
        median, p95, peak = statistics.median(lags), percentile(lags, 0.95), watch.peak_tree_kib / 1024
        print(f"--jobs {jobs}: {len(judged)} of {len(saves)} judged in order: {in_order}, each once: {once}; written "
              f"in {written:.1f} s, last verdict {drained:.1f} s after the last save; lag median {median:.2f} s, "
              f"p95 {p95:.2f} s, max {lags[-1]:.2f} s; backlog max {max(b for _, b in watch.backlog)}; watch CPU "
              f"{cpu_seconds(err):.1f} s in its main process; peak memory of its process tree {peak:.0f} MiB (PSS); "
              f"load {os.getloadavg()[0]:.1f}")  # fmt: skip
    print("backlog (saves finished, not yet judged) over time:")
    print("   t (s)  " + "  ".join(f"--jobs {j}" for j in args.jobs))
    longest = max(r[0][-1][0] - r[1] for r in results.values())
    t = 0.0
    while t <= longest + 0.01:
        cells = []
        for jobs in args.jobs:
            backlog, start, _, _ = results[jobs]
            at = [b for when, b in backlog if when - start <= t]
            cells.append(f"{(at[-1] if at else 0):>8}")
        print(f"  {t:6.1f}  " + "  ".join(cells))
        t += args.every
    if len(args.jobs) == 2:
        (a, ra), (b, rb) = sorted(results.items())
        lag = statistics.median(ra[2]) / max(1e-9, statistics.median(rb[2]))
        print(f"--jobs {a} / --jobs {b}: median lag {lag:.2f}x, time to drain after the last save "
              f"{ra[3] / max(1e-9, rb[3]):.2f}x (above 1: --jobs {b} keeps up better)")  # fmt: skip
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=100)
    parser.add_argument("--work", help="folder for the run (default: a temporary one)")
    parser.add_argument("--jobs", type=int, nargs="+", help="watch --jobs (replay: each in turn; default 1 2)")
    parser.add_argument("--keep", type=int, help="watch --keep MIB (default: watch's own)")
    parser.add_argument("--replay", type=float, metavar="FACTOR", help="replay saves FACTOR x one core's rate")
    parser.add_argument("--every", type=float, default=2.0, help="replay: seconds between backlog rows")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-watch-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.replay:
        args.jobs = args.jobs or [1, 2]
        return replay_mode(args, work)
    args.jobs = args.jobs or [1]
    return trainer_mode(args, work)


if __name__ == "__main__":
    sys.exit(main())
