"""`ckinspect last-good` on a long run with 8 rank files per save, against loading the files with torch.

    python bench/bench_last_good.py [--checkpoints 100] [--ranks 8] [--rounds 3] [--memory]
    python bench/bench_last_good.py --model 1b --checkpoints 160 [--memory] [--values]

The run is DeepSpeed-shaped (tests/analysis/runs/test_runs.py writes the same records): `global_stepN/`
with `mp_rank_00_model_states.pt` recording dp world size 8, and 8 `zero_pp_rank_K_..._optim_states.pt`.
The newest checkpoint lacks one rank file, so last-good must judge two checkpoints to answer. `--model
tiny` (the default): a 64 KiB weight and its moments, real data. `--model 1b`: Llama-3.2-1B's 146 tensors
in bf16 and the fp32 master weights and AdamW moments in 8 partitions, 15.7 GB a save, as sparse files of
torch.save's own bytes (make_sparse_run); structure is judged (`--quick`), since reading one such save's
values reads 16.1 GiB (`--values` adds the default answer, which reads them, side by side with torch.load(mmap)
+ torch.isfinite over that save and `cat` of its files: see values_of_the_answer).

Timed, each as a fresh process (what a launch script pays) with its bytecode cached as an install has it,
after one warm-up round, medians of interleaved rounds; wall and CPU time (on a shared machine the wall
time includes waiting for a core):
  - `ckinspect last-good RUN`                       the path (newest first until one is good)
  - `ckinspect last-good RUN --format json`         the listing: what the answer needs judged, the rest
                                                    not-judged (the same reads as the path)
  - `ckinspect last-good RUN --all --format json`   every checkpoint judged and listed
  - torch: `torch.load(weights_only=False)` of every file of every checkpoint (what checking by loading
    costs; `mmap=True` for the 1b run, which reads the structure and no tensor data, as --quick does)
The goals: 160 saves of a 1B model judged in at most 2 s; JSON at the cost of the plain answer. `--memory`
adds the peak RSS (/usr/bin/time -v) of each on runs of 10, 40 and 160 saves: flat in their number.
"""

from __future__ import annotations

import argparse
import json
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
    torch.load(path, map_location="cpu", weights_only=False, mmap=sys.argv[2] == "mmap")
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


FIRST_STEP = 1000  # steps 1000, 1100, ...: each pickles as BININT2, so every save's pickle has one length


def make_sparse_run(root: Path, checkpoints: int, ranks: int, size: str = "1b") -> Path:
    """The same DeepSpeed ZeRO-1 run for a real model's shapes (bench/scale_sims.LLAMA; 1b: Llama-3.2-1B, 1.24B
    parameters): `mp_rank_00_model_states.pt` holds the bf16 module, each of the `ranks` rank files its fp32
    partition of the master weights and both AdamW moments. Every file is torch.save's own bytes with the
    tensor data left as holes (scale_sims.saved_template); torch.save runs twice (model states, one rank
    file), and each save's model states differ from the first only in `global_steps`, written into the
    pickle with its zip CRCs (what torch.save writes for that step)."""
    import math

    import torch
    from scale_sims import llama_params, real_bytes, saved_template, write_template, zero_tensors

    run = root / "run"
    params = llama_params(size)
    part = math.ceil(sum(math.prod(shape) for _, shape in params) / ranks)
    # zeros the kernel guarantees (not torch.empty: see scale_sims.zero_tensors)
    zeros = zero_tensors([shape for _, shape in params], torch.bfloat16)
    module = dict(zip([name for name, _ in params], zeros, strict=True))
    model = saved_template({"module": module, "optimizer": None, "global_steps": FIRST_STEP, "dp_world_size": ranks,
                            "mp_world_size": 1, "ds_version": "0.19.8",
                            "ds_config": {"zero_optimization": {"stage": 1}}})  # fmt: skip
    del module, zeros
    flats = zero_tensors([(part,)] * 3, torch.float32)
    optim = saved_template(
        {"optimizer_state_dict": {"zero_stage": 1, "partition_count": [ranks], "ds_version": "0.19.8",
                                  "base_optimizer_state": {"state": {0: {"exp_avg": flats[0], "exp_avg_sq": flats[1]}},
                                                           "param_groups": [{"params": [0]}]},
                                  "single_partition_of_fp32_groups": [flats[2]]},
         "ds_version": "0.19.8"})  # fmt: skip
    del flats
    for parts in (model, optim):  # only structure is data: pickles, zip records, tensors under 4 KiB (46 KB, 2 KB)
        if real_bytes(parts) > 1 << 20:
            raise SystemExit(f"make_sparse_run: a template writes {real_bytes(parts):,} bytes of data, not holes")
    for index in range(checkpoints):
        step = FIRST_STEP + index * 100
        tag = run / f"global_step{step}"
        tag.mkdir(parents=True)
        names = [MODEL_STATES] + [RANK_FILE.format(rank) for rank in range(ranks)]
        for name, parts in zip(names, [_with_step(model, step)] + [optim] * ranks, strict=True):
            with open(tag / name, "wb") as f:
                write_template(f, parts)
                f.truncate()
        (run / "latest").write_text(tag.name)
    (tag / RANK_FILE.format(ranks - 1)).unlink()  # the newest save lost a rank
    return run


