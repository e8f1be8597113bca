"""Folders under a URL prefix (io.folders): `ckinspect last-good` of a run and `--report` of a folder, against
moto's S3 API server and the HTTP range server on 127.0.0.1. A run uploaded as it lies on disk (torch zips,
a DeepSpeed tag with a rank missing, an HF folder, a torn save, a truncated file) gives the same answer and
the same JSON as the folder itself; a missing bucket or prefix, a denied listing and a stalled server each
give one line and exit 2."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.analysis.runs.test_runs import ds_tag
from tests.conftest import REPO, run_cli
from tests.helpers.remote_servers import moto_s3, put_objects, range_server, timeless

pytestmark = pytest.mark.remote

SAMPLES = REPO / "samples"
MTIME = 1_700_000_000  # every local file's time: an object store's is its upload time, so the run's order
# must not hang on it (steps decide; equal steps fall back to the path, as upload order follows it)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, ckpts) -> Path:
    """A run folder as a trainer leaves it: resume files of several steps, a DeepSpeed run whose newest
    tag lacks a rank file, an HF Trainer folder, a save torn before its rename, a truncated file."""
    if not (SAMPLES / "stopped-30").is_dir():
        pytest.skip("samples/ missing (python -m trainer samples)")
    run = tmp_path_factory.mktemp("remote-run") / "run"
    for name in ("stopped-30", "straight-60", "interrupted"):
        shutil.copytree(SAMPLES / name, run / name)
    ds_tag(run / "ds", 10)
    (ds_tag(run / "ds", 20) / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    shutil.copytree(ckpts["hf_folder"], run / "hf" / "checkpoint-2")
    _sharded(run / "export")
    data = (SAMPLES / "stopped-30" / "tiny_resume.pth").read_bytes()
    (run / "torn").mkdir()
    (run / "torn" / "tiny_resume.pth.tmp").write_bytes(data[: len(data) // 2])
    (run / "cut").mkdir()
    (run / "cut" / "tiny_resume.pth").write_bytes(data[: len(data) * 3 // 4])
    for path in run.rglob("*"):
        os.utime(path, (MTIME, MTIME))
    return run


def _sharded(folder: Path) -> None:
    """A sharded safetensors set as `save_pretrained` writes it: an index naming two shards."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir()
    shards = {"model-00001-of-00002.safetensors": {"a.weight": torch.ones(4, 4)},
              "model-00002-of-00002.safetensors": {"b.weight": torch.zeros(3)}}  # fmt: skip
    weight_map = {}
    for name, tensors in shards.items():
        save_file(tensors, folder / name)
        weight_map.update(dict.fromkeys(tensors, name))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


@pytest.fixture(scope="module")
def s3(run_dir):
    with moto_s3() as env:
        files = {f"runs/exp1/{p.relative_to(run_dir).as_posix()}": p for p in sorted(run_dir.rglob("*")) if p.is_file()}
        put_objects(env, "ckpts", files)
        yield env


def _same(text: str, root: str) -> object:
    return timeless(text, root, "RUN")


def _one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_last_good_of_a_run_in_s3_is_the_one_on_disk(run_dir, s3):
    local = run_cli("last-good", run_dir)
    remote = run_cli("last-good", "s3://ckpts/runs/exp1/", env=s3)
    assert local.returncode == remote.returncode == 0, remote.stderr
    assert local.stdout == f"{run_dir}/straight-60/tiny_resume.pth\n"
    assert remote.stdout == "s3://ckpts/runs/exp1/straight-60/tiny_resume.pth\n"


