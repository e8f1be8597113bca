"""The many-tensor listing: where its time goes, and how it grows from 50,000 to 640,000 tensors.

    python bench/bench_pickle_scan.py                       # 50k, 160k, 640k tensors; protocols 2 and 4
    python bench/bench_pickle_scan.py --tensors 50000 --protocols 2
    python bench/bench_pickle_scan.py --code /path/to/other/checkout   # time another tree's ckinspect
    python bench/bench_pickle_scan.py --dir D --keep                    # keep the files (then --reuse)
    python bench/bench_pickle_scan.py --versus /path/to/old/checkout    # also both trees interleaved

Each file is a torch.save zip (written by a child process) of N four-element float32 tensors, each its own
storage (the per-tensor overhead case). Per file, in fresh processes, each run once untimed (bytecode and
page cache warm) and then --rounds times, in turn:

- `ckinspect --report F --quick --format json` (the CI listing), on the compiled pickle pass
  (ckinspect/_native/pickle_walk.c, where built) and on the pure-Python path (CKINSPECT_PURE=1), and
  `torch.load(F, weights_only=True)` followed by a walk of the tensors (what a user runs without ckinspect):
  wall time and CPU (user + sys, from wait4), best of the rounds, and the ratios of the CPU times;
- inside one ckinspect process: CPU of the pickle scan (scan_stream of data.pkl), of the restricted
  unpickler (decode with the storage collector), of the compiled pass (scan and decode in one, as the
  reader runs it; nan where not built), of reading the zip directory, and of the whole reader
  (open_checkpoint, the listing the TUI shows; on the compiled pass where built), each the best of the rounds.

With --versus OLD, also `--report --quick --format json` by OLD and by --code in fresh processes interleaved (old,
new, then new, old) for --rounds rounds: the median CPU of each tree, and new/old; both must print the same report.

Then the growth exponent of each figure between each two consecutive sizes and between the smallest and the
largest N (1.0 is linear). The
machine's load is printed with the figures: ratios are measured side by side, absolute times are not
comparable across runs on a busy machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

WRITE = r"""
import sys, torch
n, path, protocol = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
torch.save({f"blocks.{i // 100}.p{i % 100}": torch.full((4,), float(i)) for i in range(n)}, path,
           pickle_protocol=protocol)
"""

TORCH_LISTING = r"""
import sys, warnings, torch
warnings.simplefilter("ignore")
obj = torch.load(sys.argv[1], weights_only=sys.argv[2] == "1", map_location="cpu")
print(sum(1 for v in obj.values() if isinstance(v, torch.Tensor)))
"""

# The parts of ckinspect's listing, each timed in one process (CPU seconds, best of `rounds`).
PARTS = r"""
import json, os, sys, time
from ckinspect.formats import open_checkpoint
from ckinspect.formats.pickle_findings import StorageCollector
from ckinspect.formats.pickle_scan import scan_stream
from ckinspect.formats.unpickler import native_scan_and_load, restricted_load
from ckinspect.io.reader import FileReader
from ckinspect.io.zipdir import read_directory, read_member

path, rounds = sys.argv[1], int(sys.argv[2])
def opened():
    fd = os.open(path, os.O_RDONLY)
    return fd, FileReader(fd, os.fstat(fd).st_size)

fd, reader = opened()
members, cd_start = read_directory(reader, 0, reader.size)
pkl = next(m for m in members if m.name.endswith("/data.pkl"))
data = read_member(reader, pkl, cd_start)
os.close(fd)

def best(fn):
    times = []
    for _ in range(rounds):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)

def directory():
    fd, reader = opened()
    read_directory(reader, 0, reader.size)
    os.close(fd)

def native():
    collector = StorageCollector()
    return native_scan_and_load(data, collector, storages=collector.native_storages())

