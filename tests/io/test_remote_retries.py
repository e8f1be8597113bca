"""Throttling, denial and stalls against real servers on 127.0.0.1: the HTTP range server told to answer
429/503 (with Retry-After, and S3's `SlowDown` body), and moto's S3 server checking credentials. Retries
are bounded (the server's request count proves it), then one line and exit 2; nothing hangs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.helpers.remote_servers import moto_s3, put_objects

pytestmark = pytest.mark.remote

SAMPLE = "stopped-30/tiny.pth"


@pytest.fixture
def server(samples_server):
    return samples_server


def _one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.mark.parametrize(("status", "retries"), [(503, 3), (429, 1)])
def test_a_server_that_always_throttles_is_retried_a_bounded_number_of_times(server, status, retries):
    server.throttle(None, status, retry_after="0")
    url = f"{server.url}/{SAMPLE}"
    proc = run_cli("--report", "--quick", url, env={"CKINSPECT_REMOTE_RETRIES": str(retries)})
    assert proc.returncode == 2 and proc.stdout == ""
    assert _one_line(proc.stderr) == (
        f"ckinspect: {url}: the server kept throttling requests (HTTP {status}) after {retries} retries"
    )
    # fsspec asks for the size with a HEAD, then a GET when the HEAD fails: two requests per attempt
    assert server.hits == 2 * (retries + 1)


def test_throttling_that_stops_within_the_retries_gives_the_same_report_as_a_local_read(server):
    local = run_cli("--report", "--quick", "--format", "json", REPO / "samples" / SAMPLE)
    server.throttle(2, 503, retry_after="0")
    proc = run_cli("--report", "--quick", "--format", "json", f"{server.url}/{SAMPLE}")
    assert proc.returncode == local.returncode == 0, proc.stderr
    remote_entry, local_entry = json.loads(proc.stdout)["files"][0], json.loads(local.stdout)["files"][0]
    for key in ("format", "file_bytes", "tensor_count", "tensor_bytes", "groups", "findings"):
        assert remote_entry[key] == local_entry[key], key
    assert server.throttled == 2


def test_retries_zero_means_one_attempt(server):
    server.throttle(None, 503, retry_after="0")
    proc = run_cli("--report", "--quick", f"{server.url}/{SAMPLE}", env={"CKINSPECT_REMOTE_RETRIES": "0"})
    assert proc.returncode == 2 and "after 0 retries" in _one_line(proc.stderr)
    assert server.hits == 2


def test_s3_slowdown_is_retried_by_us_only_not_by_botocore_and_s3fs_as_well(server):
    """An S3 endpoint answering 503 SlowDown: botocore and s3fs make one attempt per call, so the number
    of requests is exactly the retries we promise plus one (not their product)."""
    server.throttle(None, 503, retry_after="0")
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": server.url,
        "CKINSPECT_REMOTE_RETRIES": "2",
    }
    proc = run_cli("--report", "--quick", "s3://stopped-30/tiny.pth", env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert _one_line(proc.stderr) == (
        "ckinspect: s3://stopped-30/tiny.pth: the server kept throttling requests (HTTP 503) after 2 retries"
    )
    assert server.hits == 3


def test_a_stalled_server_is_cut_by_the_timeout_on_every_attempt(server):
    url = f"{server.url}/stall/{SAMPLE}"
    proc = run_cli("--report", "--quick", url, env={"CKINSPECT_REMOTE_TIMEOUT": "0.5", "CKINSPECT_REMOTE_RETRIES": "1"})
    assert proc.returncode == 2
    assert _one_line(proc.stderr) == (
        f"ckinspect: {url}: timed out after 0.5 s waiting for the server (CKINSPECT_REMOTE_TIMEOUT)"
    )
    assert server.hits == 2 * 2  # HEAD and GET per attempt, two attempts


def test_credentials_in_a_url_never_reach_the_error_line(server):
    host = server.url.removeprefix("http://")
    url = f"http://alice:hunter2@{host}/denied/{SAMPLE}?X-Amz-Signature=deadbeef"
    proc = run_cli("--report", "--quick", url)
    line = _one_line(proc.stderr)
    assert proc.returncode == 2 and "hunter2" not in line and "deadbeef" not in line and "alice" not in line
    assert line == f"ckinspect: http://{host}/denied/{SAMPLE}?…: access denied (HTTP 403); check the " \
                   "credentials for this bucket or host"  # fmt: skip


# ---------------------------------------------------------------- S3: moto's server, credentials checked


def test_s3_denied_missing_and_truncated_objects(tmp_path: Path):
    data = (REPO / "samples" / SAMPLE).read_bytes()
    (tmp_path / "cut.pth").write_bytes(data[: len(data) * 3 // 4])
    with moto_s3() as env:
        put_objects(env, "ckpts", {"run/cut.pth": tmp_path / "cut.pth"})
        missing = run_cli("--report", "--quick", "s3://ckpts/run/gone.pth", env=env)
        assert missing.returncode == 2
        assert _one_line(missing.stderr) == "ckinspect: s3://ckpts/run/gone.pth: not found (no such object)"
        no_bucket = run_cli("--report", "--quick", "s3://no-such-bucket/x.pth", env=env)
        assert no_bucket.returncode == 2
        assert _one_line(no_bucket.stderr) == "ckinspect: s3://no-such-bucket/x.pth: not found (no such object)"
        # a truncated object is content, not a transfer failure: CORRUPT, as the same file on disk is
        cut = run_cli("--report", "--quick", "--format", "json", "s3://ckpts/run/cut.pth", env=env)
        assert cut.returncode == 1, cut.stderr
        assert "CORRUPT" in {f["code"] for f in json.loads(cut.stdout)["files"][0]["findings"]}


def test_s3_wrong_credentials_are_denied_in_one_line(tmp_path: Path):
    # moto checks every request against its IAM after the two that create the bucket and its object
    with moto_s3(auth_after=2) as env:
        put_objects(env, "locked", {"run/tiny.pth": REPO / "samples" / SAMPLE})
        proc = run_cli("--report", "--quick", "s3://locked/run/tiny.pth", env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert _one_line(proc.stderr) == (
        "ckinspect: s3://locked/run/tiny.pth: access denied (HTTP 403); check the credentials for this bucket or host"
    )
    assert "testing" not in proc.stderr  # the secret key (fake here) never appears
