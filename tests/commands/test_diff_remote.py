"""`ckinspect diff` with URLs on either side (a real HTTP range server and moto's S3 server on 127.0.0.1),
and the commands that write refusing a URL in one line. The verdict is the one the same files give on disk."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO, run_cli
from tests.helpers.remote_servers import moto_s3, put_objects

pytestmark = pytest.mark.remote

STRAIGHT, RESUMED, STOPPED = "straight-60/tiny_resume.pth", "resumed-60/tiny_resume.pth", "stopped-30/tiny_resume.pth"


@pytest.fixture
def server(samples_server):
    return samples_server


def _diff_json(a: str, b: str, env: dict[str, str] | None = None):
    proc = run_cli("diff", a, b, "--report", "--format", "json", env=env)
    return proc, (json.loads(proc.stdout)["diff"] if proc.stdout else None)


def test_a_url_against_a_local_file_gives_the_local_verdict(server):
    local, local_diff = _diff_json(f"samples/{STRAIGHT}", f"samples/{RESUMED}")
    proc, diff = _diff_json(f"{server.url}/{STRAIGHT}", f"samples/{RESUMED}")
    assert proc.returncode == local.returncode == 0, proc.stderr
    assert diff["identical"] is True and diff["same"] == local_diff["same"] == 83
    assert diff["a"] == f"{server.url}/{STRAIGHT}"


def test_two_urls_that_differ(server):
    local, local_diff = _diff_json(f"samples/{STRAIGHT}", f"samples/{STOPPED}")
    proc, diff = _diff_json(f"{server.url}/{STRAIGHT}", f"{server.url}/{STOPPED}")
    assert proc.returncode == local.returncode == 1, proc.stderr
    assert diff["identical"] is False
    assert diff["changed"] == local_diff["changed"] and diff["metadata_changed"] == local_diff["metadata_changed"]


def test_a_missing_url_in_a_diff_is_one_line_and_exit_2(server):
    proc = run_cli("diff", f"{server.url}/gone.pth", f"samples/{STOPPED}", "--report")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"ckinspect: {server.url}/gone.pth: not found (no such object)\n"


def test_an_s3_object_against_a_local_file():
    with moto_s3() as env:
        put_objects(env, "ckpts", {"run/a.pth": REPO / "samples" / STRAIGHT})
        same, diff = _diff_json("s3://ckpts/run/a.pth", f"samples/{RESUMED}", env=env)
        other, _ = _diff_json(f"samples/{STOPPED}", "s3://ckpts/run/a.pth", env=env)
    assert same.returncode == 0 and diff["identical"] is True, same.stderr
    assert other.returncode == 1, other.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ("repair", "URL/stopped-30/"),
            "repair moves and rewrites files in a local folder; a remote path is read-only",
        ),
        (("salvage", "URL/stopped-30/tiny.pth", "OUT"), "salvage reads every byte of a damaged file from disk"),
        (("convert", "URL/stopped-30/tiny.pth", "OUT"), "convert reads local files; download it first"),
        (("convert", "samples/stopped-30/tiny.pth", "URL/out.pth"), "the output must be a local path"),
        (("salvage", "samples/stopped-30/tiny.pth", "s3://b/out.pth"), "the output must be a local path"),
        (("watch", "URL/stopped-30/", "--report", "--once"), "watch follows the saves of a local folder"),
    ],
)
def test_commands_that_write_refuse_a_url_in_one_line(server, tmp_path, args, says):
    argv = [a.replace("URL", server.url).replace("OUT", str(tmp_path / "out.pth")) for a in args]
    before = server.hits
    proc = run_cli(*argv)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and says in lines[0], proc.stderr
    assert server.hits == before  # refused before anything is read
    assert list(tmp_path.iterdir()) == []  # and nothing written
