"""`ckinspect watch` following a real run: how long after a save completes its verdict appears, and the
watcher's peak memory over the whole run, against one `ckinspect --report` of one of the same saves.

    python bench/bench_watch.py --saves 100          # the bundled trainer saving a DCP folder every step

The trainer runs in one process, `ckinspect watch RUN --report --format json` in another under
`/usr/bin/time -v` (peak resident memory). The latency of each verdict is the watch's own
`seconds_after_save`: from the newest modification of the save's files to the verdict being written.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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


def env() -> dict[str, str]:
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), out.get("PYTHONPATH", "")) if p)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=100)
    parser.add_argument("--work", help="folder for the run (default: a temporary one)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-watch-"))
    run = work / "run"
    run.mkdir(parents=True, exist_ok=True)

    watch = subprocess.Popen(
        ["/usr/bin/time", "-v", sys.executable, "-m", "ckinspect", "watch", str(run), "--report",
         "--format", "json", "--fail-on", "never", "--settle", "120"],  # fmt: skip
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), start_new_session=True,
    )  # fmt: skip
    events: list[dict] = []
    reader = threading.Thread(target=lambda: events.extend(json.loads(line) for line in watch.stdout), daemon=True)
    reader.start()
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
    deadline = time.monotonic() + 600
    while len(events) < args.saves and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(watch.pid, signal.SIGINT)
    _, err = watch.communicate(timeout=120)
    watch_peak = peak_rss_kib(err)

    newest = sorted(run.iterdir())[-1]
    one = subprocess.run(
        ["/usr/bin/time", "-v", sys.executable, "-m", "ckinspect", "--report", str(newest), "--format", "json"],
        capture_output=True, text=True, env=env(),
    )  # fmt: skip
    report_peak = peak_rss_kib(one.stderr)

    judged = [e for e in events if e["event"] == "judged"]
    steps = [e["step"] for e in judged]
    latency = sorted(e["seconds_after_save"] for e in judged)
    print(f"run: {args.saves} DCP saves by the bundled trainer in {trained:.1f} s; watch judged {len(judged)} "
          f"(in order: {steps == sorted(steps)}, each once: {len(set(steps)) == len(steps)})")  # fmt: skip
    if latency:
        p95 = latency[min(len(latency) - 1, int(0.95 * len(latency)))]
        print(f"verdict after the save completed: median {statistics.median(latency):.2f} s, p95 {p95:.2f} s, "
              f"max {latency[-1]:.2f} s")  # fmt: skip
    print(f"peak memory: watch over the whole run {watch_peak / 1024:.0f} MiB; one `ckinspect --report` of one "
          f"save {report_peak / 1024:.0f} MiB; ratio {watch_peak / max(1, report_peak):.2f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
