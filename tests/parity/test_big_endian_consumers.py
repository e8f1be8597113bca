"""A big-endian save (torch.save on a big-endian host) read by each consumer of values directly: the TUI's
value statistics and the weight drift give what they give for the same values saved little-endian, and the
statistics count non-finite values as torch does."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ckinspect.analysis.drift import weight_drift
from ckinspect.analysis.value_stats import tensor_value_stats
from ckinspect.formats import open_checkpoint
from tests.parity import torch_cases as tc
from tests.parity.test_torch_parity import torch_counts


def _saved(tmp_path: Path, dtype: str) -> tuple[Path, Path, dict[str, torch.Tensor]]:
    w = tc.base_values(dtype, n=96).reshape(8, 12)
    obj = {"model.layer.weight": w, "model.layer.view": w[1:7, ::3]}
    little, big = tmp_path / "little.pt", tmp_path / "big.pt"
    torch.save(obj, little)
    tc.save_big_endian(obj, big)
    return little, big, obj


@pytest.mark.parametrize("dtype", tc.FLOATS)
def test_value_stats_of_a_big_endian_save(dtype: str, tmp_path: Path) -> None:
    little, big, obj = _saved(tmp_path, dtype)
    a, b = open_checkpoint(little), open_checkpoint(big)
    assert b.metadata["byteorder"] == "big"
    for name, value in obj.items():
        sa, sb = tensor_value_stats(a, a.tensor(name)), tensor_value_stats(b, b.tensor(name))
        assert sb == sa, name
        assert (sb.count, sb.nonfinite) == (value.numel(), torch_counts(value)[1]), name


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_weight_drift_of_a_big_endian_save(dtype: str, tmp_path: Path) -> None:
    little, big, _ = _saved(tmp_path, dtype)
    drift_little = [d.to_json() for d in weight_drift(open_checkpoint(little))]
    drift_big = [d.to_json() for d in weight_drift(open_checkpoint(big))]
    assert drift_big == drift_little and drift_big
