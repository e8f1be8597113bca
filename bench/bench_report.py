"""`ckinspect --report --quick` against `torch.load(weights_only=True)` + listing, in fresh processes.

    python bench/bench_report.py                  # ~2 GiB resume file and a 50,000-tensor file
    python bench/bench_report.py --size 8         # ~8 GiB resume file
    python bench/bench_report.py --only big       # just the resume file
    python bench/bench_report.py --dir /scratch --keep
    python bench/bench_report.py --dir /scratch --reuse    # time files a --keep run left there

Writes the files under --dir (default: a fresh folder in /tmp), then runs three commands in fresh
processes: the JSON report, the default text report, and torch.load + listing. Each runs once
untimed (warm page cache and bytecode, as for an installed package), then --rounds times, the three
in turn within each round so that the machine's drift hits them alike. Prints best and median wall
time, peak RSS (wait4, per process; this parent stays small and torch-free since a child's peak
starts at its parent's size) and the median of the per-round speed-ups; checks that both sides
listed the same number of tensors and checks issue 3's targets on the JSON report (CI's format).
Deletes the files unless --keep. Run it by hand: it needs the disk space and a few GB of memory
for the torch.load side. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import random
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

# What a user runs without ckinspect: load everything (safely), then list names and shapes.
TORCH_LISTING = r"""
import sys, torch
obj = torch.load(sys.argv[1], weights_only=True, map_location="cpu")
def walk(node, prefix=""):
    if isinstance(node, torch.Tensor):
        print(prefix, str(node.dtype).replace("torch.", ""), tuple(node.shape), node.nbytes)
    elif isinstance(node, dict):
        for k, v in node.items():
            walk(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(node, (list, tuple)):
        for i, v in enumerate(node):
            walk(v, f"{prefix}.{i}" if prefix else str(i))
walk(obj)
"""

TARGETS = {"big": (40.0, 48.0), "many": (5.0, None)}  # (min speed-up, max peak RSS in MB)


@dataclass
class Run:
    wall: float
    peak_rss: int  # bytes
    returncode: int


# ---------------------------------------------------------------- writing the files


def write_resume(path: Path, size_bytes: int) -> int:
    """A resume-shaped file: fp32 transformer weights, AdamW exp_avg/exp_avg_sq, step, epoch, RNG.

    Weights and both moments are a third each, so the model is sized to size_bytes / 3. Tensors are
    torch.empty: untouched pages read as zeros, so writing costs disk, not memory.
    """
    import torch

    dim = 1024
    per_layer = 12 * dim * dim * 4  # wq wk wv wo (d x d) + w1 w2 (4d x d): 48 MiB in fp32
    vocab = 8192
    budget = size_bytes // 3 - vocab * dim * 4
    layers = max(1, round(budget / per_layer))
    model: dict[str, torch.Tensor] = {"tok_emb.weight": torch.empty(vocab, dim)}
    for i in range(layers):
        for name in ("wq", "wk", "wv", "wo"):
            model[f"layers.{i}.attn.{name}.weight"] = torch.empty(dim, dim)
        model[f"layers.{i}.mlp.w1.weight"] = torch.empty(4 * dim, dim)
        model[f"layers.{i}.mlp.w2.weight"] = torch.empty(dim, 4 * dim)
        model[f"layers.{i}.attn_norm.weight"] = torch.ones(dim)
        model[f"layers.{i}.mlp_norm.weight"] = torch.ones(dim)
    model["norm.weight"] = torch.ones(dim)
    model["lm_head.weight"] = model["tok_emb.weight"]  # tied, as in most small LMs
    params = list(dict.fromkeys(id(t) for t in model.values()))
    by_id = {id(t): t for t in model.values()}
    state = {
        i: {"step": torch.tensor(30.0), "exp_avg": torch.empty_like(by_id[p]), "exp_avg_sq": torch.empty_like(by_id[p])}
        for i, p in enumerate(params)
    }
    group = {
        "lr": 3e-4,
        "betas": (0.9, 0.95),
        "eps": 1e-8,
        "weight_decay": 0.1,
        "amsgrad": False,
        "maximize": False,
        "foreach": None,
        "capturable": False,
        "differentiable": False,
        "fused": None,
        "params": list(range(len(params))),
    }
    checkpoint = {
        "format": "ckinspect-trainer/1",
        "model": model,
        "optimizer": {"state": state, "param_groups": [group]},
        "step": 30,
        "epoch": 0,
        "world_size": 1,
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
        "config": {"dim": dim, "n_layers": layers, "vocab_size": vocab},
    }
    torch.save(checkpoint, path)
    return len(model) + 3 * len(state) + 1


def write_many(path: Path, count: int) -> int:
    """A state dict of `count` tiny tensors, each its own storage (the per-tensor overhead case)."""
    import torch

    sd = {f"blocks.{i // 100}.p{i % 100}": torch.full((4,), float(i)) for i in range(count)}
    torch.save(sd, path)
    return count


# ---------------------------------------------------------------- timing


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    # As installed: compiled bytecode is cached (pip compiles torch's; the first untimed run compiles ours).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_once(argv: list[str], sink: Path) -> Run:
    """One fresh process; wall time, and its peak RSS from wait4."""
    with open(sink, "wb") as out, open(sink.with_suffix(".err"), "wb") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=child_env(), cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        sys.exit(f"failed ({code}): {' '.join(argv)}\n{sink.with_suffix('.err').read_text()[-2000:]}")
    return Run(wall, usage.ru_maxrss * 1024, code)  # Linux reports KiB


def rounds(commands: dict[str, list[str]], count: int, folder: Path) -> dict[str, list[Run]]:
    """Each command once untimed, then `count` rounds running every command in turn, so a drift in
    the machine's speed hits all of them alike. Each command's output of the last round is kept in
    `folder/<label>.out`."""
    for label, argv in commands.items():
        run_once(argv, folder / f"{label}.out")
    runs: dict[str, list[Run]] = {label: [] for label in commands}
    for _ in range(count):
        for label, argv in commands.items():
            runs[label].append(run_once(argv, folder / f"{label}.out"))
    return runs


def own_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def warm(path: Path) -> None:
    """Read the file once so every command starts from the same (warm) page cache."""
    buffer = bytearray(MIB)  # small: this process's size is where each child's peak RSS starts
    with open(path, "rb", buffering=0) as handle:
        while handle.readinto(buffer):
            pass


def compare(label: str, path: Path, count: int, target: tuple[float, float | None]) -> bool:
    warm(path)
    folder = path.parent
    report = [sys.executable, "-m", "ckinspect", "--report", "--quick"]
    commands = {
        "json": [*report, "--format", "json", str(path)],
        "text": [*report, str(path)],
        "torch": [sys.executable, "-c", TORCH_LISTING, str(path)],
    }
    runs = rounds(commands, count, folder)
    listed = json.loads((folder / "json.out").read_text())["files"][0]["tensor_count"]
    torch_listed = len((folder / "torch.out").read_text().splitlines())
    if listed != torch_listed:
        sys.exit(f"ckinspect lists {listed} tensors, torch {torch_listed}: not the same listing")
    rows = {
        "json": "ckinspect --report --quick --format json",
        "text": "ckinspect --report --quick (text, default)",
        "torch": "torch.load(weights_only=True) + listing",
    }
    size = path.stat().st_size
    print(
        f"\n{label}: {path.name}, {size / GIB:.2f} GiB, {listed:,} tensors listed by both "
        f"({count} rounds, fresh processes, commands interleaved)"
    )
    print(f"  {'command':<44} {'best s':>8} {'median s':>9} {'peak RSS MB':>12}")
    for key, title in rows.items():
        walls = [r.wall for r in runs[key]]
        peak = max(r.peak_rss for r in runs[key])
        print(f"  {title:<44} {min(walls):>8.3f} {statistics.median(walls):>9.3f} {peak / 1e6:>12.1f}")
    ratios = {}
    for key in ("json", "text"):
        per_round = [t.wall / o.wall for t, o in zip(runs["torch"], runs[key], strict=True)]
        ratios[key] = statistics.median(per_round)
        spread = f"rounds {min(per_round):.1f}x to {max(per_round):.1f}x"
        print(f"  speed-up over torch, {key}: median {ratios[key]:.1f}x ({spread})")
    ours_peak = max(r.peak_rss for r in runs["json"])
    print(
        f"  peak RSS, torch / ckinspect json: {max(r.peak_rss for r in runs['torch']) / ours_peak:.1f}x "
        f"(this parent process: {own_rss() / 1e6:.0f} MB)"
    )
    min_ratio, max_rss = target
    ok = ratios["json"] >= min_ratio and (max_rss is None or ours_peak / 1e6 <= max_rss)
    goal = f">= {min_ratio:g}x faster (median)" + (f", <= {max_rss:g} MB peak RSS" if max_rss else "")
    print(f"  target, json {goal}: {'met' if ok else 'NOT met'}")
    return ok


def write_in_child(kind: str, path: Path, amount: int) -> int:
    """Write a file in its own process: this one stays small and torch-free, because a child's
    peak RSS (wait4) starts from its parent's size at fork."""
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import bench_report as b; "
        f"print(b.write_{kind}(__import__('pathlib').Path(sys.argv[1]), int(sys.argv[2])))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path), str(amount)], capture_output=True, text=True, check=True
    )
    return int(done.stdout.strip())


