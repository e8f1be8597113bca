"""Peak memory of `ckinspect convert` and `ckinspect salvage` on a large checkpoint, against what a user
would otherwise run (torch.load, then torch.save / safetensors' save_file), in fresh processes.

    python bench/bench_stream.py                 # ~2 GiB resume-shaped checkpoint under a fresh /tmp folder
    python bench/bench_stream.py --gib 8         # the 8 GiB figure
    python bench/bench_stream.py --file F.pth    # an existing checkpoint (kept)

Rows: convert to .safetensors (no torch in the process), convert to .pth (torch imported: ~220 MB of
the figure is torch's own import), salvage of the same file cut at 90% to .pth and to .safetensors,
and the torch.load routes. Printed: seconds, peak RSS (GNU time's %M) and RSS as a share of the input.
Checks issue 14's target: at most 256 MB peak RSS for every ckinspect row. Run by hand; not in the suite.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_diff import GIB, MIB, Run, child_env, run, write_in_child  # noqa: E402

TORCH_TO_SAFETENSORS = r"""
import sys, torch
from safetensors.torch import save_file
state = torch.load(sys.argv[1], weights_only=True, map_location="cpu")
flat = {}
def walk(node, prefix):
    if isinstance(node, torch.Tensor):
        flat[prefix] = node.contiguous().clone()
    elif isinstance(node, dict):
        for k, v in node.items():
            walk(v, f"{prefix}.{k}" if prefix else str(k))
walk(state, "")
save_file(flat, sys.argv[2])
"""
TORCH_RESAVE = "import sys, torch; torch.save(torch.load(sys.argv[1], weights_only=True), sys.argv[2])"
TARGET = 256 * 1000 * 1000  # "256 MB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--file", type=Path)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument(
        "--ours-only", action="store_true", help="skip the torch.load routes (at 8 GiB they need ~20 GB of RAM)"
    )
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="ckinspect-bench-stream-", dir=args.dir))
    src = args.file or folder / "resume.pth"
    try:
        if not args.file:
            t = time.perf_counter()
            write_in_child(src, int(args.gib * GIB))
            print(f"wrote {src.stat().st_size / GIB:.2f} GiB in {time.perf_counter() - t:.1f} s under {folder}")
        size = src.stat().st_size
        broken = folder / "broken.pth"
        with open(src, "rb") as fin, open(broken, "wb") as fout:
            left = int(size * 0.9)
            while left:
                block = fin.read(min(left, 64 * MIB))
                fout.write(block)
                left -= len(block)
        env = child_env()
        ck = [sys.executable, "-m", "ckinspect"]
        rows: list[tuple[Run, bool]] = []
        for label, cmd, ours in [
            ("ckinspect convert -> .safetensors", [*ck, "convert", str(src), str(folder / "a.safetensors")], True),
            ("ckinspect convert -> .pth", [*ck, "convert", str(src), str(folder / "a.pth")], True),
            ("ckinspect salvage (cut) -> .pth", [*ck, "salvage", str(broken), str(folder / "s.pth")], True),
            ("ckinspect salvage (cut) -> .safetensors", [*ck, "salvage", str(broken), str(folder / "s.safetensors")],
             True),
            ("torch.load + save_file", [sys.executable, "-c", TORCH_TO_SAFETENSORS, str(src), str(folder / "t.st")],
             False),
            ("torch.load + torch.save", [sys.executable, "-c", TORCH_RESAVE, str(src), str(folder / "t.pth")], False),
        ]:  # fmt: skip
            if args.ours_only and not ours:
                continue
            rows.append((run(label, cmd, env, expect=None), ours))
            for out in folder.glob("*"):  # keep the disk from filling: outputs are not compared here
                if out not in (src, broken):
                    out.unlink()
        print(f"\ninput {size / GIB:.2f} GiB ({size / 1e6:,.0f} MB); load average {os.getloadavg()[0]:.1f}\n")
        print(f"{'command':<42} {'seconds':>8} {'peak RSS':>10} {'RSS / input':>12}")
        for r, _ours in rows:
            print(f"{r.label:<42} {r.wall:>8.1f} {r.peak_rss / 1e6:>7.0f} MB {r.peak_rss / size:>11.1%}")
        worst = max(r.peak_rss for r, ours in rows if ours)
        print(f"\nlargest ckinspect peak: {worst / 1e6:.0f} MB", end="")
        if not args.ours_only:
            theirs = min(r.peak_rss for r, ours in rows if not ours)
            print(f"; torch.load routes use {theirs / worst:.1f}x that or more", end="")
        print()
        ok = worst <= TARGET
        print(f"target (<= 256 MB peak RSS for convert and salvage): {'met' if ok else 'NOT met'}")
        return 0 if ok else 1
    finally:
        if args.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
