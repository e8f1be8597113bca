"""Listing a 50,000-tensor safetensors file: ckinspect's header reader against what a user would run.

    python bench/safetensors_listing.py [--tensors N] [--keep]

Each contender runs in a fresh process (imports included, as a user pays them), side by side in this
one run; prints wall time, peak RSS and the ratio to ckinspect. The file goes under /tmp and is
deleted afterwards unless --keep.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CONTENDERS = {
    "ckinspect open_checkpoint": (
        "from ckinspect.formats import open_checkpoint\n"
        "c = open_checkpoint(PATH)\n"
        "rows = [(t.name, t.dtype, t.shape) for t in c.tensors]\n"
    ),
    "safetensors safe_open (Rust, no torch)": (
        "from safetensors import safe_open\n"
        "with safe_open(PATH, framework='numpy') as f:\n"
        "    rows = [(k, f.get_slice(k).get_dtype(), f.get_slice(k).get_shape()) for k in f.keys()]\n"
    ),
    "torch + safetensors.torch.load_file": (
        "from safetensors.torch import load_file\n"
        "d = load_file(PATH)\n"
        "rows = [(k, v.dtype, tuple(v.shape)) for k, v in d.items()]\n"
    ),
}

TIMED = (
    "import sys, time\n"
    "PATH = sys.argv[1]\n"
    "start = time.perf_counter()\n"
    "{body}"
    "elapsed = time.perf_counter() - start\n"
    "assert len(rows) == int(sys.argv[2]), len(rows)\n"
    # VmHWM belongs to this exec'd image; ru_maxrss would include the parent's peak before exec
    "hwm = next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1]\n"
    "print(elapsed, hwm)\n"
)


def make_file(path: Path, n: int) -> None:
    import torch
    from safetensors.torch import save_file

    save_file(
        {f"model.layers.{i // 10}.p{i % 10}.weight": torch.zeros(2, 2, dtype=torch.bfloat16) for i in range(n)}, path
    )


def run(body: str, path: Path, n: int) -> tuple[float, float, float]:
    """(process wall time, time from first import to listed, peak RSS in MB)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", TIMED.format(body=body), str(path), str(n)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    wall = time.perf_counter() - start
    inside, rss_kb = out.stdout.split()
    return wall, float(inside), int(rss_kb) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=50_000)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--make", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.make:
        return make_file(Path(args.make[0]), int(args.make[1]))
    path = Path(tempfile.gettempdir()) / f"ckinspect-bench-{args.tensors}.safetensors"
    if not path.exists():  # in a child, so this process never holds torch
        subprocess.run([sys.executable, __file__, "--make", str(path), str(args.tensors)], check=True)
    try:
        print(f"{args.tensors:,} tensors, {path.stat().st_size / 1e6:.1f} MB, fresh process each (best of 3)")
        results = {name: min(run(body, path, args.tensors) for _ in range(3)) for name, body in CONTENDERS.items()}
        base = results["ckinspect open_checkpoint"][0]
        for name, (wall, inside, rss) in results.items():
            print(
                f"  {name:40s} {wall:6.2f} s process ({inside:5.2f} s import+list)  {rss:5.0f} MB peak RSS"
                f"  {wall / base:5.1f}x ckinspect's time"
            )
    finally:
        if not args.keep:
            path.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