MODEL_STATES = "mp_rank_00_model_states.pt"
RANK_FILE = "zero_pp_rank_{}_mp_rank_00_optim_states.pt"


def _with_step(parts: list[bytes | int], step: int) -> list[bytes | int]:
    """A model-states template whose `global_steps` is `step`: the int in data.pkl (the zip's first record),
    its CRC-32 in the record's data descriptor (torch writes one to a stream) and in the central directory
    (the template's last bytes)."""
    import struct
    import zlib

    head, tail = parts[0], parts[-1]
    assert len(parts) >= 3 and isinstance(head, bytes) and isinstance(tail, bytes) and head[:4] == b"PK\x03\x04"
    name_len, extra_len = struct.unpack_from("<HH", head, 26)
    start = 30 + name_len + extra_len
    end = head.index(b"PK\x07\x08", start)  # the data descriptor: CRC-32 and sizes follow the pickle
    pickle = head[start:end]
    key = pickle.index(b"global_steps")
    at = pickle.index(b"M" + struct.pack("<H", FIRST_STEP), key, key + 24)  # BININT2 after the key (and memo)
    pickle = pickle[:at] + b"M" + struct.pack("<H", step) + pickle[at + 3 :]
    old_crc, crc = head[end + 4 : end + 8], struct.pack("<I", zlib.crc32(pickle))
    assert old_crc == struct.pack("<I", zlib.crc32(head[start:end]))
    head = head[:start] + pickle + head[end : end + 4] + crc + head[end + 8 :]
    entry = tail.index(head[30 : 30 + name_len]) - 46  # data.pkl's central record: 46 bytes, then its name
    assert tail[entry : entry + 4] == b"PK\x01\x02" and tail[entry + 16 : entry + 20] == old_crc
    return [head, *parts[1:-1], tail[: entry + 16] + crc + tail[entry + 20 :]]


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


def build(root: Path, model: str, checkpoints: int, ranks: int) -> Path:
    return make_run(root, checkpoints, ranks) if model == "tiny" else make_sparse_run(root, checkpoints, ranks, model)