scans = scan_stream(data)
print(json.dumps({
    "native": best(native) if native() is not None else float("nan"),
    "scan": best(lambda: scan_stream(data)),
    "unpickler": best(lambda: restricted_load(data, StorageCollector(), scan=scans[0])),
    "zip directory": best(directory),
    "reader": best(lambda: open_checkpoint(path)),
    "tensors": len(open_checkpoint(path).tensors),
}))
"""


def child_env(code: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(code)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall s, CPU s user + sys, stdout) of one child process. It runs in the temporary folder: `python -m` puts
    the working folder first on sys.path, which would shadow PYTHONPATH's tree with the one the bench started from."""
    import time

    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=tempfile.gettempdir(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read().decode() if proc.stdout else ""
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{argv[:4]} exited {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime, out


def versus(path: Path, old: Path, new: Path, rounds: int) -> dict[str, float]:
    """`--report --quick --format json` of `path` by two trees of ckinspect, fresh processes interleaved (old, new,
    then new, old): the median CPU of each; both must print the same report. (No peak RSS: Linux carries this
    process's own high-water mark into a child's ru_maxrss.)"""
    cli = [sys.executable, "-m", "ckinspect", "--report", str(path), "--quick", "--format", "json"]
    trees = {"old": child_env(old), "new": child_env(new)}
    cpu: dict[str, list[float]] = {"old": [], "new": []}
    outs = {name: timed(cli, env)[2] for name, env in trees.items()}  # untimed: bytecode and page cache warm
    assert outs["old"] == outs["new"], "the two trees print different reports"
    for i in range(rounds):
        for name in ("old", "new") if i % 2 == 0 else ("new", "old"):
            cpu[name].append(timed(cli, trees[name])[1])
    return {f"{name} cpu": statistics.median(values) for name, values in cpu.items()}


def best_of(argv: list[str], env: dict[str, str], rounds: int) -> tuple[float, float, str]:
    timed(argv, env)  # untimed: bytecode and page cache warm
    runs = [timed(argv, env) for _ in range(rounds)]
    return min(r[0] for r in runs), min(r[1] for r in runs), runs[-1][2]


def measure(path: Path, code: Path, rounds: int, torch_side: bool = True) -> dict[str, float]:
    env = child_env(code)
    cli = [sys.executable, "-m", "ckinspect", "--report", str(path), "--quick", "--format", "json"]
    wall, cpu, out = best_of(cli, env, rounds)
    _p_wall, pure_cpu, pure_out = best_of(cli, {**env, "CKINSPECT_PURE": "1"}, rounds)
    assert pure_out == out  # the compiled pass and the pure path: the same report
    listed = json.loads(out)["files"][0]["tensor_count"]
    _w, _c, parts_out = timed([sys.executable, "-c", PARTS, str(path), str(rounds)], env)
    parts = json.loads(parts_out)
    assert parts.pop("tensors") == listed
    if not torch_side:
        return {"cli wall": wall, "cli cpu": cpu, "pure cpu": pure_cpu, "torch wall": math.nan, "torch cpu": math.nan,
                **parts}  # fmt: skip
    # torch refuses protocol 4 with weights_only=True (WEIGHTS_ONLY_REFUSED): it is timed with False there
    safe = "1" if "_p2" in path.name else "0"
    t_wall, t_cpu, t_out = best_of([sys.executable, "-c", TORCH_LISTING, str(path), safe], env, rounds)
    assert int(t_out) == listed, (t_out, listed)
    return {"cli wall": wall, "cli cpu": cpu, "pure cpu": pure_cpu, "torch wall": t_wall, "torch cpu": t_cpu, **parts}


GROWN = ("cli cpu", "pure cpu", "native", "scan", "unpickler", "reader", "torch cpu", "old cpu", "new cpu")


def _bench_protocol(args: argparse.Namespace, folder: Path, protocol: int) -> None:
    """One row per size, then the growth exponent of each figure between the smallest and the largest."""
    figures: dict[int, dict[str, float]] = {}
    for n in args.tensors:
        path = folder / f"many_{n}_p{protocol}.pt"
        if not (args.reuse and path.exists()):
            subprocess.run([sys.executable, "-c", WRITE, str(n), str(path), str(protocol)], check=True,
                           env=child_env(args.code))  # fmt: skip
        figures[n] = f = measure(path, args.code, args.rounds, not args.no_torch)
        if args.versus:
            f.update(versus(path, args.versus, args.code, args.rounds))
            print(f"protocol {protocol}, {n:>7,} tensors, {args.rounds} rounds interleaved, median CPU-s: "
                  f"{args.versus} {f['old cpu']:.3f}, {args.code} {f['new cpu']:.3f}: "
                  f"new/old {f['new cpu'] / f['old cpu']:.2f}x", flush=True)  # fmt: skip
        print(f"protocol {protocol}, {n:>7,} tensors: report {f['cli wall']:.2f} s wall {f['cli cpu']:.2f} "
              f"CPU-s (pure path {f['pure cpu']:.2f}, pure/compiled {f['pure cpu'] / f['cli cpu']:.2f}x) | "
              f"torch.load {f['torch wall']:.2f} s wall {f['torch cpu']:.2f} CPU-s | "
              f"torch/ours CPU {f['torch cpu'] / f['cli cpu']:.2f}x | in-process CPU-s: compiled pass "
              f"{f['native']:.3f}, scan {f['scan']:.3f}, unpickler {f['unpickler']:.3f}, "
              f"zip directory {f['zip directory']:.3f}, reader {f['reader']:.3f}", flush=True)  # fmt: skip
    sizes = sorted(figures)
    pairs = list(zip(sizes, sizes[1:], strict=False))
    if len(sizes) > 2:
        pairs.append((sizes[0], sizes[-1]))
    for small, large in pairs:
        growth = {
            key: math.log(figures[large][key] / figures[small][key]) / math.log(large / small)
            for key in GROWN
            if key in figures[large]
            if not math.isnan(figures[large][key])
        }
        print(f"protocol {protocol}, growth exponent {small:,} -> {large:,} tensors: "
              + ", ".join(f"{k} {v:.2f}" for k, v in growth.items()))  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, nargs="+", default=[50_000, 160_000, 640_000])
    parser.add_argument("--protocols", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--code", type=Path, default=REPO, help="the ckinspect checkout to time (default: this one)")
    parser.add_argument("--dir", type=Path)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--reuse", action="store_true", help="time files a --keep run left in --dir")
    parser.add_argument("--no-torch", action="store_true", help="time ckinspect only (e.g. two checkouts' code)")
    parser.add_argument("--versus", type=Path, help="another checkout (its C built) timed beside --code, interleaved")
    args = parser.parse_args()
    folder = args.dir or Path(tempfile.mkdtemp(prefix="ckinspect-bench-pickle-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; code: {args.code}")
    try:
        for protocol in args.protocols:
            _bench_protocol(args, folder, protocol)
    finally:
        if not (args.keep or args.reuse):  # files a --keep run left for --reuse stay for the next one
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
