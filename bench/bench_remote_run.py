"""`ckinspect last-good URL/` on a run served over HTTP, bytes transferred vs the run's size.

    python bench/bench_remote_run.py [--checkpoints 6] [--mib 128]

The run: `checkpoint-K/resume.pth` (resume-shaped torch zips: fp32 weights, AdamW moments, step, RNG;
bench_diff.write_resume), plus the newest save torn before its rename (`checkpoint-N/resume.pth.tmp`, half
of a file). The range server (tests/helpers/remote_servers.py, the one the tests start) serves the run's
folder with index pages and counts every body byte it sends. Rows: `last-good URL/` (the path),
`last-good URL/ --format json` (every candidate judged) and what a user would otherwise run: download the
run (fsspec get, recursive), then `last-good` on the copy. Printed: bytes sent, their share of the run,
requests, seconds (wall and CPU of the child), and the ratios. Loopback has no latency or bandwidth limit,
so the time ratio understates what a real network gives; the byte ratio does not depend on it.
Run by hand; not in the suite.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_diff import MIB, child_env, write_in_child  # noqa: E402

from tests.helpers.remote_servers import range_server  # noqa: E402

DOWNLOAD_THEN_LAST_GOOD = r"""
import subprocess, sys, fsspec
url, copy, names = sys.argv[1], sys.argv[2], sys.argv[3:]
fs = fsspec.filesystem("http")
fs.get([url + n for n in names], [f"{copy}/{n}" for n in names])  # every file of the run, one GET each
sys.exit(subprocess.run([sys.executable, "-m", "ckinspect", "last-good", copy], stdout=subprocess.DEVNULL).returncode)
"""


def make_run(root: Path, checkpoints: int, mib: int) -> int:
    first = root / "checkpoint-1" / "resume.pth"
    first.parent.mkdir(parents=True)
    write_in_child(first, mib * MIB)
    for k in range(2, checkpoints + 1):
        (root / f"checkpoint-{k}").mkdir()
        shutil.copyfile(first, root / f"checkpoint-{k}" / "resume.pth")
    torn = root / f"checkpoint-{checkpoints + 1}"
    torn.mkdir()
    data = first.read_bytes()
    (torn / "resume.pth.tmp").write_bytes(data[: len(data) // 2])
    for k in range(1, checkpoints + 2):  # oldest first, a minute apart, as the saves were made
        for path in (root / f"checkpoint-{k}").iterdir():
            os.utime(path, (1_700_000_000 + 60 * k, 1_700_000_000 + 60 * k))
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoints", type=int, default=6)
    ap.add_argument("--mib", type=int, default=128, help="size of each resume file")
    ap.add_argument("--dir", type=Path)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="ckinspect-bench-remote-run-", dir=args.dir))
    try:
        run = folder / "run"
        run.mkdir()
        size = make_run(run, args.checkpoints, args.mib)
        env = child_env()
        names = sorted(p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file())
        rows = []
        with range_server(folder) as server:
            url = f"{server.url}/run/"
            for label, cmd in [
                ("ckinspect last-good URL/", [sys.executable, "-m", "ckinspect", "last-good", url]),
                ("ckinspect last-good URL/ --format json",
                 [sys.executable, "-m", "ckinspect", "last-good", url, "--format", "json"]),
                ("download (fsspec get), then last-good",
                 [sys.executable, "-c", DOWNLOAD_THEN_LAST_GOOD, url, str(folder / "copy"), *names]),
            ]:  # fmt: skip
                server.bytes_sent = server.requests = 0
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t = time.perf_counter()
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
                wall = time.perf_counter() - t
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                if proc.returncode != 0:
                    raise SystemExit(f"{label}: exit {proc.returncode}: {proc.stderr[-500:]}")
                rows.append((label, server.bytes_sent, server.requests, wall, cpu, proc.stdout.strip()))
        print(f"\nrun: {args.checkpoints} checkpoints of {args.mib} MiB and a torn save, {size:,} bytes, "
              f"served over HTTP on 127.0.0.1 (load average {os.getloadavg()[0]:.2f})\n")  # fmt: skip
        print(f"{'method':<40} {'bytes sent':>14} {'of the run':>10} {'requests':>9} {'wall s':>7} {'CPU s':>6}")
        for label, sent, requests, wall, cpu, _out in rows:
            print(f"{label:<40} {sent:>14,} {sent / size:>10.3%} {requests:>9} {wall:>7.2f} {cpu:>6.2f}")
        print(f"\nanswer: {rows[0][5]}")
        theirs = rows[2]
        for ours in rows[:2]:
            print(f"{ours[0]}: {theirs[1] / max(ours[1], 1):,.0f}x fewer bytes, {theirs[3] / ours[3]:.1f}x faster "
                  "than downloading first")  # fmt: skip
        return 0
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
