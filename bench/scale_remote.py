"""bench_scale's remote mode: the simulations served by URL, and the requests and bytes each answer costs.

- HTTP (`Http`): the tests' range server (tests/helpers/remote_servers.RangeServer) over the local sparse files,
  with index pages (what fsspec's HTTP backend lists a folder by). It reads only the ranges asked for (in 8 MiB
  pieces), so files of terabytes apparent are served as they are on disk; it counts every request by kind (HEAD,
  ranged GET, whole GET, index page) and every body byte it sends.
- S3 (`S3`): moto's S3 API server in this process, behind bench_s3_last_good's WSGI layer that counts requests by
  kind (LIST, HEAD, GET) and the body bytes sent. moto holds each object in memory or a temporary file (not
  sparse), so only small runs go there: bench_last_good.make_run's tiny DeepSpeed saves (~0.3 MB a save).

Each is a context manager; `url(path)` is the URL of a local file or folder (a folder's ends with `/`),
`reset()` clears the counts before a measured process and `counts()` reads them after it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class Http:
    """The range server over several roots, each served under its own name (/NAME/...): a folder of symlinks in
    a temporary directory, so a read-only root (another engineer's sims) is served as it is."""

    label = "HTTP"

    def __init__(self, roots: dict[str, Path]) -> None:
        self.roots = {name: Path(os.path.abspath(root)) for name, root in roots.items()}
        self.stack = contextlib.ExitStack()

    def __enter__(self) -> Http:
        sys.path.insert(0, str(REPO))
        from tests.helpers.remote_servers import range_server

        top = Path(tempfile.mkdtemp(prefix="bench-scale-http-"))
        self.stack.callback(shutil.rmtree, top, ignore_errors=True)
        for name, root in self.roots.items():
            (top / name).symlink_to(root, target_is_directory=True)
        self.server = self.stack.enter_context(range_server(top))
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    def url(self, path: Path) -> str:
        path = Path(os.path.abspath(path))
        for name, root in self.roots.items():
            if path.is_relative_to(root):
                rel = path.relative_to(root).as_posix()
                return f"{self.server.url}/{name}/{rel}" + ("/" if path.is_dir() else "")
        raise ValueError(f"{path} is under none of the served roots")

    def env(self) -> dict[str, str]:
        return {}

    def reset(self) -> None:
        self.server.reset_counts()

    def counts(self) -> dict:
        with self.server.lock:
            return {"requests": self.server.hits, "bytes_sent": self.server.bytes_sent,
                    "kinds": dict(self.server.kinds)}  # fmt: skip


class S3:
    """moto's S3 in this process (bench_s3_last_good.serve_moto), one bucket `runs`; `put(folder, prefix)` uploads
    a folder's files with boto3, `url(prefix)` is its s3:// folder URL."""

    label = "S3 (moto)"
    bucket = "runs"

    def __enter__(self) -> S3:
        sys.path.insert(0, str(REPO / "bench"))
        from bench_s3_last_good import serve_moto

        self.counter, endpoint, self.server = serve_moto()
        self._env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                     "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint}  # fmt: skip
        self.local: dict[str, Path] = {}
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()  # type: ignore[attr-defined]

    def put(self, folder: Path, prefix: str) -> str:
        """Upload every file under `folder` to `prefix/` (once); returns the prefix's URL."""
        from bench_s3_last_good import _put

        if prefix not in self.local:
            _put(self._env, {f"{prefix}/{p.relative_to(folder).as_posix()}": p for p in sorted(folder.rglob("*"))
                             if p.is_file()})  # fmt: skip
            self.local[prefix] = folder
        return f"s3://{self.bucket}/{prefix}/"

    def url(self, path: Path) -> str:
        path = Path(os.path.abspath(path))
        for prefix, folder in self.local.items():
            if path.is_relative_to(folder):
                rel = path.relative_to(folder).as_posix()
                tail = "/" if path.is_dir() else ""
                return f"s3://{self.bucket}/{prefix}/{rel}{tail}" if rel != "." else f"s3://{self.bucket}/{prefix}/"
        raise ValueError(f"{path} was not uploaded")

    def env(self) -> dict[str, str]:
        return self._env

    def reset(self) -> None:
        self.counter.reset()

    def counts(self) -> dict:
        with self.counter.lock:
            kinds = dict(self.counter.counts)
            return {"requests": sum(kinds.values()), "bytes_sent": self.counter.bytes_sent, "kinds": kinds}


def download_computed(files: list[Path]) -> dict:
    """What downloading `files` whole takes, from their sizes: one GET each, every byte (no process run: the
    files are terabytes apparent). Marked as computed in the row."""
    return {"requests": len(files), "bytes_sent": sum(f.stat().st_size for f in files),
            "kinds": {"GET whole": len(files)}, "computed": True, "cpu": float("nan"), "in_call": float("nan"),
            "rss_kb": 0, "rchar": 0}  # fmt: skip
