"""`ckinspect diff A B --report` on two identical ~2 GiB checkpoints, against what a user would otherwise run.

    python bench/bench_diff.py                 # 2 GiB each, under a fresh /tmp folder, deleted afterwards
    python bench/bench_diff.py --gib 1 --keep --dir /scratch

Side by side in one run, each in a fresh process with a warm page cache:
  ckinspect diff A B --report      raw bytes compared with memcmp over mmap windows, two threads
  torch.load both + torch.equal    (weights_only=True, every tensor)
  cat A B > /dev/null              the speed of just reading both files
Prints seconds, GB/s (bytes of both files / wall time), peak RSS and ratios; checks issue 4's target
(>= 70% of cat's throughput, <= 256 MB peak RSS). Run by hand: needs 2x the size on disk and, for the
torch side, ~2x the size in memory. Not part of the test suite.

    python bench/bench_diff.py --tensors 10000,40000,160000,640000 [--previous DIR] [--dir D] [--quick-only]

Many small tensors instead (issue 26): two torch.save zips per size (bench/scale_sims.torch_zip: a model
and AdamW moments of 4x4 tensors; A and B saved apart, so the weights differ and the moments agree), and
per size, each a fresh process: `ckinspect diff --quick A B --report` against torch.load(mmap=True) of
both + names, dtypes, shapes, strides and the other values compared, and `ckinspect diff A B --report`
against torch.load of both + torch.equal per tensor and == on the rest. Each is run `--rounds` times (3),
ours and torch's interleaved round by round; printed per size: the median CPU seconds (user+sys) and the
range of the rounds, the median peak RSS (VmHWM) and RSS per tensor, bytes read (rchar), the growth
exponents of the CPU and RSS medians between consecutive sizes (1.0 = linear), ours and torch's, and
ours/torch. `--dir D` keeps the zips in D and re-uses them. `--previous DIR`: a checkout of an earlier
ckinspect (DIR/ckinspect) measured beside this one, interleaved, with the ratio this/previous; then also the
diff's own part alone, this tree and the previous one: fresh processes that list both sides (untimed) and time
one `--quick` compare, as the command runs it.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GIB = 1 << 30
MIB = 1 << 20

# What a user would otherwise run: load both, then compare what the diff compares.
TORCH_STATE_DICTS = r"""
def leaves(node, prefix=""):
    if isinstance(node, torch.Tensor):
        yield prefix, node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from leaves(v, f"{prefix}.{k}")
    elif isinstance(node, (list, tuple)):
        for i, v in enumerate(node):
            yield from leaves(v, f"{prefix}.{i}")
    else:
        yield prefix, node
"""
TORCH_EQUAL = (
    "import sys, torch"
    + TORCH_STATE_DICTS
    + r"""
