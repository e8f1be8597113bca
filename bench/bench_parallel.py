"""Parallel scan: the value scan of a 4-shard checkpoint on 1 and on 2 processes, against the ideal 2x,
and against what a user would otherwise run (load every shard and check `isfinite` on every tensor).

    python bench/bench_parallel.py                       # 4 x 1 GiB shards in a fresh /tmp folder, deleted after
    python bench/bench_parallel.py --mib 64 --rounds 3   # smaller and quicker
    python bench/bench_parallel.py --start-methods       # also: a 2-worker pool's start-up, fork/forkserver/spawn

The one line to re-run on an idle machine:  python bench/bench_parallel.py --start-methods

The shards are a sharded safetensors set (`model.safetensors.index.json`, fp32 tensors, page-cached by a
first read). Each configuration runs in a fresh process that lists the set (not timed) and then times
`ckinspect.jobs.parallel.scan_units` (for a pool: its start-up included): wall time, and CPU time
(the process's own plus each worker's while it scanned; worker imports not counted). Rows:
  1 process, 1 thread    --jobs 1 with CKINSPECT_THREADS=1: one core's worth
  2 processes            --jobs 2, one scan thread each (what the pool gives each worker on 2 cores)
  1 process, 2 threads   --jobs 1 with the scan's default threads: what --jobs 1 does on this box
  ckinspect --report     the whole command, default --jobs, in a fresh process (wall only)
  user: load + isfinite  safetensors.torch.load_file of every shard, torch.isfinite(t).all() per tensor
and a control without ckinspect's pool: two plain processes started together, each scanning 2 of the
shards, against one process scanning all 4: on a shared machine, the speed-up two processes can get at all.
The headline is the speed-up from the first row to the second (ideal 2.00x on 2 idle cores); the machine's
load average before and after is printed, since a shared machine takes its share of any speed-up.
Run by hand; not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_diff import MIB, REPO, child_env, run  # noqa: E402

SHARDS = 4
TENSORS_PER_SHARD = 8

SCAN_CHILD = r"""
import json, sys, time
from ckinspect.analysis.inspect import inspect_path
from ckinspect.jobs.parallel import plan_units, scan_units
ckpt = inspect_path(sys.argv[1], quick=True)
units = plan_units([ckpt])
jobs = int(sys.argv[2])
cpu, wall = time.process_time(), time.perf_counter()
results = scan_units(units, jobs)
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
busy = {}
for r in results:
    busy[r.pid] = busy.get(r.pid, 0.0) + r.seconds
if jobs > 1:  # the workers' CPU is theirs: add what each spent scanning
    cpu += sum(r.cpu_seconds for r in results)
print(json.dumps({"wall": wall, "cpu": cpu, "busiest": max(busy.values()),
                  "bytes": sum(r.bytes_scanned for r in results),
                  "units": len(units), "findings": [f.code for r in results for f in r.findings]}))
"""

SHARDS_CHILD = r"""
import sys
from pathlib import Path
from ckinspect.formats import open_checkpoint
from ckinspect.analysis.scan import scan_values
for shard in sys.argv[1:]:
    scan_values(open_checkpoint(Path(shard)))
"""

USER_CHECK = r"""
import sys, torch
from safetensors.torch import load_file
bad = 0
for shard in sys.argv[1:]:
    for t in load_file(shard).values():
        bad += int(not bool(torch.isfinite(t).all()))
sys.exit(0 if bad == 0 else 1)
"""

START_CHILD = r"""
import json, sys, time
from ckinspect.analysis.inspect import inspect_path
from ckinspect.jobs.parallel import plan_units, pool_scan
ckpt = inspect_path(sys.argv[1], quick=True)
units = plan_units([ckpt])[:2]
started = time.perf_counter()
first = None
for _ in pool_scan(units, 2, method=sys.argv[2]):
    first = first or time.perf_counter() - started
