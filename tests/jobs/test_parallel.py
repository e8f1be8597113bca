"""The value scan split into parts: one unit per data file, scanned here or by worker processes, merged into
the findings one scan of the whole checkpoint gives; and how torchrun's ranks share the units."""

from __future__ import annotations

import os

import pytest

from ckinspect.analysis.inspect import inspect_path
from ckinspect.jobs.parallel import MIN_POOL_BYTES, merge_scans, plan_units, scan_units
from ckinspect.jobs.ranks import disagreement, share, torchrun_world
from tests.helpers.shards import SHARDS, shard_name, write_set


@pytest.fixture(scope="module")
def damaged_set(tmp_path_factory):
    return write_set(tmp_path_factory.mktemp("shards") / "damaged", damaged=True)


def _scanned(index, jobs):
    ckpt = inspect_path(index, quick=True)
    units = plan_units([ckpt])
    results = scan_units(units, jobs)
    merge_scans([ckpt], units, results)
    return ckpt, units, results


def test_one_unit_per_shard_with_its_own_tensors_and_storages(damaged_set):
    ckpt = inspect_path(damaged_set, quick=True)
    units = plan_units([ckpt])
    assert [os.path.basename(u.file) for u in units] == [shard_name(i) for i in range(SHARDS)]
    assert [sorted(t.name for t in u.tensors) for u in units] == [
        [f"layers.{2 * s}.weight", f"layers.{2 * s + 1}.weight"] for s in range(SHARDS)
    ]
    assert all({s.file for s in u.storages} == {damaged_set.parent / os.path.basename(u.file)} for u in units)
    # shard 2 is cut short after its first storage: only that one's bytes are there to scan
    assert [u.nbytes for u in units] == [8192, 4096, 8192, 8192]


@pytest.mark.parametrize("jobs", [1, 2])
def test_parts_merged_give_the_whole_checkpoints_findings(damaged_set, jobs):
    whole = inspect_path(damaged_set, quick=False)  # one scan_values over the whole set
    parted, _, results = _scanned(damaged_set, jobs)
    assert parted.findings == whole.findings
    codes = [f.code for f in parted.findings]
    assert codes.count("NONFINITE") == 1  # layers.0 (shard 1) and layers.7 (shard 4): one family, one finding
    nonfinite = next(f for f in parted.findings if f.code == "NONFINITE")
    assert nonfinite.message.startswith("2 tensors named layers.*.weight: layers.0.weight: 1 NaN and 0 Inf")
    assert "layers.7.weight: 0 NaN and 1 Inf among 1,024 values" in nonfinite.message
    assert [f.tensor for f in parted.findings if f.code == "FP16_OVERFLOW"] == ["layers.5.weight"]
    crc = [f for f in parted.findings if f.code == "CORRUPT" and "CRC mismatch" in f.message]
    assert len(crc) == 1 and crc[0].tensor == "layers.4.weight"
    assert any(f.code == "CORRUPT" and f.message.startswith(f"shard {shard_name(1)}: ") for f in parted.findings)
    # results cross the process boundary as records: findings and only the flagged tensors' stats
    assert sorted(n for r in results for n in r.flagged) == ["layers.0.weight", "layers.5.weight", "layers.7.weight"]


def test_explicit_jobs_scan_in_worker_processes(damaged_set):
    _, _, pooled = _scanned(damaged_set, 2)
    _, _, here = _scanned(damaged_set, 1)
    assert {r.pid for r in here} == {os.getpid()}
    assert os.getpid() not in {r.pid for r in pooled}
    strip = [(r.checkpoint, r.part, r.findings, r.flagged, r.bytes_scanned) for r in pooled]
    assert strip == [(r.checkpoint, r.part, r.findings, r.flagged, r.bytes_scanned) for r in here]


def test_default_jobs_scan_a_small_set_in_this_process(damaged_set):
    ckpt = inspect_path(damaged_set, quick=True)
    units = plan_units([ckpt])
    assert sum(u.nbytes for u in units) < MIN_POOL_BYTES
    assert {r.pid for r in scan_units(units, None)} == {os.getpid()}


def test_ranks_share_every_unit_once_largest_first(damaged_set):
    ckpt = inspect_path(damaged_set, quick=True)
    units = plan_units([ckpt])
    units[1] = units[1].replace(nbytes=10 * units[1].nbytes)  # one big part: alone on rank 0
    shares = [share(units, rank, 2) for rank in range(2)]
    assert [[u.part for u in s] for s in shares] == [[1], [0, 2, 3]]
    assert [len(share(units, rank, 5)) for rank in range(5)] == [1, 1, 1, 1, 0]  # more ranks than parts
    assert sorted(u.part for rank in range(3) for u in share(units, rank, 3)) == [0, 1, 2, 3]


def test_ranks_must_see_the_same_parts():
    plan = (["a/model.safetensors.index.json"], [("a/model.safetensors.index.json", 0, "a/x", 10)])
    assert disagreement([plan, plan]) is None
    assert disagreement([plan, "a: no such file or folder"]) == "rank 1: a: no such file or folder"
    other = (plan[0], [("a/model.safetensors.index.json", 0, "a/x", 11)])
    assert disagreement([plan, other]).startswith("rank 1 sees other checkpoints or parts than rank 0")


TORCHRUN = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


@pytest.mark.parametrize(
    ("env", "world"),
    [
        (TORCHRUN, (1, 2)),
        ({**TORCHRUN, "WORLD_SIZE": "1", "RANK": "0"}, None),  # one rank: a plain process
        ({**TORCHRUN, "CKINSPECT_DISTRIBUTED": "0"}, None),  # a script inside someone else's job
        ({k: v for k, v in TORCHRUN.items() if k != "MASTER_PORT"}, None),
        ({**TORCHRUN, "RANK": "2"}, None),
    ],
)
def test_torchrun_environment(monkeypatch, env, world):
    for key in (*TORCHRUN, "CKINSPECT_DISTRIBUTED"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert torchrun_world() == world


def test_four_shards_four_units(tmp_path):
    ckpt = inspect_path(write_set(tmp_path / "clean"), quick=True)
    assert ckpt.findings == []
    assert [os.path.basename(u.file) for u in plan_units([ckpt])] == [shard_name(i) for i in range(SHARDS)]
