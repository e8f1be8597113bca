"""The torch-free route to safetensors writes what the torch route writes, byte for byte: views, offsets,
shared storages, and casts rounded as torch rounds them (ties to even, NaN, inf, subnormals)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ckinspect.ops.convert import convert
from ckinspect.ops.rawtensors import cast_array

DTYPES = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _awkward_values(dtype: torch.dtype) -> torch.Tensor:
    """Random values across the ranges plus the cases rounding gets wrong: ties, subnormals, overflow, NaN."""
    g = torch.Generator().manual_seed(7)
    wide = torch.randn(4096, generator=g, dtype=torch.float64) * torch.logspace(-45, 38, 4096, dtype=torch.float64)
    special = torch.tensor(
        [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 65504.0, 65520.0, 65536.0, 1e-8, 5.96e-8, 3e-39,
         1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-11, 1.0 + 3 * 2**-11, 3.4e38, -3.4e38, 1e39],
        dtype=torch.float64,
    )  # fmt: skip
    with np.errstate(over="ignore"):
        return torch.cat([wide, special]).to(dtype)


@pytest.mark.parametrize("source", list(DTYPES))
@pytest.mark.parametrize("target", ["float32", "float16", "bfloat16"])
def test_casts_round_exactly_as_torch(source, target):
    values = _awkward_values(DTYPES[source])
    raw = memoryview(values.view(torch.uint8).numpy().tobytes())
    ours = torch.frombuffer(bytearray(np.asarray(cast_array(raw, source, target)).tobytes()), dtype=DTYPES[target])
    theirs = values.to(DTYPES[target])
    bits = {2: torch.int16, 4: torch.int32}[theirs.element_size()]
    nan = torch.isnan(theirs)
    assert torch.equal(torch.isnan(ours), nan)  # NaN payloads aside, every bit as torch has it
    assert torch.equal(ours.view(bits)[~nan], theirs.view(bits)[~nan])


def test_views_offsets_and_shared_storages_come_out_as_torch_writes_them(tmp_path):
    from safetensors.torch import load_file

    base = torch.arange(60, dtype=torch.float32).reshape(6, 10)
    state = {
        "transposed": base.t(),  # non-contiguous
        "slice": base[2:4, 3:8],  # offset and strides
        "expanded": torch.ones(1, 3).expand(4, 3),  # stride 0
        "tied_a": base,
        "tied_b": base,  # the same storage twice
        "bf16": torch.randn(5, 3).to(torch.bfloat16).t(),
        "step": torch.tensor(12),
        "flags": torch.tensor([True, False, True]),
        "nested": {"list": [torch.arange(4, dtype=torch.int64), 3, "x"]},
    }
    source = tmp_path / "views.pth"
    torch.save(state, source)
    result = convert(source, tmp_path / "out.safetensors")
    loaded = load_file(tmp_path / "out.safetensors")
    flat = {k: v for k, v in state.items() if isinstance(v, torch.Tensor)} | {
        "nested.list.0": state["nested"]["list"][0]
    }
    assert set(loaded) == set(flat)
    for name, tensor in flat.items():
        assert loaded[name].dtype == tensor.dtype and torch.equal(loaded[name], tensor.contiguous()), name
    shared = sorted(n.split(" ")[0] for n in result.notes if " shared its storage with transposed:" in n)
    assert shared == ["slice", "tied_a", "tied_b"]  # one storage, first written as `transposed`
    cast = convert(source, tmp_path / "half.safetensors", dtype="fp16")
    halves = load_file(tmp_path / "half.safetensors")
    assert halves["step"].dtype == torch.int64 and halves["flags"].dtype == torch.bool  # not floating: kept
    assert torch.equal(halves["transposed"], base.t().half()) and torch.equal(halves["bf16"], state["bf16"].half())
    assert cast.cast == 6  # transposed, slice, expanded, tied_a, tied_b, bf16