def commands_for(run: Path, model: str) -> dict[str, list[str]]:
    quick = [] if model == "tiny" else ["--quick"]  # a 1b save's values are 15.7 GB: --values times them
    ckinspect = [sys.executable, "-m", "ckinspect", "last-good", str(run), *quick]
    tail = " --quick" if quick else ""
    return {
        f"last-good{tail}": ckinspect,
        f"last-good{tail} --format json": [*ckinspect, "--format", "json"],
        f"last-good{tail} --all --format json": [*ckinspect, "--all", "--format", "json"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=100)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", choices=["tiny", "1b"], default="tiny")
    parser.add_argument("--memory", action="store_true", help="also peak RSS on runs of 10, 40 and 160 saves")
    parser.add_argument("--values", action="store_true", help="1b: also the default answer, which reads values")
    parser.add_argument("--value-rounds", type=int, default=1, help="interleaved rounds of the --values rows")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-last-good-") as tmp:
        run = build(Path(tmp), args.model, args.checkpoints, args.ranks)
        files = sum(1 for _ in run.rglob("*.pt"))
        size = sum(p.stat().st_size for p in run.rglob("*.pt"))
        mmap = "mmap" if args.model != "tiny" else "read"
        torch_name = "torch.load every file" + (" (mmap)" if mmap == "mmap" else "")
        commands = {**commands_for(run, args.model), torch_name: [sys.executable, "-c", TORCH_LOAD_ALL, str(run), mmap]}
        plain = next(iter(commands))
        times: dict[str, list[float]] = {name: [] for name in commands}
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        answers: dict[str, str] = {}
        for command in commands.values():
            timed(command)  # warm-up: bytecode written, files in the page cache
        for _ in range(args.rounds):
            for name, command in commands.items():
                elapsed, used, out = timed(command)
                times[name].append(elapsed)
                cpu[name].append(used)
                answers[name] = (
                    out.strip() if name == plain else json.loads(out)["run"]["last_good"] if "json" in name else ""
                )
        expected = str(run / sorted((p.name for p in run.iterdir() if p.is_dir()), key=_step)[-2])
        for name, answer in answers.items():
            if name.startswith("last-good") and answer != expected:
                raise SystemExit(f"{name} answered {answer!r}, expected {expected!r}")
        torch_all = statistics.median(times[torch_name])
        torch_cpu = statistics.median(cpu[torch_name])
        print(f"run: {args.checkpoints} checkpoints x {args.ranks} rank files + model states = {files} files, "
              f"{_size(size)} ({args.model}); the newest lacks a rank file")  # fmt: skip
        print(f"answer: {Path(expected).name}, the same from every row (medians of {args.rounds} interleaved rounds, "
              "each a fresh process)")  # fmt: skip
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores: wall time includes waiting for a core")
        for name in commands:
            median, used = statistics.median(times[name]), statistics.median(cpu[name])
            ratio = ""
            if not name.startswith("torch"):
                ratio = f"  {torch_all / median:5.1f}x faster (wall), {torch_cpu / used:5.1f}x less CPU than torch.load"
            print(f"  {name:<38} wall {median:6.2f} s  cpu {used:6.2f} s{ratio}")
        goal = 1.0 if args.model == "tiny" else 2.0
        wall_ok, cpu_ok = statistics.median(times[plain]) <= goal, statistics.median(cpu[plain]) <= goal
        print(f"goal (the answer in at most {goal:g} s): wall {'met' if wall_ok else 'NOT met'}, "
              f"cpu {'met' if cpu_ok else 'NOT met'}")  # fmt: skip
        listing = next(n for n in commands if n.endswith("json") and "--all" not in n)
        json_ratio = statistics.median(cpu[listing]) / statistics.median(cpu[plain])
        print(
            f"goal (JSON at the cost of the plain answer): --format json costs {json_ratio:.2f}x the plain answer's CPU"
        )
        if args.values and args.model != "tiny":
            values_of_the_answer(run, Path(expected), args.value_rounds)
    if args.memory:
        memory_flat(args.model, args.ranks)
    return 0


TORCH_CHECK_SAVE = """
import sys, torch
from pathlib import Path

def leaves(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from leaves(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from leaves(v)

bad = 0
for path in sorted(Path(sys.argv[1]).glob("*.pt")):
    for t in leaves(torch.load(path, map_location="cpu", weights_only=False, mmap=True)):
        bad += bool(t.is_floating_point() and not torch.isfinite(t).all())
print(bad)
"""


def values_of_the_answer(run: Path, answer: Path, rounds: int) -> None:
    """The default answer (issue 27: the values of the save it names are read, CRCs checked, NaN/Inf looked
    for), against what a user would otherwise run for it, each a fresh process, interleaved: torch.load
    (mmap) of that save's files + torch.isfinite(t).all() over every tensor (no CRC), and `cat` of the
    save's files to /dev/null (the read floor: every byte through the page cache once, nothing computed).
    Under default --jobs the scan runs in worker processes whose CPU no rusage of ours sees: its wall only;
    `--jobs 1` scans in the process (two threads), so its CPU is all there."""
    files = sorted(str(p) for p in answer.glob("*.pt"))
    save = sum(os.path.getsize(f) for f in files)
    ckinspect = [sys.executable, "-m", "ckinspect", "last-good", str(run)]
    rows = {
        "last-good (default --jobs)": ckinspect,
        "last-good --jobs 1": [*ckinspect, "--jobs", "1"],
        "torch.load(mmap) + isfinite, that save": [sys.executable, "-c", TORCH_CHECK_SAVE, str(answer)],
        "cat that save > /dev/null": ["sh", "-c", 'cat "$@" > /dev/null', "cat", *files],
    }
    wall: dict[str, list[float]] = {name: [] for name in rows}
    cpu: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(rounds):
        for name, command in rows.items():
            elapsed, used, out = timed(command)
            if name.startswith("last-good"):
                assert out.strip() == str(answer), out
            elif name.startswith("torch"):
                assert out.strip() == "0", out
            wall[name].append(elapsed)
            cpu[name].append(used)
    med = {name: (statistics.median(wall[name]), statistics.median(cpu[name])) for name in rows}
    torch_wall, torch_cpu = med["torch.load(mmap) + isfinite, that save"]
    cat_wall, cat_cpu = med["cat that save > /dev/null"]
    print(
        f"the default answer reads the values of {answer.name}: {len(files)} files, {_size(save)} "
        f"(medians of {rounds} interleaved round(s), fresh processes; load average {os.getloadavg()[0]:.1f})"
    )
    for name, (w, c) in med.items():
        shown = "   n/a (workers)" if name == "last-good (default --jobs)" else f"{c:6.2f} s"
        ratio = ""
        if name.startswith("last-good"):
            against_cpu = f", {torch_cpu / c:5.1f}x less CPU" if not shown.endswith("(workers)") else ""
            ratio = f"  vs torch {torch_wall / w:5.1f}x faster (wall){against_cpu}; {w / cat_wall:4.1f}x cat's wall"
        print(f"  {name:<40} wall {w:6.2f} s  cpu {shown}  {save / 2**30 / w:5.2f} GiB/s wall{ratio}")
    jobs1_cpu = med["last-good --jobs 1"][1]
    print(f"  floor: cat reads {_size(save)} at {save / 2**30 / cat_wall:.2f} GiB/s wall, {save / 2**30 / cat_cpu:.2f} "
          f"GiB per CPU-s here: reading one save's bytes alone takes {cat_wall:.1f} s wall / {cat_cpu:.1f} CPU-s, "
          f"against the 2 s goal; last-good --jobs 1 spends {jobs1_cpu / cat_cpu:.2f}x cat's CPU")  # fmt: skip


def _size(n: int) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _step(name: str) -> int:
    return int(name.removeprefix("global_step"))


def peak_rss(args: list[str]) -> int:
    """Peak resident set of one child process, in KiB, as /usr/bin/time -v reports it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.run(["/usr/bin/time", "-v", *args], capture_output=True, text=True, cwd=REPO, env=env)
    line = next(x for x in proc.stderr.splitlines() if "Maximum resident set size" in x)
    return int(line.rsplit(":", 1)[1])


def memory_flat(model: str, ranks: int) -> None:
    """Peak RSS of last-good (plain, JSON, JSON --all) on runs of 10 to 160 saves: flat in their number."""
    print(f"peak RSS (/usr/bin/time -v), runs of N checkpoints x {ranks} rank files ({model}):")
    rows = []
    for checkpoints in (10, 40, 160):
        with tempfile.TemporaryDirectory(prefix="bench-last-good-rss-") as tmp:
            run = build(Path(tmp), model, checkpoints, ranks)
            peaks = {name: peak_rss(command) for name, command in commands_for(run, model).items()}
            rows.append(peaks)
            print(f"  {checkpoints:4d} saves: " + "   ".join(f"{n} {kb / 1024:6.1f} MiB" for n, kb in peaks.items()))
    print("  160 saves against 10: " + ", ".join(f"{n} {rows[-1][n] / rows[0][n]:.2f}x" for n in rows[0]))


if __name__ == "__main__":
    sys.exit(main())
