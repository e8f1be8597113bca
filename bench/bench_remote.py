"""Listing a remote checkpoint by range requests vs downloading it first, over HTTP on 127.0.0.1.

    python bench/bench_remote.py                 # ~2 GiB resume-shaped checkpoint under a fresh /tmp folder
    python bench/bench_remote.py --file F.pth    # an existing checkpoint (kept)

A range server (tests/helpers/remote_servers.py, the one the tests start) serves the file and counts
the body bytes it sends. Rows: `ckinspect --report --quick URL` (range requests), and what a user
would otherwise run: download the file (one streamed GET, as curl -O does) and then list the local copy.
(fsspec's own `get` is not the baseline: its size probe is a second full GET, which would double the
download's bytes and flatter the ratio.) Printed:
bytes transferred, requests, seconds, and the ratios. Target (issue 14): a 2 GiB checkpoint lists with
at most 2 MB transferred. Loopback has no latency or bandwidth limit, so the time ratio understates
what a real network gives; the byte ratio does not depend on it. Run by hand; not in the suite.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_diff import GIB, child_env, write_in_child  # noqa: E402

from tests.helpers.remote_servers import range_server  # noqa: E402

DOWNLOAD_THEN_LIST = r"""
import shutil, subprocess, sys, urllib.request
with urllib.request.urlopen(sys.argv[1]) as response, open(sys.argv[2], "wb") as out:
    shutil.copyfileobj(response, out, 1 << 20)
sys.exit(subprocess.run([sys.executable, "-m", "ckinspect", "--report", "--quick", "--format", "json", sys.argv[2]],
                        stdout=subprocess.DEVNULL).returncode)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--file", type=Path)
    ap.add_argument("--dir", type=Path)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="ckinspect-bench-remote-", dir=args.dir))
    src = args.file or folder / "resume.pth"
    try:
        if not args.file:
            write_in_child(src, int(args.gib * GIB))
        size = src.stat().st_size
        env = child_env()
        rows = []
        with range_server(src.parent) as server:
            url = f"{server.url}/{src.name}"
            for label, cmd in [
                ("ckinspect --report --quick URL", [sys.executable, "-m", "ckinspect", "--report", "--quick",
                                                    "--format", "json", url]),
                ("download (one GET), then list", [sys.executable, "-c", DOWNLOAD_THEN_LIST, url,
                                                      str(folder / "copy.pth")]),
            ]:  # fmt: skip
                server.bytes_sent = server.requests = 0
                t = time.perf_counter()
                proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                if proc.returncode != 0:
                    raise SystemExit(f"{label}: exit {proc.returncode}: {proc.stderr[-500:]}")
                rows.append((label, server.bytes_sent, server.requests, time.perf_counter() - t))
        print(f"\ncheckpoint {size / GIB:.2f} GiB ({size:,} bytes), served over HTTP on 127.0.0.1\n")
        print(f"{'method':<36} {'bytes sent':>14} {'share':>8} {'requests':>9} {'seconds':>8}")
        for label, sent, requests, seconds in rows:
            print(f"{label:<36} {sent:>14,} {sent / size:>8.3%} {requests:>9} {seconds:>8.2f}")
        ours, theirs = rows
        print(f"\nbytes: {theirs[1] / max(ours[1], 1):,.0f}x fewer; time: {theirs[3] / ours[3]:.1f}x faster")
        ok = ours[1] <= 2_000_000
        print(f"target (2 GiB lists with <= 2 MB transferred): {ours[1] / 1e6:.2f} MB, {'met' if ok else 'NOT met'}")
        return 0 if ok else 1
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
