"""Real servers on 127.0.0.1 for the remote-path tests: an HTTP server that serves byte ranges and counts
what it sends, moto's S3 API server and the GCS emulator (separate processes), and a proxy that counts the
requests a client sends either of them, by kind."""

from __future__ import annotations

import collections
import contextlib
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_RANGE = re.compile(r"bytes=(\d+)-(\d*)")
_PIECE = 8 << 20  # the most of a body read and sent at once
# socketserver's default backlog is 5: a burst of side by side reads (a 256-rank save's files, 32 at once) on a busy
# machine overflowed it, the kernel dropped connections (SYN cookies), and the client's retries and fsspec's fallback
# from a failed HEAD to a whole GET were counted as requests the answer made (bench_scale --remote, 256 ranks: 798
# requests on a quiet machine, 2,698-2,974 under load). An object store's or a web server's backlog is hundreds.
BACKLOG = 512


class RangeServer(ThreadingHTTPServer):
    """Serves files of `root` with Range support; `bytes_sent` counts body bytes. Special names:
    `/denied/...` answers 403, `/stall/...` accepts and never answers, `/short/NAME` announces NAME's
    size but sends only half of any range (a truncated transfer).

    `by_name` counts the body bytes and requests of each file by its name.

    `throttle(n, status, retry_after)` answers the next n requests (None: every request) with `status`
    (429 or 503) and a Retry-After header, and an S3-style `SlowDown` error body, as S3 and CDNs do;
    `hits` counts every request the server saw, answered or not, so a test can prove retries are bounded;
    `kinds` counts them by what they asked (HEAD, a ranged GET, a whole-object GET, an index page).
    A body is read and sent in pieces of at most 8 MiB: a whole GET of a sparse file of terabytes (the
    benchmarks serve bench/scale_sims' saves) costs the server one piece of memory, not the file."""

    daemon_threads = True
    request_queue_size = BACKLOG

    def __init__(self, root: Path) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root
        self.bytes_sent = 0
        self.requests = 0
        self.by_name: dict[str, tuple[int, int]] = {}  # a file's name -> (bytes sent, requests) of its bodies
        self.hits = 0
        self.kinds: collections.Counter[str] = collections.Counter()
        self.throttled = 0
        self._throttle_left: int | None = 0
        self._throttle_status = 503
        self._retry_after: str | None = None
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.delay = 0.0  # seconds each answer waits: requests sent side by side are then seen in flight together
        self.gone: set[str] = set()  # paths whose GET answers 404 (listed and sized, then removed)
        self.in_flight = 0
        self.most_in_flight = 0  # the most requests answered at once since the counts were reset

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hangs up on a kept-alive connection is no error of the server's: socketserver would
        print its traceback on stderr, which the in-process CLI tests read as the command's."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]

    def throttle(self, n: int | None, status: int = 503, retry_after: str | None = "0") -> None:
        with self.lock:
            self._throttle_left, self._throttle_status, self._retry_after = n, status, retry_after

    def reset_counts(self) -> None:
        with self.lock:
            self.bytes_sent = self.requests = self.hits = self.most_in_flight = 0
            self.kinds.clear()

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        """One request being answered (after `delay`): counted in flight."""
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.delay:
                time.sleep(self.delay)
            yield
        finally:
            with self.lock:
                self.in_flight -= 1

    def arrive(self, kind: str) -> tuple[int, str | None] | None:
        """Count a request of `kind`; (status, Retry-After) when it is to be throttled."""
        with self.lock:
            self.hits += 1
            self.kinds[kind] += 1
            if self._throttle_left is not None and self._throttle_left <= 0:
                return None
            if self._throttle_left is not None:
                self._throttle_left -= 1
            self.throttled += 1
            return self._throttle_status, self._retry_after

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def count(self, n: int, last: bool = True, name: str = "") -> None:
        """`n` body bytes sent (of the file `name`); `last`: they end a request's body (one more request answered
        with one)."""
        with self.lock:
            self.bytes_sent += n
            self.requests += last
            sent, requests = self.by_name.get(name, (0, 0))
            self.by_name[name] = (sent + n, requests + last)