@pytest.mark.parametrize("judged", [[], ["--all"]], ids=["the answer's", "all"])
def test_last_good_json_of_a_run_in_s3_matches_the_local_json(run_dir, s3, judged):
    local = run_cli("last-good", run_dir, "--format", "json", *judged)
    remote = run_cli("last-good", "s3://ckpts/runs/exp1", "--format", "json", *judged, env=s3)  # with or without /
    assert local.returncode == remote.returncode == 0, remote.stderr
    assert _same(remote.stdout, "s3://ckpts/runs/exp1") == _same(local.stdout, str(run_dir))
    if not judged:  # the checkpoints older than the answer were not needed: listed, not judged
        verdicts = {c["path"]: c["verdict"] for c in json.loads(remote.stdout)["run"]["checkpoints"]}
        assert verdicts["s3://ckpts/runs/exp1/hf/checkpoint-2"] == "not-judged"
        return
    verdicts = {c["path"]: c["verdict"] for c in json.loads(remote.stdout)["run"]["checkpoints"]}
    url = "s3://ckpts/runs/exp1"
    assert verdicts[f"{url}/ds/global_step20"] == "incomplete" and verdicts[f"{url}/ds/global_step10"] == "good"
    assert verdicts[f"{url}/torn/tiny_resume.pth"] == "incomplete"  # the save died before its rename
    assert verdicts[f"{url}/cut/tiny_resume.pth"] == "damaged"
    assert verdicts[f"{url}/hf/checkpoint-2"] == "not-resumable"  # no RNG state
    sizes = {c["path"]: c["size"] for c in json.loads(remote.stdout)["run"]["checkpoints"]}
    assert sizes[f"{url}/straight-60/tiny_resume.pth"] == (run_dir / "straight-60" / "tiny_resume.pth").stat().st_size


def test_a_folder_report_of_an_s3_prefix_is_the_local_folder_report(run_dir, s3):
    """Folder mode on a prefix: the same checkpoints found (suffix rules, the DeepSpeed tags' parts, the
    HF folder's files), each reported alike (the HF layout from trainer_state.json beside it, the tmp beside
    interrupted/tiny_resume.pth judged), and the same run view. One entry is the local report's alone: the
    save that died before its rename, which quotes what `ckinspect repair` would do on disk."""
    local = run_cli("--report", "--quick", "--format", "json", run_dir)
    remote = run_cli("--report", "--quick", "--format", "json", "s3://ckpts/runs/exp1/", env=s3)
    assert local.returncode == remote.returncode == 1, remote.stderr
    mine = _same(remote.stdout, "s3://ckpts/runs/exp1")
    theirs = _same(local.stdout, str(run_dir))
    assert isinstance(mine, dict) and isinstance(theirs, dict)
    on_disk_only = [f for f in theirs["files"] if f["path"] == "RUN/torn/tiny_resume.pth"]
    assert [f["code"] for f in on_disk_only[0]["findings"]] == ["LEFTOVER_TMP"]
    paths = [f["path"] for f in mine["files"]]
    assert paths == [f["path"] for f in theirs["files"] if f not in on_disk_only]
    assert "RUN/ds/global_step10/mp_rank_00_model_states.pt" in paths and "RUN/hf/checkpoint-2/optimizer.pt" in paths
    sharded = next(f for f in mine["files"] if f["path"] == "RUN/export/model.safetensors.index.json")
    assert sharded["format"] == "sharded" and sharded["tensor_count"] == 2 and sharded["findings"] == []
    assert mine["files"] == [f for f in theirs["files"] if f not in on_disk_only]
    interrupted = next(f for f in mine["files"] if f["path"] == "RUN/interrupted/tiny_resume.pth")
    assert [f["code"] for f in interrupted["findings"]] == ["LEFTOVER_TMP"]
    assert mine["runs"] == theirs["runs"]  # the run view: the same verdicts, read from the same parts
    assert mine["summary"]["files"] == theirs["summary"]["files"] - 1


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("s3://ckpts/runs/nothing/", "s3://ckpts/runs/nothing/: no such folder (nothing under this prefix)"),
        ("s3://no-such-bucket/run/", "s3://no-such-bucket/run/: no such folder (no such bucket or prefix)"),
    ],
)
def test_a_missing_prefix_or_bucket_is_one_line_and_exit_2(s3, url, says):
    for args in (("last-good", url), ("--report", "--quick", url)):
        proc = run_cli(*args, env=s3)
        assert proc.returncode == 2 and proc.stdout == ""
        assert _one_line(proc.stderr) == f"ckinspect: {says}"