print(json.dumps({"first": first, "all": time.perf_counter() - started}))
"""


def write_set(folder: Path, shard_bytes: int) -> Path:
    """A 4-shard safetensors set of fp32 ramps (the values do not change the scan's speed), written by a
    child process so that this one stays small."""
    folder.mkdir()
    code = f"""
import json, numpy as np
from pathlib import Path
from safetensors.numpy import save_file
folder, shard_bytes = Path({str(folder)!r}), {shard_bytes}
per = shard_bytes // 4 // {TENSORS_PER_SHARD}
weight_map = {{}}
for s in range({SHARDS}):
    name = f"model-{{s + 1:05d}}-of-{SHARDS:05d}.safetensors"
    tensors = {{f"layers.{{s * {TENSORS_PER_SHARD} + i}}.weight": np.linspace(-1, 1, per, dtype=np.float32)
               for i in range({TENSORS_PER_SHARD})}}
    save_file(tensors, folder / name)
    weight_map.update({{k: name for k in tensors}})
(folder / "model.safetensors.index.json").write_text(json.dumps({{"weight_map": weight_map}}))
"""
    subprocess.run([sys.executable, "-c", code], check=True, env=child_env())
    return folder / "model.safetensors.index.json"


def warm(files: list[Path]) -> None:
    for f in files:
        with open(f, "rb") as handle:
            while handle.read(16 << 20):
                pass


def scan_child(index: Path, jobs: int, threads: int | None) -> dict[str, float]:
    env = child_env()
    env.pop("CKINSPECT_THREADS", None)
    if threads is not None:
        env["CKINSPECT_THREADS"] = str(threads)
    out = subprocess.run(
        [sys.executable, "-c", SCAN_CHILD, str(index), str(jobs)], check=True, capture_output=True, text=True, env=env
    )
    return json.loads(out.stdout)


def control(shards: list[Path]) -> float:
    """Wall time of two plain processes (no pool, one scan thread each) started together, each scanning half
    the shards: the parallel speed-up this machine can give right now, whatever ckinspect does."""
    env = child_env()
    env["CKINSPECT_THREADS"] = "1"
    half = len(shards) // 2
    started = time.perf_counter()
    procs = [
        subprocess.Popen([sys.executable, "-c", SHARDS_CHILD, *map(str, part)], env=env)
        for part in (shards[:half], shards[half:])
    ]
    if any(p.wait() for p in procs):
        raise SystemExit("control scan failed")
    return time.perf_counter() - started


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=1024, help="size of each of the 4 shards in MiB (default 1024)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds; each runs every configuration once (default 3)")
    ap.add_argument("--dir", type=Path, help="where to write (default: a fresh folder in /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the files")
    ap.add_argument("--start-methods", action="store_true", help="also time a 2-worker pool's start-up per method")
    args = ap.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="ckinspect-parallel-", dir=args.dir or "/tmp"))
    try:
        index = write_set(folder / "set", args.mib * MIB)
        shards = sorted(index.parent.glob("*.safetensors"))
        nbytes = sum(f.stat().st_size for f in shards)
        warm(shards)
        print(f"{SHARDS} shards x {args.mib} MiB ({nbytes / MIB:,.0f} MiB) in {index.parent}, page-cached; "
              f"{os.cpu_count()} cores; load average before: {load_average()}")  # fmt: skip
        configs = {
            "1 process, 1 thread": (1, 1),
            "2 processes (1 thread each)": (2, 1),
            "1 process, 2 threads": (1, None),
        }
        walls: dict[str, list[float]] = {k: [] for k in configs}
        cpus: dict[str, list[float]] = {k: [] for k in configs}
        busiest: list[float] = []  # 2 processes: the busiest worker's scan time (the wall without start-up)
        report_walls: list[float] = []
        control_walls: list[float] = []
        alone_walls: list[float] = []
        user_walls: list[float] = []
        user_cpus: list[float] = []
        for _ in range(args.rounds):  # interleaved, so the machine's drift hits every row alike
            for label, (jobs, threads) in configs.items():
                got = scan_child(index, jobs, threads)
                assert got["bytes"] >= nbytes - 4096 * SHARDS, got
                walls[label].append(got["wall"])
                if jobs == 2:
                    busiest.append(got["busiest"])
                cpus[label].append(got["cpu"])
            control_walls.append(control(shards))
            alone = time.perf_counter()
            subprocess.run([sys.executable, "-c", SHARDS_CHILD, *map(str, shards)], check=True,
                           env={**child_env(), "CKINSPECT_THREADS": "1"})  # fmt: skip
            alone_walls.append(time.perf_counter() - alone)
            report = run("report", [sys.executable, "-m", "ckinspect", "--report", str(index), "--format", "json"],
                         env=child_env(), expect=None)  # fmt: skip
            report_walls.append(report.wall)
            user = run("user", [sys.executable, "-c", USER_CHECK, *map(str, shards)], env=child_env())
            user_walls.append(user.wall)
            user_cpus.append(user.cpu)

        def row(label: str, w: list[float], c: list[float] | None) -> str:
            cpu = f"{statistics.median(c):>8.2f}" if c else f"{'-':>8}"
            gbs = nbytes / statistics.median(w) / 1e9
            return f"{label:<34} {min(w):>7.3f} {statistics.median(w):>8.3f} {gbs:>7.2f} {cpu}"

        print(f"\n{'scan of the set':<34} {'best s':>7} {'median s':>8} {'GB/s':>7} {'CPU s':>8}")
        for label in configs:
            print(row(label, walls[label], cpus[label]))
        print(row("ckinspect --report (whole command)", report_walls, None))
        print(row("user: load_file + isfinite", user_walls, user_cpus))
        one, two = walls["1 process, 1 thread"], walls["2 processes (1 thread each)"]
        per_round = [a / b for a, b in zip(one, two, strict=True)]
        speedup = statistics.median(one) / statistics.median(two)
        print(f"\nspeed-up 1 -> 2 processes: {speedup:.2f}x (ideal 2.00x; {speedup / 2:.0%} of it); "
              f"per round {min(per_round):.2f}x..{max(per_round):.2f}x")  # fmt: skip
        started = statistics.median(two) - statistics.median(busiest)
        steady = statistics.median(one) / statistics.median(busiest)
        print(
            f"  of the 2-process wall, the pool's start-up is {started:.3f} s (wall - the busiest worker's scan); "
            f"without it: {steady:.2f}x ({steady / 2:.0%} of ideal)"
        )
        ceiling = statistics.median(alone_walls) / statistics.median(control_walls)
        print(f"  control, no pool: 2 plain processes with 2 shards each vs 1 with all 4 (imports included): "
              f"{ceiling:.2f}x: what this machine gave two processes during the run")  # fmt: skip
        threaded = statistics.median(walls["1 process, 2 threads"]) / statistics.median(two)
        print(f"2 processes vs 1 process with 2 scan threads: {threaded:.2f}x")
        user_ratio = statistics.median(user_walls) / statistics.median(two)
        print(
            f"2 processes vs the user's load_file + isfinite: {user_ratio:.2f}x faster (scan only; "
            f"whole command {statistics.median(user_walls) / statistics.median(report_walls):.2f}x)"
        )
        print(f"load average after: {load_average()}")
        if args.start_methods:
            tiny = write_set(folder / "tiny", MIB)  # the start-up alone: shards of 1 MiB scan in no time
            print("\na 2-worker pool over two 1 MiB shards: seconds to the first result / to both")
            for method in ("fork", "forkserver", "spawn"):
                times = [
                    json.loads(
                        subprocess.run(
                            [sys.executable, "-c", START_CHILD, str(tiny), method],
                            check=True,
                            capture_output=True,
                            text=True,
                            env=child_env(),
                        ).stdout  # fmt: skip
                    )
                    for _ in range(args.rounds)
                ]
                first = statistics.median(t["first"] for t in times)
                both = statistics.median(t["all"] for t in times)
                print(f"  {method:<11} {first:.3f} / {both:.3f}")
    finally:
        if args.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    assert REPO.is_dir()
    sys.exit(main())