class _QuietHandler(BaseHTTPRequestHandler):
    """What both servers' handlers share: HTTP/1.1 kept-alive connections, TCP_NODELAY, no log lines."""

    protocol_version = "HTTP/1.1"
    # headers and body go out in separate writes: without TCP_NODELAY each kept-alive request waits out the
    # client's delayed ACK (~40 ms), which object stores' servers never make a client wait
    disable_nagle_algorithm = True

    def log_message(self, *args: object) -> None:  # quiet
        pass


class _Handler(_QuietHandler):
    server: RangeServer

    def _target(self) -> tuple[str, Path]:
        parts = self.path.lstrip("/").split("/", 1)
        mode = parts[0] if len(parts) == 2 and parts[0] in ("denied", "stall", "short") else ""
        name = parts[1] if mode else self.path.lstrip("/")
        return mode, self.server.root / name

    def do_HEAD(self) -> None:
        with self.server.answering():
            self._serve(body=False)

    def do_GET(self) -> None:
        with self.server.answering():
            self._serve(body=True)

    def _kind(self, body: bool) -> str:
        if not body:
            return "HEAD"
        if self.path.endswith("/"):
            return "index"
        return "GET range" if _RANGE.match(self.headers.get("Range", "")) else "GET whole"

    def _serve(self, body: bool) -> None:
        throttled = self.server.arrive(self._kind(body))
        if throttled is not None:
            self._refuse(*throttled, body=body)
            return
        mode, path = self._target()
        if mode == "stall":
            self.server.release.wait(60)
            return
        if mode == "denied":
            self._empty(403)
            return
        if path.is_dir() and self.path.endswith("/"):
            self._index(path, body)
            return
        if not path.is_file() or (body and self.path.lstrip("/") in self.server.gone):
            self._empty(404)
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
        self._send(path, start, length // 2 if mode == "short" else length)
        if mode == "short":
            self.close_connection = True

    def _refuse(self, status: int, retry_after: str | None, body: bool) -> None:
        """A throttled request: `status` (429 or 503), Retry-After, and S3's error body."""
        code = "SlowDown" if status == 503 else "TooManyRequests"
        text = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>" \
               "<Message>Please reduce your request rate.</Message></Error>"  # fmt: skip
        payload = text.encode() if body else b""
        self.send_response(status)
        if retry_after is not None:
            self.send_header("Retry-After", retry_after)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(payload) if body else len(text)))
        self.end_headers()
        self.wfile.write(payload)

    def _empty(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _send(self, path: Path, start: int, left: int) -> None:
        """`left` bytes of `path` from `start`, read and written in pieces of at most _PIECE bytes."""
        with open(path, "rb") as fh:
            fh.seek(start)
            while True:
                data = fh.read(min(left, _PIECE))
                left -= len(data)
                self.wfile.write(data)
                self.server.count(len(data), last=not data or not left, name=path.name)
                if not data or not left:
                    return

    def _index(self, folder: Path, body: bool) -> None:
        """A folder's index page, as static web servers give one: a link per file and per subfolder
        (what fsspec's HTTP backend lists a URL prefix by); its bytes are counted like any others."""
        links = [f'<a href="{p.name}/">{p.name}/</a>' if p.is_dir() else f'<a href="{p.name}">{p.name}</a>'
                 for p in sorted(folder.iterdir())]  # fmt: skip
        data = ("<html><body>\n" + "\n".join(links) + "\n</body></html>\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)
            self.server.count(len(data))


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


class CountingProxy(ThreadingHTTPServer):
    """A reverse proxy on 127.0.0.1 in front of a server (moto's S3, the GCS emulator) that counts every request
    a client sends through it by kind (`kind(method, path with query)`) and forwards it unchanged (its Host
    header too: S3's path-style addressing and signatures rest on it); answers come back whole."""

    daemon_threads = True
    request_queue_size = BACKLOG

    def __init__(self, upstream: str, kind: Callable[[str, str], str]) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        self.upstream = upstream.split("://", 1)[-1].rstrip("/")
        self.kind = kind
        self.kinds: collections.Counter[str] = collections.Counter()
        self.seen: list[tuple[str, str]] = []  # (kind, path) of each request, in order: what a failing test shows
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def reset_counts(self) -> None:
        with self.lock:
            self.kinds.clear()
            self.seen.clear()

    def counts(self) -> dict[str, int]:
        with self.lock:
            return dict(self.kinds)


class _Forward(_QuietHandler):
    server: CountingProxy

    def _forward(self) -> None:
        kind = self.server.kind(self.command, self.path)
        with self.server.lock:
            self.server.kinds[kind] += 1
            self.server.seen.append((kind, self.path))
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        upstream = http.client.HTTPConnection(self.server.upstream, timeout=60)
        try:
            upstream.request(self.command, self.path, body=body, headers=dict(self.headers.items()))
            answer = upstream.getresponse()
            data = answer.read()
        finally:
            upstream.close()
        self.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in ("transfer-encoding", "connection", "content-length", "date", "server"):
                self.send_header(name, value)
        # a HEAD's length is the object's, as the server said it; any other answer's is the body sent here
        self.send_header("Content-Length", answer.getheader("Content-Length", "0") if self.command == "HEAD"
                         else str(len(data)))  # fmt: skip
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward


def s3_kind(method: str, path: str) -> str:
    """An S3 API request by what it asks: LIST (a bucket's keys), GET or HEAD of an object, or its method."""
    key = path.split("?", 1)[0].strip("/").partition("/")[2]
    if method == "GET" and (not key or "list-type" in path):
        return "LIST"
    return method


def gcs_kind(method: str, path: str) -> str:
    """A GCS JSON API request by what it asks: LIST (a bucket's objects), GET (an object's bytes, alt=media),
    INFO (an object's record: its size), or its method."""
    route = path.split("?", 1)[0].rstrip("/")
    if method == "GET" and "alt=media" in path:
        return "GET"
    if method == "GET" and route.endswith("/o"):
        return "LIST"
    if method == "GET" and "/o/" in route:
        return "INFO"
    return method


@contextlib.contextmanager
def counting_proxy(upstream: str, kind: Callable[[str, str], str]) -> Iterator[CountingProxy]:
    proxy = CountingProxy(upstream, kind)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def moto_s3(auth_after: int | None = None) -> Iterator[dict[str, str]]:
    """moto's S3 API server in its own process on 127.0.0.1; yields the env a client needs (fake credentials).

    `auth_after=N`: moto checks credentials against its IAM after the first N requests (its
    INITIAL_NO_AUTH_ACTION_COUNT), so the fake credentials fill buckets and are then denied (403)."""
    port = free_port()
    server_env = dict(os.environ)
    if auth_after is not None:
        server_env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(auth_after)
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=server_env,
    )
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
    }
    with _serving(proc, port, "moto server"):
        yield env


