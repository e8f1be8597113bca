"""Full value scan (CRC of every storage + min/max/mean/std/NaN/Inf/fp16 range of every float tensor)
of a ~2 GiB resume-shaped checkpoint, against `cat FILE > /dev/null`, in fresh processes, warm cache.

    python bench/bench_scan.py                 # 2 GiB under a fresh /tmp folder, deleted afterwards
    python bench/bench_scan.py --gib 1 --keep --dir /scratch

Rows: the scan alone (open_checkpoint + scan_values in a fresh process: wall time, and the scan's own
GB/s) with the fast CRC-32 (ckinspect.io.crc) and again with zlib's (`CKINSPECT_CRC=zlib`, what the
scan did before), `ckinspect --report FILE` end to end, what a user would otherwise run
(`torch.load` + `isfinite().all()` per tensor, which checks no CRC) and cat. Checks issue 14's target
(the scan at >= 80% of cat's throughput on 2 cores). Run by hand; not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_diff import GIB, Run, best, child_env, run, table, write_in_child  # noqa: E402

TORCH_CHECK = r"""
import sys, torch
state = torch.load(sys.argv[1], weights_only=True, map_location="cpu")
def tensors(node):
    if isinstance(node, torch.Tensor):
        yield node
    elif isinstance(node, dict):
        for v in node.values():
            yield from tensors(v)
    elif isinstance(node, (list, tuple)):
        for v in node:
            yield from tensors(v)
bad = sum(int(not bool(t.isfinite().all())) for t in tensors(state) if t.is_floating_point())
sys.exit(0 if bad == 0 else 1)
"""

SCAN_ONLY = r"""
import json, sys, time
from pathlib import Path
from ckinspect.formats import open_checkpoint
from ckinspect.analysis.scan import scan_values
ckpt = open_checkpoint(Path(sys.argv[1]))
cpu = time.process_time()
result = scan_values(ckpt)
cpu = time.process_time() - cpu
from ckinspect.io.crc import CRC_IMPL
json.dump({"crc_impl": CRC_IMPL,
           "bytes": result.bytes_scanned, "seconds": result.seconds, "crc": result.crc_checked, "cpu": cpu,
           "findings": [f.code for f in result.findings]}, open(sys.argv[2], "w"))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--repeat", type=int, default=3, help="best of N")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--file", type=Path, help="scan this checkpoint instead of writing one (kept)")
    args = ap.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="ckinspect-bench-scan-", dir=args.dir))
    path = args.file or folder / "resume.pth"
    try:
        if args.file:
            size = path.stat().st_size
        else:
            t = time.perf_counter()
            size = write_in_child(path, int(args.gib * GIB))
            print(f"wrote {size / GIB:.2f} GiB in {time.perf_counter() - t:.1f} s under {folder}", flush=True)
        for _ in range(2):
            run("warm", ["cat", str(path)])
        env = child_env()
        out = folder / "scan.json"
        scans: list[tuple[Run, dict]] = []
        for _ in range(args.repeat):
            r = run("open_checkpoint + scan_values", [sys.executable, "-c", SCAN_ONLY, str(path), str(out)], env)
            scans.append((r, json.loads(out.read_text())))
        scan_run, inner = min(scans, key=lambda s: s[0].wall)
        scan_run.label = f"scan_values, CRC-32 by {inner['crc_impl']}"
        rows = [scan_run]
        zlib_env = dict(env, CKINSPECT_CRC="zlib")
        scan_cmd = [sys.executable, "-c", SCAN_ONLY, str(path), str(out)]
        zlib_runs = [run("scan_values, CRC-32 by zlib", scan_cmd, zlib_env) for _ in range(args.repeat)]
        rows.append(best(zlib_runs))
        rows.append(
            best(
                [
                    run(
                        "ckinspect --report FILE",
                        [sys.executable, "-m", "ckinspect", "--report", str(path)],
                        env,
                        expect=None,
                    )
                    for _ in range(args.repeat)
                ]
            )
        )
        torch_runs = [run("torch.load + isfinite per tensor", [sys.executable, "-c", TORCH_CHECK, str(path)], env)
                      for _ in range(args.repeat)]  # fmt: skip
        rows.append(best(torch_runs))
        cat = best([run("cat FILE > /dev/null", ["cat", str(path)]) for _ in range(args.repeat)])
        rows.append(cat)
        print()
        print(table(rows, size, cat))
        inner_gbs = inner["bytes"] / inner["seconds"] / 1e9
        print()
        print(
            f"scan_values itself: {inner['bytes'] / GIB:.2f} GiB in {inner['seconds']:.3f} s = {inner_gbs:.2f} GB/s, "
            f"{inner['cpu'] / inner['bytes'] * 1e9:.2f} CPU s per GB "
            f"({inner['crc']} CRCs checked, findings: {inner['findings'] or 'none'}; "
            f"load average {os.getloadavg()[0]:.1f})"
        )
        share = cat.wall / scan_run.wall
        print(f"speed-up of the fast CRC over zlib's: {rows[1].wall / scan_run.wall:.2f}x (wall), "
              f"{rows[1].cpu / max(scan_run.cpu, 1e-9):.2f}x (CPU)")  # fmt: skip
        print(f"vs torch.load + isfinite: {rows[3].wall / scan_run.wall:.2f}x faster")
        ok = share >= 0.8
        print(f"target (scan >= 80% of cat's throughput, 2 cores): {share:.0%}, {'met' if ok else 'NOT met'}")
        return 0 if ok else 1
    finally:
        if args.file:
            pass
        elif args.keep:
            print(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
