"""Real servers on 127.0.0.1 for the remote-path tests: an HTTP server that serves byte ranges and counts
what it sends, and moto's S3 API server (a separate process, moto_server)."""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


class RangeServer(ThreadingHTTPServer):
    """Serves files of `root` with Range support; `bytes_sent` counts body bytes. Special names:
    `/denied/...` answers 403, `/stall/...` accepts and never answers, `/short/NAME` announces NAME's
    size but sends only half of any range (a truncated transfer)."""

    daemon_threads = True

    def __init__(self, root: Path) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root
        self.bytes_sent = 0
        self.requests = 0
        self.lock = threading.Lock()
        self.release = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def count(self, n: int) -> None:
        with self.lock:
            self.bytes_sent += n
            self.requests += 1


class _Handler(BaseHTTPRequestHandler):
    server: RangeServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _target(self) -> tuple[str, Path]:
        parts = self.path.lstrip("/").split("/", 1)
        mode = parts[0] if len(parts) == 2 and parts[0] in ("denied", "stall", "short") else ""
        name = parts[1] if mode else self.path.lstrip("/")
        return mode, self.server.root / name

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        mode, path = self._target()
        if mode == "stall":
            self.server.release.wait(60)
            return
        if mode == "denied":
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if not path.is_file():
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        size = path.stat().st_size
        start, end = 0, size - 1
        match = _RANGE.match(self.headers.get("Range", ""))
        if match:
            start = int(match.group(1))
            end = min(size - 1, int(match.group(2))) if match.group(2) else size - 1
        length = max(0, end - start + 1)
        self.send_response(206 if match else 200)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(length))
        if match:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if not body:
            return
        with open(path, "rb") as fh:
            fh.seek(start)
            data = fh.read(length)
        if mode == "short":
            data = data[: len(data) // 2]
        self.wfile.write(data)
        self.server.count(len(data))
        if mode == "short":
            self.close_connection = True


@contextlib.contextmanager
def range_server(root: Path) -> Iterator[RangeServer]:
    server = RangeServer(root)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def moto_s3() -> Iterator[dict[str, str]]:
    """moto's S3 API server in its own process on 127.0.0.1; yields the env a client needs (fake credentials)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
    }
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("moto server did not start")
            time.sleep(0.1)
        yield env
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        if proc.poll() is None:
            proc.kill()


def put_objects(env: dict[str, str], bucket: str, files: dict[str, Path]) -> None:
    """Fill a bucket with real files through the S3 API (boto3, as any uploader would)."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_DEFAULT_REGION"],
    )
    client.create_bucket(Bucket=bucket)
    for key, path in files.items():
        client.upload_file(str(path), bucket, key)