def ensure(kind: str, path: Path, amount: int, reuse: bool) -> None:
    if reuse and path.exists():
        print(f"using {path} ({path.stat().st_size / GIB:.2f} GiB) as it is")
        return
    started = time.perf_counter()
    write_in_child(kind, path, amount)
    print(f"wrote {path} ({path.stat().st_size / GIB:.2f} GiB) in {time.perf_counter() - started:.1f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="where to write the files (default: a new folder in /tmp)")
    parser.add_argument("--size", type=float, default=2.0, help="resume file size in GiB (default 2)")
    parser.add_argument("--tensors", type=int, default=50_000, help="tensor count of the many-tensor file")
    parser.add_argument("--only", choices=("big", "many"), help="run one of the two comparisons")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds; each runs every command once")
    parser.add_argument("--keep", action="store_true", help="keep the files afterwards")
    parser.add_argument("--reuse", action="store_true", help="use files already in --dir instead of writing them")
    args = parser.parse_args()

    folder = args.dir or Path(tempfile.mkdtemp(prefix="ckinspect-bench-", dir="/tmp"))
    folder.mkdir(parents=True, exist_ok=True)
    ok = True
    made: list[Path] = []
    try:
        if args.only in (None, "big"):
            path = folder / f"resume_{args.size:g}g.pth"
            made.append(path)
            ensure("resume", path, int(args.size * GIB), args.reuse)
            ok &= compare("resume file", path, args.rounds, TARGETS["big"])
        if args.only in (None, "many"):
            path = folder / f"many_{args.tensors}.pth"
            made.append(path)
            ensure("many", path, args.tensors, args.reuse)
            ok &= compare("many tensors", path, args.rounds, TARGETS["many"])
    finally:
        outputs = [folder / f"{label}.{ext}" for label in ("json", "text", "torch") for ext in ("out", "err")]
        for path in outputs + ([] if args.keep else made):
            path.unlink(missing_ok=True)
        if args.dir is None and not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
