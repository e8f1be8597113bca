"""`ckinspect last-good s3://...` on runs of 10, 40 and 160 saves in moto's S3: requests against the parts read.

    python bench/bench_s3_last_good.py [--checkpoints 10,40,160] [--ranks 8] [--layout deepspeed|hf]

Each run is bench_last_good's DeepSpeed-shaped run (8 rank files and the model states per save; the
newest lost a rank file, so the answer needs two saves: 17 parts), or with `--layout hf` HF Trainer
folders as tests/analysis/runs/test_runs.py writes them (`checkpoint-N/`: model.safetensors,
optimizer.pt, scheduler.pt, 2 rng_state_K.pth, trainer_state.json; the newest lost rng_state_1.pth),
uploaded with boto3 to moto's S3 API server (the one the tests use), served here in a thread behind a
WSGI layer that counts every request by kind (LIST, HEAD, GET) and the body bytes sent. Each row is a
fresh `ckinspect` process (s3fs, as a user runs it). Printed per run length: requests of each kind,
bytes sent, and requests per part the answer reads (`last-good`, `--format json`: the same parts,
whatever the run's length) against `--all` (every part of the run). Listing the prefix is one LIST per
1,000 keys (S3's page); the rest must not grow with the run. Run by hand; not in the suite.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_last_good import make_run  # noqa: E402

from tests.helpers.remote_servers import free_port  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


class Counting:
    """WSGI middleware: every request counted by kind, and the bytes of every response body."""

    def __init__(self, app) -> None:
        self.app = app
        self.counts: collections.Counter[str] = collections.Counter()
        self.bytes_sent = 0
        self.lock = threading.Lock()

    def reset(self) -> None:
        with self.lock:
            self.counts.clear()
            self.bytes_sent = 0

    def __call__(self, environ, start_response):
        method, query = environ["REQUEST_METHOD"], environ.get("QUERY_STRING", "")
        key = environ.get("PATH_INFO", "").strip("/").partition("/")[2]
        kind = "LIST" if method == "GET" and (not key or "list-type" in query) else method
        body = self.app(environ, start_response)
        chunks = list(body)
        with self.lock:
            self.counts[kind] += 1
            self.bytes_sent += sum(len(c) for c in chunks)
        return chunks


def serve_moto() -> tuple[Counting, str, object]:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    class Quiet(MotoRequestHandler):
        def log_request(self, *args, **kwargs) -> None:  # one line a request: thousands of them
            pass

    app = Counting(DomainDispatcherApplication(create_backend_app))
    port = free_port()
    server = make_server("127.0.0.1", port, app, True, request_handler=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return app, f"http://127.0.0.1:{port}", server


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoints", default="10,40,160")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--layout", choices=["deepspeed", "hf"], default="deepspeed")
    args = ap.parse_args()
    counter, endpoint, server = serve_moto()
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": endpoint}  # fmt: skip
    child_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | env
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-s3-last-good-") as tmp:
            for n in (int(x) for x in args.checkpoints.split(",")):
                run = make_run(Path(tmp) / f"n{n}", n, args.ranks) if args.layout == "deepspeed" else hf_run(tmp, n)
                files = {f"run{n}/{p.relative_to(run).as_posix()}": p for p in sorted(run.rglob("*")) if p.is_file()}
                _put(env, files)
                url = f"s3://runs/run{n}/"
                newest = sorted((p for p in run.iterdir() if p.is_dir()), key=_step)[-2:]
                needed = sum(1 for p in files.values() if p.parent in newest)  # the newest save and the answer
                for label, flags in [("last-good", []), ("last-good --format json", ["--format", "json"]),
                                     ("last-good --all --format json", ["--all", "--format", "json"]),
                                     ("last-good --quick", ["--quick"])]:  # fmt: skip
                    counter.reset()
                    cmd = [sys.executable, "-m", "ckinspect", "last-good", url, *flags]
                    proc = subprocess.run(cmd, env=child_env, capture_output=True, text=True, cwd=REPO)
                    if proc.returncode != 0:
                        raise SystemExit(f"{label}: exit {proc.returncode}: {proc.stderr[-800:]}")
                    parts = len(files) if "--all" in flags else needed
                    rows.append((n, len(files), label, dict(counter.counts), counter.bytes_sent, parts))
    finally:
        server.shutdown()  # type: ignore[attr-defined]
    shape = f"{args.ranks} rank files + model states" if args.layout == "deepspeed" else "6 HF Trainer files"
    print(f"\n{args.layout} runs of N saves x ({shape}) in moto's S3 on 127.0.0.1 "
          f"(load average {os.getloadavg()[0]:.1f})\n")  # fmt: skip
    print(f"{'saves':>5} {'objects':>7}  {'command':<31} {'LIST':>5} {'HEAD':>5} {'GET':>6} {'other':>5} "
          f"{'bytes sent':>12} {'parts read':>10} {'requests/part':>13}")  # fmt: skip
    for n, objects, label, counts, sent, parts in rows:
        other = sum(v for k, v in counts.items() if k not in ("LIST", "HEAD", "GET"))
        total = sum(counts.values())
        print(f"{n:>5} {objects:>7}  {label:<31} {counts.get('LIST', 0):>5} {counts.get('HEAD', 0):>5} "
              f"{counts.get('GET', 0):>6} {other:>5} {sent:>12,} {parts:>10} {total / parts:>13.1f}")  # fmt: skip
    return 0


def _step(folder: Path) -> int:
    return int(folder.name.removeprefix("global_step").removeprefix("checkpoint-"))


def hf_run(tmp: str, n: int) -> Path:
    from tests.analysis.runs.test_runs import hf_checkpoint

    run = Path(tmp) / f"hf{n}"
    for k in range(1, n + 1):
        hf_checkpoint(run, 10 * k, files=("rng_state_1.pth",) if k == n else ())
    return run


def _put(env: dict[str, str], files: dict[str, Path]) -> None:
    """One bucket `runs` for every run (created once)."""
    import boto3

    client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")  # fmt: skip
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket="runs")
    for key, path in files.items():
        client.upload_file(str(path), "runs", key)


if __name__ == "__main__":
    sys.exit(main())
