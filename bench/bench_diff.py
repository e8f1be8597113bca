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
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GIB = 1 << 30
MIB = 1 << 20

TORCH_EQUAL = r"""
import sys, torch
a = torch.load(sys.argv[1], weights_only=True, map_location="cpu")
b = torch.load(sys.argv[2], weights_only=True, map_location="cpu")
def tensors(node, prefix=""):
    if isinstance(node, torch.Tensor):
        yield prefix, node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from tensors(v, f"{prefix}.{k}")
    elif isinstance(node, (list, tuple)):
        for i, v in enumerate(node):
            yield from tensors(v, f"{prefix}.{i}")
ta, tb = dict(tensors(a)), dict(tensors(b))
same = ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)
sys.exit(0 if same else 1)
"""


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=2.0, help="size of each checkpoint (default 2)")
    ap.add_argument("--dir", type=Path, help="where to write (default: a fresh folder in /tmp)")
    ap.add_argument("--repeat", type=int, default=3, help="best of N for cat and ckinspect (torch runs once)")
    ap.add_argument("--keep", action="store_true", help="keep the files")
    args = ap.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="ckinspect-bench-diff-", dir=args.dir))
    a, b = folder / "a.pth", folder / "b.pth"
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
