"""`ckinspect --report --jobs N`: the same report byte for byte whether one process or a pool scans the parts
(the JSON report carries no timing field, so nothing is removed before comparing)."""

from __future__ import annotations

import json
import warnings

import pytest

from tests.helpers.shards import shard_name, write_set


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    import torch
    import torch.distributed.checkpoint as dcp

    root = tmp_path_factory.mktemp("jobs")
    found = {"clean": write_set(root / "clean"), "damaged": write_set(root / "damaged", damaged=True)}
    state = {f"layers.{i}.weight": torch.full((16, 16), float(i)) for i in range(8)}
    state["layers.3.weight"][0, 0] = float("nan")
    state["layers.6.weight"][1, 1] = float("inf")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled ... single process"
        dcp.save(state, storage_writer=dcp.FileSystemWriter(str(root / "dcp"), thread_count=4))
    found["dcp"] = root / "dcp"
    found["root"] = root
    return found


def _reports(run_cli, *args):
    """The JSON report and exit status with --jobs 1 and --jobs 2; asserts they are the same."""
    one = run_cli("--report", *args, "--format", "json", "--jobs", "1")
    two = run_cli("--report", *args, "--format", "json", "--jobs", "2")
    assert one.stderr == two.stderr == ""
    assert (one.returncode, one.stdout) == (two.returncode, two.stdout)
    return one.returncode, json.loads(one.stdout)


def test_damaged_shards_same_findings_on_one_and_two_processes(run_cli, sets):
    status, report = _reports(run_cli, sets["damaged"])
    assert status == 1
    findings = report["files"][0]["findings"]
    assert [f["code"] for f in findings] == ["CORRUPT", "CORRUPT", "NONFINITE", "FP16_OVERFLOW"]
    assert findings[0]["message"].startswith(f"shard {shard_name(1)}: {shard_name(1)}: no zip end-of-directory")
    assert findings[1]["message"].startswith(f"CRC mismatch in {shard_name(2)[:-4]}/data/0 (expected ")
    assert findings[1]["tensor"] == "layers.4.weight"
    assert findings[2]["message"].startswith("2 tensors named layers.*.weight: layers.0.weight: 1 NaN")
    assert findings[3]["tensor"] == "layers.5.weight"


def test_clean_shards(run_cli, sets):
    status, report = _reports(run_cli, sets["clean"])
    assert status == 0 and report["files"][0]["findings"] == []
    assert report["files"][0]["tensor_count"] == 8


def test_dcp_files_scanned_apart_merge_into_one_finding(run_cli, sets):
    assert len(list(sets["dcp"].glob("*.distcp"))) == 4
    status, report = _reports(run_cli, sets["dcp"])
    assert status == 1
    [nonfinite] = [f for f in report["files"][0]["findings"] if f["code"] == "NONFINITE"]
    assert nonfinite["message"] == (
        "2 tensors named layers.*.weight: layers.3.weight: 1 NaN and 0 Inf among 256 values; "
        "layers.6.weight: 0 NaN and 1 Inf among 256 values"
    )


def test_a_folder_of_checkpoints(run_cli, sets):
    status, report = _reports(run_cli, sets["root"])
    assert status == 1
    assert [entry["format"] for entry in report["files"]] == ["sharded", "sharded", "dcp"]


def test_the_text_report_is_the_same_too(run_cli, sets):
    one = run_cli("--report", sets["root"], "--jobs", "1")
    two = run_cli("--report", sets["root"], "--jobs", "2")
    assert (one.returncode, one.stdout) == (two.returncode, two.stdout) == (1, one.stdout)


@pytest.mark.parametrize("jobs", ["0", "-3"])
def test_jobs_below_one_is_a_usage_error(run_cli, sets, jobs):
    result = run_cli("--report", sets["clean"], "--jobs", jobs)
    assert result.returncode == 2
    assert result.stderr == f"ckinspect: --jobs must be 1 or more, not {jobs}\n"
    assert result.stdout == ""
