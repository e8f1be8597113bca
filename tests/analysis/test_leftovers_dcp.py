"""A DCP save interrupted before `.metadata.tmp` became `.metadata`: the tmp is judged against the
.distcp files it names, not by its pickle alone, so a promote never publishes an index of missing bytes."""

import os
import warnings

import torch
import torch.distributed.checkpoint as dcp

from ckinspect.analysis.leftovers import classify, find_leftovers


def interrupted_dcp(folder):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"model": {"w": torch.ones(1000)}, "step": 42}, checkpoint_id=str(folder))
    os.rename(folder / ".metadata", folder / ".metadata.tmp")
    [leftover] = find_leftovers(folder)
    return leftover


def test_a_whole_dcp_tmp_is_complete_and_tells_its_step(tmp_path):
    status = classify(interrupted_dcp(tmp_path / "ck"))
    assert status.tmp_complete and status.tmp_step == 42 and not status.main_exists


def test_a_dcp_tmp_whose_data_is_cut_short_or_missing_is_partial(tmp_path):
    leftover = interrupted_dcp(tmp_path / "ck")
    [data] = sorted((tmp_path / "ck").glob("*.distcp"))
    data.write_bytes(data.read_bytes()[:100])
    status = classify(leftover)
    assert not status.tmp_complete and "__0_0.distcp is truncated" in status.tmp_problem
    data.unlink()
    status = classify(leftover)
    assert not status.tmp_complete and "__0_0.distcp is missing" in status.tmp_problem
