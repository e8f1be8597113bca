"""The torch.distributed.checkpoint helpers on real `dcp.save` and `dcp.async_save` folders."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.distributed.checkpoint as dcp

import ckinspect
from ckinspect.integrations.dcp import verify_async_save, verify_dcp

pytestmark = pytest.mark.frameworks


def _state(nan: bool = False) -> dict:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 8)).sum().backward()
    optimizer.step()
    if nan:
        with torch.no_grad():
            model.weight[1, 2] = math.nan
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 1}


def _save(folder, state) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled ... single process"
        dcp.save(state, checkpoint_id=str(folder))


def test_a_dcp_save_judged_good_and_its_damage_named(tmp_path):
    _save(tmp_path / "good", _state())
    verdict = verify_dcp(tmp_path / "good")
    assert (verdict.framework, verdict.verdict, verdict.values_checked) == ("dcp", "good", True)

    _save(tmp_path / "nan", _state(nan=True))
    with pytest.raises(ckinspect.CheckpointRejected, match="NONFINITE") as raised:
        verify_dcp(tmp_path / "nan")
    assert raised.value.candidate.verdict == "damaged"

    _save(tmp_path / "lost", _state())
    next((tmp_path / "lost").glob("*.distcp")).unlink()
    with pytest.raises(ckinspect.CheckpointRejected, match="MISSING_PARTS"):
        verify_dcp(tmp_path / "lost")
    assert verify_dcp(tmp_path / "lost", fail_on=None).verdict == "incomplete"


def test_the_verdict_attached_to_an_async_save(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        good = verify_async_save(dcp.async_save(_state(), checkpoint_id=str(tmp_path / "good")), tmp_path / "good")
        bad = verify_async_save(dcp.async_save(_state(nan=True), checkpoint_id=str(tmp_path / "nan")), tmp_path / "nan")
    assert good.result(timeout=120).verdict == "good"
    with pytest.raises(ckinspect.CheckpointRejected, match="NONFINITE"):
        bad.result(timeout=120)