a = torch.load(sys.argv[1], weights_only=True, map_location="cpu")
b = torch.load(sys.argv[2], weights_only=True, map_location="cpu")
ta, tb = ({k: v for k, v in leaves(x) if isinstance(v, torch.Tensor)} for x in (a, b))
same = ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)
sys.exit(0 if same else 1)
"""
)


@dataclass
class Run:
    label: str
    wall: float
    peak_rss: int  # bytes
    returncode: int
    cpu: float = 0.0  # user + system seconds of the process


def write_resume(path: Path, size_bytes: int, seed: int = 0) -> int:
    """A resume-shaped file: fp32 weights plus AdamW exp_avg and exp_avg_sq (a third each), step and RNG.

    Filled from a 64 MiB pool of random normals at random offsets: real-looking values (so the value
    scan does its real work) without paying for 2 GiB of random generation.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    pool = torch.randn(16 * MIB, generator=gen)
    dim = 1024
    per_layer = 12 * dim * dim * 4
    layers = max(1, round(size_bytes / 3 / per_layer))

    def filled(*shape: int) -> torch.Tensor:
        n = 1
        for s in shape:
            n *= s
        out = torch.empty(n)
        done = 0
        while done < n:
            start = int(torch.randint(0, pool.numel() // 2, (1,), generator=gen))
            k = min(n - done, pool.numel() - start)
            out[done : done + k] = pool[start : start + k]
            done += k
        return out.view(*shape)

    model: dict[str, torch.Tensor] = {}
    for i in range(layers):
        for name in ("wq", "wk", "wv", "wo"):
            model[f"layers.{i}.attn.{name}.weight"] = filled(dim, dim)
        model[f"layers.{i}.mlp.w1.weight"] = filled(4 * dim, dim)
        model[f"layers.{i}.mlp.w2.weight"] = filled(dim, 4 * dim)
        model[f"layers.{i}.attn_norm.weight"] = torch.ones(dim)
    state = {}
    for idx, p in enumerate(model.values()):
        state[idx] = {
            "step": torch.tensor(100.0),
            "exp_avg": filled(*p.shape) * 1e-3,
            "exp_avg_sq": filled(*p.shape).abs() * 1e-6,
        }
    ckpt = {
        "model": model,
        "optimizer": {"state": state, "param_groups": [{"lr": 1e-3, "params": list(range(len(model)))}]},
        "step": 100,
        "epoch": 0,
        "world_size": 1,
        "rng": {"torch": torch.get_rng_state()},
    }
    torch.save(ckpt, path)
    return path.stat().st_size


TIME = "/usr/bin/time"  # GNU time: peak RSS of the command itself, not of our (forked) interpreter


def run(label: str, cmd: list[str], env: dict[str, str] | None = None, expect: int | None = 0) -> Run:
    """Wall time, CPU time and peak RSS of one fresh process."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as stats:
        wrapped = [TIME, "-q", "-o", stats.name, "-f", "%M %U %S", *cmd] if os.path.exists(TIME) else cmd
        started = time.perf_counter()
        proc = subprocess.run(wrapped, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        wall = time.perf_counter() - started
        fields = stats.read().split() if wrapped is not cmd else []
    if expect is not None and proc.returncode != expect:
        raise SystemExit(f"{label}: exit {proc.returncode} (expected {expect})\n{proc.stderr.decode(errors='replace')}")
    rss_kb, user, system = (
        (int(fields[-3]), float(fields[-2]), float(fields[-1])) if len(fields) >= 3 else (0, 0.0, 0.0)
    )
    return Run(label, wall, rss_kb * 1024, proc.returncode, user + system)


def write_in_child(path: Path, size_bytes: int) -> int:
    """Write the checkpoint from a separate process, so this one never holds torch or the tensors."""
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import bench_diff; "
        f"bench_diff.write_resume(__import__('pathlib').Path({str(path)!r}), {size_bytes})"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    return path.stat().st_size


def child_env() -> dict[str, str]:
    """This environment for the measured children, but with bytecode caching on, as in a user's Python:
    with PYTHONDONTWRITEBYTECODE set, every run compiled ckinspect's modules again (~0.17 s a process)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def best(runs: list[Run]) -> Run:
    return min(runs, key=lambda r: r.wall)


def table(rows: list[Run], nbytes: int, reference: Run) -> str:
    lines = [f"{'method':<34} {'seconds':>8} {'GB/s':>7} {'CPU s':>7} {'peak RSS':>10} {'vs cat':>7}"]
    for r in rows:
        gbs = nbytes / r.wall / 1e9
        ratio = reference.wall / r.wall
        lines.append(
            f"{r.label:<34} {r.wall:>8.3f} {gbs:>7.2f} {r.cpu:>7.2f} {r.peak_rss / MIB:>8.0f} MB {ratio:>6.0%}"
        )
    return "\n".join(lines)


TORCH_QUICK = (
    "import torch" + TORCH_STATE_DICTS,
    "a, b = (dict(leaves(torch.load(p, mmap=True, weights_only=True))) for p in sys.argv[1:3])\n"
    "def form(v):\n"
    "    return (v.dtype, v.shape, v.stride()) if isinstance(v, torch.Tensor) else v\n"
    "same = a.keys() == b.keys() and all(form(a[k]) == form(b[k]) for k in a)",
)
TORCH_FULL = (
    "import torch" + TORCH_STATE_DICTS,
    "a, b = (dict(leaves(torch.load(p, weights_only=True))) for p in sys.argv[1:3])\n"
    "def same(x, y):\n"
    "    if isinstance(x, torch.Tensor):\n"
    "        return isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x, y)\n"
    "    return x == y\n"
    "changed = [k for k in a if k not in b or not same(a[k], b[k])] + [k for k in b if k not in a]",
)
DIFF_REPORT = "try:\n    main(['diff', *sys.argv[1:3], '--report'{}])\nexcept SystemExit:\n    pass"
# The diff's own part: both sides listed first (not timed: the wrapper's `in_call` is the compare alone), with the
# collector paused as the command pauses it, then `--quick`'s compare once, as the command runs it
COMPARE_QUICK = (
    "import gc\ngc.disable()\nfrom ckinspect.api import compare, open_checked\n"
    "a, b = (open_checked(p, structure_only=True) for p in sys.argv[1:3])",
    "compare(a, b, quick=True)",
)
CKINSPECT_QUICK = ("from ckinspect.cli import main", DIFF_REPORT.format(", '--quick'"))
CKINSPECT_FULL = ("from ckinspect.cli import main", DIFF_REPORT.format(""))


def _exponent(now: float, before: float, n: int, m: int) -> str:
    return f"{math.log(now / before) / math.log(n / m):.2f}" if before > 0 and now > 0 else "-"


def _median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _spread(runs: list[dict[str, float]]) -> str:
    """The CPU median of the rounds and their range: `6.46 (6.1-7.0)`."""
    cpus = [r["cpu"] for r in runs]
    return f"{statistics.median(cpus):.2f} ({min(cpus):.2f}-{max(cpus):.2f})"


def _rounds(kinds: dict[str, tuple[tuple[str, str], Path, int]],
            pair: tuple[Path, Path]) -> dict[str, list[dict[str, float]]]:  # fmt: skip
    """Each kind measured its number of times, interleaved round by round (ours, torch, ... then again), so
    a change of load moves them alike; {name: [measure(), ...]}."""
    from bench.bench_scale import measure

    out: dict[str, list[dict[str, float]]] = {name: [] for name in kinds}
    for i in range(max(n for _, _, n in kinds.values())):
        for name, (kind, tree, n) in kinds.items():
            if i < n:
                out[name].append(measure(kind, pair, tree))
    return out


def many_tensors(
    sizes: list[int], folder: Path, previous: Path | None, rounds: int, torch_rounds: int, quick_only: bool = False
) -> None:
    """The --tensors table: diff --quick and the full diff against torch, per size (see the docstring)."""
    sys.path.insert(0, str(REPO))
    from bench import scale_sims

    kinds = [("diff --quick", CKINSPECT_QUICK, TORCH_QUICK), ("diff", CKINSPECT_FULL, TORCH_FULL)]
    if quick_only:  # the full diff's rows cost ~4x the --quick ones (and torch's ~3 CPU-min at 640k)
        kinds = kinds[:1]
    load = f"load average {os.getloadavg()[0]:.1f}"
    print(
        f"machine: {os.cpu_count()} cores, {load}; {rounds} rounds ({torch_rounds} of torch's), CPU medians", flush=True
    )
    head = (
        "| command | tensors | CPU s, median (range) | peak RSS | RSS / tensor | bytes read | CPU exp. | RSS exp. |"
        " torch CPU s, median (range) | torch RSS | torch CPU exp. | ours / torch CPU | ours / torch RSS |"
    )
    if previous:
        head += " previous CPU s | previous RSS | this / previous CPU |"
    print(f"\n{head}\n|{'---|' * (head.count('|') - 1)}", flush=True)
    last: dict[str, tuple[int, dict[str, float]]] = {}
    for n in sizes:
        pair = folder / f"a{n}.pt", folder / f"b{n}.pt"
        for path in pair:
            if not path.exists():
                scale_sims.torch_zip(path, n)
        size = pair[0].stat().st_size
        for label, ours_kind, torch_kind in kinds:
            trees = {"ours": (ours_kind, REPO, rounds), "torch": (torch_kind, REPO, torch_rounds)}
            if previous:
                trees["previous"] = (ours_kind, previous, rounds)
            got = _rounds(trees, pair)
            med = {name: {k: _median(runs, k) for k in ("cpu", "rss_kb", "rchar")} for name, runs in got.items()}
            ours, theirs = med["ours"], med["torch"]
            m, before = last.get(label, (0, {}))
            exps = [_exponent(med[who][k], before[who][k], n, m) if before else "-"
                    for who, k in (("ours", "cpu"), ("ours", "rss_kb"), ("torch", "cpu"))]  # fmt: skip
            last[label] = (n, med)
            line = (
                f"| `{label}` | {n:,} ({size / 1e6:,.0f} MB each) | {_spread(got['ours'])} | "
                f"{ours['rss_kb'] / 1024:,.0f} MiB | {ours['rss_kb'] * 1024 / n:,.0f} B | "
                f"{ours['rchar'] / 1e6:,.1f} MB | {exps[0]} | {exps[1]} | {_spread(got['torch'])} | "
                f"{theirs['rss_kb'] / 1024:,.0f} MiB | {exps[2]} | "
                f"{ours['cpu'] / theirs['cpu']:.2f}x | {ours['rss_kb'] / theirs['rss_kb']:.2f}x |"
            )
            if previous:
                old = med["previous"]
                line += f" {old['cpu']:.2f} | {old['rss_kb'] / 1024:,.0f} MiB | {ours['cpu'] / old['cpu']:.2f}x |"
            print(line, flush=True)
    if previous:
        compare_only(sizes, folder, previous, rounds)
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")


def compare_only(sizes: list[int], folder: Path, previous: Path, rounds: int) -> None:
    """The diff's own part of `--quick` (the compare after both listings), this tree against --previous: each
    round a fresh process per tree, interleaved; the CPU of the compare call alone (medians, range)."""
    head = (
        "| `diff --quick`'s compare alone | tensors | CPU s, median (range) | previous CPU s | this / previous "
        "| exp. | previous exp. |"
    )
    print(f"\n{head}\n|{'---|' * (head.count('|') - 1)}", flush=True)
    last: tuple[int, float, float] | None = None
    for n in sizes:
        pair = folder / f"a{n}.pt", folder / f"b{n}.pt"
        got = _rounds({"ours": (COMPARE_QUICK, REPO, rounds), "previous": (COMPARE_QUICK, previous, rounds)}, pair)
        calls = {name: [r["in_call"] for r in runs] for name, runs in got.items()}
        ours, old = statistics.median(calls["ours"]), statistics.median(calls["previous"])
        exps = (_exponent(ours, last[1], n, last[0]), _exponent(old, last[2], n, last[0])) if last else ("-", "-")
        last = (n, ours, old)
        spread = f"{ours:.2f} ({min(calls['ours']):.2f}-{max(calls['ours']):.2f})"
        print(f"| | {n:,} | {spread} | {old:.2f} | {ours / old:.2f}x | {exps[0]} | {exps[1]} |", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=2.0, help="size of each checkpoint (default 2)")
    ap.add_argument("--tensors", default="", help="instead: zips of this many small tensors (comma-separated)")
    ap.add_argument("--previous", type=Path, help="with --tensors: an earlier checkout measured beside this one")
    ap.add_argument("--dir", type=Path, help="where to write (default: a fresh folder in /tmp)")
    ap.add_argument("--repeat", type=int, default=3, help="best of N for cat and ckinspect (torch runs once)")
    ap.add_argument("--rounds", type=int, default=3, help="with --tensors: rounds per size (CPU medians)")
    ap.add_argument("--torch-rounds", type=int, default=0, help="with --tensors: torch's rounds (default: --rounds)")
    ap.add_argument("--keep", action="store_true", help="keep the files")
    ap.add_argument("--quick-only", action="store_true", help="with --tensors: only the `diff --quick` rows")
    args = ap.parse_args()

    if args.tensors and args.dir:  # the zips are kept in DIR and re-used by the next run (640k take minutes)
        args.dir.mkdir(parents=True, exist_ok=True)
        many_tensors(
            [int(n) for n in args.tensors.split(",")],
            args.dir,
            args.previous,
            args.rounds,
            args.torch_rounds or args.rounds,
            args.quick_only,
        )
        return 0
    folder = Path(tempfile.mkdtemp(prefix="ckinspect-bench-diff-", dir=args.dir))
    a, b = folder / "a.pth", folder / "b.pth"
    if args.tensors:
        try:
            many_tensors(
                [int(n) for n in args.tensors.split(",")],
                folder,
                args.previous,
                args.rounds,
                args.torch_rounds or args.rounds,
                args.quick_only,
            )
            return 0
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    try:
        t = time.perf_counter()
        size = write_in_child(a, int(args.gib * GIB))
        shutil.copyfile(a, b)
        print(f"wrote 2 x {size / GIB:.2f} GiB in {time.perf_counter() - t:.1f} s under {folder}", flush=True)
        nbytes = 2 * size
        for _ in range(2):  # warm the page cache for everyone alike
            run("warm", ["cat", str(a), str(b)])
        env = child_env()
        cat = best([run("cat A B > /dev/null", ["cat", str(a), str(b)]) for _ in range(args.repeat)])
        ours = best(
            [
                run(
                    "ckinspect diff A B --report",
                    [sys.executable, "-m", "ckinspect", "diff", str(a), str(b), "--report"],
                    env,
                )
                for _ in range(args.repeat)
            ]
        )
        torch_run = run("torch.load x2 + torch.equal", [sys.executable, "-c", TORCH_EQUAL, str(a), str(b)], env)
        print()
        print(table([ours, torch_run, cat], nbytes, cat))
        ratio = cat.wall / ours.wall
        print()
        print(
            f"ckinspect diff vs torch.load + torch.equal: {torch_run.wall / ours.wall:.1f}x faster, "
            f"{torch_run.peak_rss / max(ours.peak_rss, 1):.0f}x less memory"
        )
        ok = ratio >= 0.70 and ours.peak_rss <= 256 * MIB
        print(
            f"target (>= 70% of cat's throughput, <= 256 MB RSS): {'met' if ok else 'NOT met'} "
            f"({ratio:.0%} of cat, {ours.peak_rss / MIB:.0f} MB)"
        )
        return 0 if ok else 1
    finally:
        if args.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