@contextlib.contextmanager
def _serving(proc: subprocess.Popen, port: int, name: str) -> Iterator[None]:
    """Wait (at most 60 s) until a server process accepts connections on `port`; stop it on exit."""
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start")
            time.sleep(0.1)
        yield
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


@contextlib.contextmanager
def gcs_emulator() -> Iterator[dict[str, str]]:
    """A Google Cloud Storage API server on 127.0.0.1 (gcp-storage-emulator, pure Python, in memory, its own
    process); yields the env a client needs. gcsfs finds it by STORAGE_EMULATOR_HOST; its zonal-bucket probe
    (gRPC, which the emulator does not serve) is switched off by gcsfs's own GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1", "--port", str(port),
         "--in-memory"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    env = {
        "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}",
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        "NO_GCE_CHECK": "true",  # google-auth: no probe of a metadata server that is not there
    }
    with _serving(proc, port, "the GCS emulator"):
        yield env


def put_gcs_objects(env: dict[str, str], bucket: str, files: dict[str, Path]) -> None:
    """Fill a GCS bucket through the JSON API (gcsfs, as an uploader would), anonymous against the emulator."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        from gcsfs.core import GCSFileSystem  # the plain client, whatever the environment was at gcsfs's import

        fs = GCSFileSystem(token="anon", project="test", skip_instance_cache=True)
        fs.mkdir(bucket)
        for key, path in files.items():
            fs.put_file(str(path), f"{bucket}/{key}")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def timeless(text: str, root: str, name: str = "ROOT") -> object:
    """A JSON report with `root` (a URL or a folder) written as `name` and the times left out (an object's time is
    its upload's): what a remote answer and the local one must both give."""
    data = json.loads(text.replace(root, name))

    def drop(node: object) -> object:
        if isinstance(node, dict):
            return {k: drop(v) for k, v in node.items() if k != "time"}
        if isinstance(node, list):
            return [drop(v) for v in node]
        return node

    return drop(data)