def test_a_denied_listing_is_one_line_and_exit_2(run_dir):
    # moto checks every request against its IAM after the two that create the bucket and its object
    with moto_s3(auth_after=2) as env:
        put_objects(env, "locked", {"run/tiny_resume.pth": run_dir / "stopped-30" / "tiny_resume.pth"})
        proc = run_cli("last-good", "s3://locked/run/", env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert _one_line(proc.stderr) == (
        "ckinspect: s3://locked/run/: access denied (HTTP 403); check the credentials for this bucket or host"
    )


def test_a_run_over_http_index_pages_and_a_stalled_server(run_dir):
    """A static web server's index pages are a listing too; a server that stalls is cut by the timeout."""
    local = run_cli("last-good", run_dir, "--format", "json")
    with range_server(run_dir.parent) as server:
        remote = run_cli("last-good", f"{server.url}/run/", "--format", "json")
        env = {"CKINSPECT_REMOTE_TIMEOUT": "0.5", "CKINSPECT_REMOTE_RETRIES": "0"}
        stalled = run_cli("last-good", f"{server.url}/stall/run/", env=env)
        denied = run_cli("last-good", f"{server.url}/denied/run/")
    assert remote.returncode == 0, remote.stderr
    mine, theirs = _same(remote.stdout, f"{server.url}/run"), _same(local.stdout, str(run_dir))
    assert isinstance(mine, dict) and isinstance(theirs, dict)
    assert mine["run"]["last_good"] == theirs["run"]["last_good"] == "RUN/straight-60/tiny_resume.pth"
    # an index page gives no times: checkpoints whose step is unknown (weights files) are listed by path alone
    assert sorted(mine["run"]["checkpoints"], key=lambda c: c["path"]) == sorted(
        theirs["run"]["checkpoints"], key=lambda c: c["path"]
    )
    assert stalled.returncode == 2 and _one_line(stalled.stderr) == (
        f"ckinspect: {server.url}/stall/run/: timed out after 0.5 s waiting for the server (CKINSPECT_REMOTE_TIMEOUT)"
    )
    assert denied.returncode == 2 and _one_line(denied.stderr) == (
        f"ckinspect: {server.url}/denied/run/: access denied (HTTP 403); check the credentials for this bucket or host"
    )


def test_an_object_url_that_names_a_prefix_says_to_add_the_slash(s3):
    proc = run_cli("--report", "--quick", "s3://ckpts/runs/exp1", env=s3)
    assert proc.returncode == 2 and _one_line(proc.stderr) == (
        "ckinspect: s3://ckpts/runs/exp1: a folder (a prefix), not an object; end it with / to search it for "
        "checkpoints"
    )


# ---------------------------------------------------------------- gs://: a real GCS JSON API server


@pytest.fixture(scope="module")
def gcs(run_dir):
    pytest.importorskip("gcsfs")
    pytest.importorskip("gcp_storage_emulator")
    from tests.helpers.remote_servers import gcs_emulator, put_gcs_objects

    with gcs_emulator() as env:
        put_gcs_objects(env, "ckpts", {f"exp1/{p.relative_to(run_dir).as_posix()}": p
                                       for p in sorted(run_dir.rglob("*")) if p.is_file()})  # fmt: skip
        yield env


def test_gs_objects_and_prefixes_list_and_report_like_local_ones(run_dir, gcs):
    """A subprocess each: gcsfs picks its client class when it is first imported, from the environment."""
    from tests.conftest import run_cli_process

    one = run_cli_process("--report", "--quick", "--format", "json", "gs://ckpts/exp1/stopped-30/tiny_resume.pth",
                          env=gcs)  # fmt: skip
    local_one = run_cli("--report", "--quick", "--format", "json", run_dir / "stopped-30" / "tiny_resume.pth")
    assert one.returncode == local_one.returncode == 0, one.stderr
    assert _same(one.stdout, "gs://ckpts/exp1") == _same(local_one.stdout, str(run_dir))

    best = run_cli_process("last-good", "gs://ckpts/exp1/", "--format", "json", env=gcs)
    local = run_cli("last-good", run_dir, "--format", "json")
    assert best.returncode == 0, best.stderr
    assert _same(best.stdout, "gs://ckpts/exp1") == _same(local.stdout, str(run_dir))

    missing = run_cli_process("last-good", "gs://ckpts/nothing/", env=gcs)
    assert missing.returncode == 2 and _one_line(missing.stderr) == (
        "ckinspect: gs://ckpts/nothing/: no such folder (nothing under this prefix)"
    )
    gone = run_cli_process("--report", "gs://ckpts/exp1/gone.pth", env=gcs)
    assert (
        gone.returncode == 2
        and _one_line(gone.stderr) == "ckinspect: gs://ckpts/exp1/gone.pth: not found (no such object)"
    )


def test_a_lone_sharded_index_url_reads_its_shards(run_dir, tmp_path):
    """An index URL with no listing asks for each shard it names (one request each)."""
    shutil.copytree(run_dir / "export", tmp_path / "export")
    local = run_cli("--report", "--quick", "--format", "json", tmp_path / "export" / "model.safetensors.index.json")
    with range_server(tmp_path) as server:
        url = f"{server.url}/export/model.safetensors.index.json"
        one = run_cli("--report", "--quick", "--format", "json", url)
    assert one.returncode == local.returncode == 0, one.stderr
    assert _same(one.stdout, server.url) == _same(local.stdout, str(tmp_path))


@pytest.fixture(scope="module")
def dcp_run(ckpts, tmp_path_factory) -> Path:
    """Three DCP saves: a whole one, one whose data file is gone, one torn before .metadata's rename."""
    run = tmp_path_factory.mktemp("dcp-run") / "dcp"
    for name in ("step-2", "step-4", "step-6"):
        shutil.copytree(ckpts["dcp"], run / name)
    (next((run / "step-4").glob("__0_*.distcp"))).unlink()
    (run / "step-6" / ".metadata").rename(run / "step-6" / ".metadata.tmp")
    for path in run.rglob("*"):
        os.utime(path, (MTIME, MTIME))
    return run


@pytest.fixture(scope="module")
def dcp_s3(dcp_run):
    """The DCP run uploaded under s3://ckpts/dcp/ to its own moto server."""
    with moto_s3() as env:
        put_objects(env, "ckpts", {f"dcp/{p.relative_to(dcp_run).as_posix()}": p for p in dcp_run.rglob("*")
                                   if p.is_file()})  # fmt: skip
        yield env


@pytest.mark.parametrize("quick", [True, False], ids=["listing", "values"])
def test_remote_dcp_folders_report_like_the_local_ones(dcp_run, dcp_s3, quick):
    """DCP saves under a prefix are read by range requests, over HTTP index pages and from S3: the same
    tensors, values scanned, findings (MISSING_PARTS for a lost rank file, CORRUPT for a torn index) and
    exit status as the folder on disk."""
    args = ["--report", "--format", "json", *(["--quick"] if quick else [])]
    local = run_cli(*args, f"{dcp_run}/")
    assert local.returncode == 1, local.stderr
    expected = _same(local.stdout, str(dcp_run))
    codes = {e["path"]: sorted({f["code"] for f in e["findings"]}) for e in json.loads(local.stdout)["files"]}
    assert "MISSING_PARTS" in codes[f"{dcp_run}/step-4"] and "CORRUPT" in codes[f"{dcp_run}/step-6"]
    assert not {"CORRUPT", "MISSING_PARTS"} & set(codes[f"{dcp_run}/step-2"])
    with range_server(dcp_run) as server:
        over_http = run_cli(*args, f"{server.url}/")
    assert over_http.returncode == 1, over_http.stderr
    assert _same(over_http.stdout, server.url) == expected
    from_s3 = run_cli(*args, "s3://ckpts/dcp/", env=dcp_s3)
    assert from_s3.returncode == 1, from_s3.stderr
    assert _same(from_s3.stdout, "s3://ckpts/dcp") == expected


def test_last_good_of_a_dcp_run_in_s3_is_the_one_on_disk(dcp_run, dcp_s3):
    local = run_cli("last-good", dcp_run)
    assert local.returncode == 0 and local.stdout.strip() == str(dcp_run / "step-2"), local.stdout + local.stderr
    remote = run_cli("last-good", "s3://ckpts/dcp/", env=dcp_s3)
    assert remote.returncode == 0 and remote.stdout.strip() == "s3://ckpts/dcp/step-2", remote.stdout + remote.stderr


def test_diff_of_a_remote_dcp_folder_compares_its_values(dcp_run):
    """`diff URL/step-2/ LOCAL`: the folder URL is listed, then read as one DCP checkpoint and compared
    value by value; a prefix that is not there is one line and exit 2."""
    with range_server(dcp_run) as server:
        same = run_cli("diff", f"{server.url}/step-2/", dcp_run / "step-2", "--report")
        other = run_cli("diff", f"{server.url}/step-2/", dcp_run / "step-4", "--report")
        missing = run_cli("diff", f"{server.url}/nope/", dcp_run / "step-2", "--report")
    assert same.returncode == 0 and "identical: 21 tensors match bit for bit" in same.stdout, same.stdout + same.stderr
    assert other.returncode == 1, other.stdout + other.stderr
    assert missing.returncode == 2 and "no such folder" in _one_line(missing.stderr)
