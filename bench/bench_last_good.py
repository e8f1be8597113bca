"""`ckinspect last-good` on a run of 100 checkpoints with 8 rank files each, against loading them with torch.

    python bench/bench_last_good.py [--checkpoints 100] [--ranks 8] [--rounds 3] [--memory]

The run is DeepSpeed-shaped (tests/analysis/runs/test_runs.py writes the same records): `global_stepN/`
with `mp_rank_00_model_states.pt` recording dp world size 8, and 8 `zero_pp_rank_K_..._optim_states.pt`.
The newest checkpoint lacks one rank file, so last-good must judge two checkpoints to answer.

Timed, each as a fresh process (what a launch script pays) with its bytecode cached as an install has it,
after one warm-up round, medians of interleaved rounds; wall and CPU time (on a shared machine the wall
time includes waiting for a core):
  - `ckinspect last-good RUN`                 the path (newest first until one is good)
  - `ckinspect last-good RUN --format json`   every checkpoint judged and listed
  - torch: `torch.load(weights_only=False)` of every file of every checkpoint (what checking by loading costs)
The goal: the first answers in at most 1 s; JSON at the cost of the plain answer. `--memory` adds the
peak RSS (/usr/bin/time -v) of both on runs of 10, 40 and 160 saves: it must not grow with their number.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

TORCH_LOAD_ALL = """
import sys, torch
from pathlib import Path
for path in sorted(Path(sys.argv[1]).rglob("*.pt")):
    torch.load(path, map_location="cpu", weights_only=False)
"""


def make_run(root: Path, checkpoints: int, ranks: int) -> Path:
    import torch

    run = root / "run"
    weight = torch.randn(256, 64)  # 64 KiB of fp32 weights; each rank holds an eighth of the moments
    for index in range(checkpoints):
        step = (index + 1) * 100
        tag = run / f"global_step{step}"
        tag.mkdir(parents=True)
        torch.save(
            {"module": {"layer.weight": weight}, "optimizer": None, "global_steps": step, "dp_world_size": ranks,
             "mp_world_size": 1, "ds_version": "0.19.8", "ds_config": {"zero_optimization": {"stage": 1}}},
            tag / "mp_rank_00_model_states.pt",
        )  # fmt: skip
        for rank in range(ranks):
            flat = torch.randn(weight.numel() // ranks)
            torch.save(
                {"optimizer_state_dict": {"zero_stage": 1, "partition_count": [ranks], "ds_version": "0.19.8",
                                          "base_optimizer_state": {"state": {0: {"exp_avg": flat, "exp_avg_sq": flat}},
                                                                   "param_groups": [{"params": [0]}]},
                                          "single_partition_of_fp32_groups": [flat]},
                 "ds_version": "0.19.8"},
                tag / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt",
            )  # fmt: skip
        (run / "latest").write_text(tag.name)
    (tag / f"zero_pp_rank_{ranks - 1}_mp_rank_00_optim_states.pt").unlink()  # the newest save lost a rank
    return run


def timed(args: list[str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the child, its stdout)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as installed: bytecode cached
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, cwd=REPO, env=env)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(args)} failed:\n{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu, proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=100)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory", action="store_true", help="also peak RSS on runs of 10, 40 and 160 saves")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-last-good-") as tmp:
        run = make_run(Path(tmp), args.checkpoints, args.ranks)
        files = sum(1 for _ in run.rglob("*.pt"))
        size = sum(p.stat().st_size for p in run.rglob("*.pt"))
        ckinspect = [sys.executable, "-m", "ckinspect", "last-good", str(run)]
        commands = {
            "last-good": ckinspect,
            "last-good --format json": [*ckinspect, "--format", "json"],
            "torch.load every file": [sys.executable, "-c", TORCH_LOAD_ALL, str(run)],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        answer = ""
        for command in commands.values():
            timed(command)  # warm-up: bytecode written, files in the page cache
        for _ in range(args.rounds):
            for name, command in commands.items():
                elapsed, used, out = timed(command)
                times[name].append(elapsed)
                cpu[name].append(used)
                if name == "last-good":
                    answer = out.strip()
        expected = str(run / f"global_step{(args.checkpoints - 1) * 100}")
        if answer != expected:
            raise SystemExit(f"last-good answered {answer!r}, expected {expected!r}")
        torch_all = statistics.median(times["torch.load every file"])
        torch_cpu = statistics.median(cpu["torch.load every file"])
        print(f"run: {args.checkpoints} checkpoints x {args.ranks} rank files + model states = {files} files, "
              f"{size / 2**20:.1f} MiB; the newest lacks a rank file")  # fmt: skip
        print(f"answer: {Path(answer).name} (medians of {args.rounds} interleaved rounds, each a fresh process)")
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores: wall time includes waiting for a core")
        for name in commands:
            median, used = statistics.median(times[name]), statistics.median(cpu[name])
            ratio = (
                ""
                if name.startswith("torch")
                else (f"  {torch_all / median:5.1f}x faster (wall), {torch_cpu / used:5.1f}x less CPU than torch.load")
            )
            print(f"  {name:<26} wall {median:6.2f} s  cpu {used:6.2f} s{ratio}")
        wall_ok = statistics.median(times["last-good"]) <= 1.0
        print(
            f"goal (last-good in at most 1 s): wall {'met' if wall_ok else 'NOT met'}, "
            f"cpu {'met' if statistics.median(cpu['last-good']) <= 1.0 else 'NOT met'}"
        )
        json_ratio = statistics.median(times["last-good --format json"]) / statistics.median(times["last-good"])
        print(f"goal (JSON at the cost of the plain answer): --format json costs {json_ratio:.1f}x the plain answer")
    if args.memory:
        memory_flat(args.ranks)
    return 0


def peak_rss(args: list[str]) -> int:
    """Peak resident set of one child process, in KiB, as /usr/bin/time -v reports it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run(["/usr/bin/time", "-v", *args], capture_output=True, text=True, cwd=REPO, env=env)
    line = next(x for x in proc.stderr.splitlines() if "Maximum resident set size" in x)
    return int(line.rsplit(":", 1)[1])


def memory_flat(ranks: int) -> None:
    """Peak RSS of last-good (plain and JSON) on runs of 10 to 160 saves: flat in the number of checkpoints."""
    print(f"peak RSS (/usr/bin/time -v), runs of N checkpoints x {ranks} rank files:")
    rows = []
    for checkpoints in (10, 40, 160):
        with tempfile.TemporaryDirectory(prefix="bench-last-good-rss-") as tmp:
            run = make_run(Path(tmp), checkpoints, ranks)
            ckinspect = [sys.executable, "-m", "ckinspect", "last-good", str(run)]
            plain, listed = peak_rss(ckinspect), peak_rss([*ckinspect, "--format", "json"])
            rows.append((checkpoints, plain, listed))
            print(
                f"  {checkpoints:4d} saves: last-good {plain / 1024:6.1f} MiB   --format json {listed / 1024:6.1f} MiB"
            )
    growth = rows[-1][1] / rows[0][1]
    print(f"  160 saves against 10: plain {growth:.2f}x, json {rows[-1][2] / rows[0][2]:.2f}x the peak RSS")


if __name__ == "__main__":
    sys.exit(main())
