"""Remote paths against real servers on 127.0.0.1: an HTTP server that serves byte ranges and counts the
bytes it sends, and moto's S3 API server (fake credentials in the environment). Listing a large
checkpoint reads a small fraction of it; bad remote input gives one line and exit 2, and nothing hangs."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from tests.conftest import run_cli_process
from tests.helpers.remote_servers import moto_s3, put_objects, range_server

pytestmark = pytest.mark.remote

MIB = 1 << 20


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("remote")
    g = torch.Generator().manual_seed(0)
    big = {f"layers.{i}.weight": torch.randn(2 * MIB, generator=g) for i in range(16)}  # 16 x 8 MiB = 128 MiB
    big["step"] = torch.tensor(12)
    torch.save(big, root / "big.pth")
    small = {"w": torch.randn(64, 32, generator=g), "bad": torch.tensor([1.0, float("nan")])}
    torch.save(small, root / "small.pth")
    from safetensors.torch import save_file

    save_file({"a": torch.randn(50, 7, generator=g), "b": torch.ones(9)}, root / "w.safetensors")
    data = (root / "small.pth").read_bytes()
    (root / "cut.pth").write_bytes(data[: len(data) * 3 // 4])
    return root


def report(url: str, *extra: str, env: dict[str, str] | None = None):
    return run_cli_process("--report", url, "--format", "json", *extra, env=env, timeout=180)


def test_listing_a_large_remote_checkpoint_reads_a_small_fraction_of_it(files):
    size = (files / "big.pth").stat().st_size
    local = json.loads(report(str(files / "big.pth"), "--quick").stdout)["files"][0]
    with range_server(files) as server:
        proc = report(f"{server.url}/big.pth", "--quick")
        sent = server.bytes_sent
    assert proc.returncode == 0, proc.stderr
    remote = json.loads(proc.stdout)["files"][0]
    assert remote["path"] == f"{server.url}/big.pth"
    for key in ("format", "file_bytes", "tensor_count", "tensor_bytes", "groups", "findings", "metadata"):
        assert remote[key] == local[key], key
    assert 0 < sent < size // 200  # the end record, the directory, the pickle and 4 KiB per local header


def test_many_small_pieces_are_read_side_by_side_in_few_requests(files):
    """`read_ranges` (an optimizer's per-parameter step counters): the bytes a local read gives, pieces
    close together in one request, a piece past the object's end cut short as a local read cuts it."""
    from ckinspect.io.folders import opened

    data = (files / "big.pth").read_bytes()
    size = len(data)
    wanted = [(size - 10, 20), (0, 8), (100, 4), (5 * MIB, 8), (5 * MIB + 64, 8), (size + 5, 3), (7, 0)]
    with opened(files / "big.pth") as local:
        assert local.read_ranges(wanted) == [data[o : o + n] for o, n in wanted]
    with range_server(files) as server, opened(f"{server.url}/big.pth") as remote:
        before = server.requests
        got = remote.read_ranges(wanted)
        requests = server.requests - before
    assert got == [data[o : o + n] for o, n in wanted]
    assert requests == 3  # the file's start, the two pieces at 5 MiB, its end


def test_a_full_remote_report_scans_values_and_finds_what_a_local_one_finds(files):
    with range_server(files) as server:
        proc = report(f"{server.url}/small.pth")
    assert proc.returncode == 1, proc.stderr
    found = json.loads(proc.stdout)["files"][0]["findings"]
    assert [f["code"] for f in found] == ["NONFINITE"] and found[0]["tensor"] == "bad"


def test_a_remote_safetensors_file_lists_from_its_header(files):
    with range_server(files) as server:
        proc = report(f"{server.url}/w.safetensors", "--quick")
        sent = server.bytes_sent
    assert proc.returncode == 0, proc.stderr
    entry = json.loads(proc.stdout)["files"][0]
    assert entry["format"] == "safetensors" and entry["tensor_count"] == 2
    assert sent <= 2 * 4096  # the first block: length prefix and header


def test_a_truncated_remote_object_is_corrupt_like_a_local_one(files):
    with range_server(files) as server:
        proc = report(f"{server.url}/cut.pth", "--quick")
    assert proc.returncode == 1, proc.stderr
    assert "CORRUPT" in {f["code"] for f in json.loads(proc.stdout)["files"][0]["findings"]}


@pytest.mark.parametrize(
    ("where", "says"),
    [
        ("missing.pth", "not found (no such object)"),
        ("denied/small.pth", "access denied (HTTP 403)"),
        ("short/big.pth", "the transfer was cut short"),
        ("stall/small.pth", "timed out after 1 s"),
    ],
)
def test_bad_remote_input_is_one_line_and_exit_2(files, where, says):
    env = {"CKINSPECT_REMOTE_TIMEOUT": "1", "CKINSPECT_REMOTE_RETRIES": "1"}
    with range_server(files) as server:
        proc = report(f"{server.url}/{where}", "--quick", env=env)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0] == f"ckinspect: {server.url}/{where}: " + lines[0].split(f"{where}: ", 1)[1]
    assert says in lines[0] and "Traceback" not in proc.stderr


def test_listing_never_imports_fsspec_for_a_local_path(files):
    code = (
        "import sys; from ckinspect.cli import main; main(['--report', '--quick', sys.argv[1]]); "
        "print('fsspec' in sys.modules, 'torch' in sys.modules)"
    )
    import subprocess

    out = subprocess.run([sys.executable, "-c", code, str(files / "small.pth")], capture_output=True, text=True)
    assert out.stdout.strip().splitlines()[-1] == "False False"


# ---------------------------------------------------------------- S3: moto's server, real S3 API calls


@pytest.fixture(scope="module")
def s3(files):
    with moto_s3() as env:
        put_objects(env, "ckpts", {"run/small.pth": files / "small.pth", "run/w.safetensors": files / "w.safetensors"})
        yield env


def test_s3_objects_report_like_local_files(files, s3):
    proc = report("s3://ckpts/run/small.pth", env=s3)
    assert proc.returncode == 1, proc.stderr
    remote = json.loads(proc.stdout)["files"][0]
    local = json.loads(report(str(files / "small.pth")).stdout)["files"][0]
    assert remote["path"] == "s3://ckpts/run/small.pth"
    for key in ("format", "file_bytes", "tensor_count", "tensor_bytes", "findings"):
        assert remote[key] == local[key], key
    proc = report("s3://ckpts/run/w.safetensors", "--quick", env=s3)
    assert proc.returncode == 0 and json.loads(proc.stdout)["files"][0]["tensor_count"] == 2


def test_s3_missing_object_and_wrong_credentials_are_one_line_and_exit_2(s3):
    missing = report("s3://ckpts/run/nothing.pth", env=s3)
    assert (
        missing.returncode == 2
        and missing.stderr.strip() == "ckinspect: s3://ckpts/run/nothing.pth: not found (no such object)"
    )
    no_bucket = report("s3://no-such-bucket/x.pth", env=s3)
    assert no_bucket.returncode == 2 and len(no_bucket.stderr.strip().splitlines()) == 1
