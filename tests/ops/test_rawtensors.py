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


def test_shared_and_self_referencing_structures_are_copied_once_by_identity():
    from ckinspect.formats.tree import MAX_TREE_DEPTH
    from ckinspect.model import TensorInfo
    from ckinspect.ops.rawtensors import count_values, map_tree

    laughs: list = ["x" * 10]
    for _ in range(40):
        laughs = [laughs, laughs]  # 2**40 leaves by path, 41 lists by identity (what a pickle's memo builds)
    loop: dict = {"n": 1}
    loop["self"] = loop
    deep: list = []
    node = deep
    for _ in range(MAX_TREE_DEPTH + 5):
        node.append([])
        node = node[0]
    w = TensorInfo("", "float32", (2,), (1,), "0", 0)
    built = map_tree({"w": w, "config": laughs, "loop": loop, "deep": deep}, lambda name, info: name)

    assert built.tensors == [("w", "w")]
    copy = built.tree["config"]
    assert len(copy) == 2 and copy[0] is copy[1]  # still shared, not expanded
    assert built.tree["loop"]["self"] is built.tree["loop"] and built.tree["loop"]["n"] == 1
    assert [why for _path, why in built.dropped] == [f"nested deeper than {MAX_TREE_DEPTH} levels"]
    assert count_values(built.tree, lambda o: o == "w") == 2  # "x" * 10 once, 1 once: by identity, not by path
