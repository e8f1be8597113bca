"""CRC-32 implementations side by side: zlib (CPython's), zlib-ng's and ISA-L's Python bindings.

    python bench/bench_crc.py            # 256 MiB of random bytes, in the value scan's blocks (SCAN_BLOCK)
    python bench/bench_crc.py --mib 1024

Rows: GB/s on one thread and on two (each thread one half), and each as a ratio to zlib, which is
what the scan used before `ckinspect.io.crc`. Best of --repeat runs. Run by hand; not in the suite.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ckinspect.analysis.scan import SCAN_BLOCK  # noqa: E402
from ckinspect.io.crc import CRC_IMPL, available  # noqa: E402


def rate(crc, data: memoryview, threads: int, repeat: int) -> float:
    part = len(data) // threads

    def work(i: int) -> None:
        c = 0
        for s in range(i * part, (i + 1) * part, SCAN_BLOCK):
            c = crc(data[s : min(s + SCAN_BLOCK, (i + 1) * part)], c)

    best = float("inf")
    for _ in range(repeat):
        pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        t = time.perf_counter()
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        best = min(best, time.perf_counter() - t)
    return part * threads / best / 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    data = memoryview(os.urandom(args.mib << 20))
    impls = available()
    rows = {name: (rate(f, data, 1, args.repeat), rate(f, data, 2, args.repeat)) for name, f in impls.items()}
    base1, base2 = rows["zlib"]
    print(f"{'CRC-32':<10} {'1 thread':>10} {'vs zlib':>8} {'2 threads':>10} {'vs zlib':>8}")
    for name, (one, two) in rows.items():
        print(f"{name:<10} {one:>7.2f} GB/s {one / base1:>7.1f}x {two:>7.2f} GB/s {two / base2:>7.1f}x")
    print(f"this install's scan uses: {CRC_IMPL} (load average {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
