"""Diff: bit-identical, changed values, names only on one side, shape/dtype changes, layouts and tolerances."""

import numpy as np
import pytest
import torch

from ckinspect.analysis.diff import diff_checkpoints
from tests.helpers.raw_zip import View, simple_checkpoint, zip_checkpoint


@pytest.fixture
def weights():
    rng = np.random.default_rng(0)
    return {
        "emb.weight": rng.standard_normal((64, 16)).astype(np.float32),
        "norm.weight": np.ones(16, np.float32),
        "big": rng.standard_normal(600_000).astype(np.float32),
    }


def test_identical_checkpoints(tmp_path, weights):
    a = simple_checkpoint(tmp_path / "a.pt", weights)
    b = simple_checkpoint(tmp_path / "b.pt", weights)
    r = diff_checkpoints(a, b)
    assert r.identical and len(r.same) == 3 and r.match == "names matched exactly"
    doc = r.to_json()
    assert (
        doc["identical"] is True and doc["same"] == 3 and doc["changed"] == [] and doc["only_a"] == doc["only_b"] == []
    )
    assert doc["bytes_compared"] == 2 * sum(w.nbytes for w in weights.values())


def test_changed_values_report_max_diff_count_and_first_index(tmp_path, weights):
    a = simple_checkpoint(tmp_path / "a.pt", weights)
    changed = dict(weights)
    changed["emb.weight"] = weights["emb.weight"].copy()
    changed["emb.weight"][3, 5] += 0.25
    changed["emb.weight"][10, 0] -= 0.5
    changed["big"] = weights["big"].copy()
    changed["big"][599_999] = np.nan
    r = diff_checkpoints(a, simple_checkpoint(tmp_path / "b.pt", changed))
    assert not r.identical and r.same == ["norm.weight"]
    by = {c.name: c for c in r.changed}
    emb = by["emb.weight"]
    assert (emb.reason, emb.n_diff, emb.first_index) == ("values", 2, [3, 5])
    assert emb.max_abs_diff == pytest.approx(0.5, abs=1e-6)
    assert by["big"].first_index == [599_999] and by["big"].max_abs_diff == float("inf")
    assert r.to_json()["changed"][0].keys() >= {
        "name",
        "reason",
        "max_abs_diff",
        "max_rel_diff",
        "n_diff",
        "first_index",
    }


def test_only_in_one_side_shape_and_dtype(tmp_path, weights):
    a = simple_checkpoint(tmp_path / "a.pt", weights)
    other = {
        "emb.weight": weights["emb.weight"][:32],
        "norm.weight": weights["norm.weight"].astype(np.float16),
        "new": np.zeros(3, np.float32),
    }
    r = diff_checkpoints(a, simple_checkpoint(tmp_path / "b.pt", other))
    reasons = {c.name: c.reason for c in r.changed}
    assert reasons == {"emb.weight": "shape", "norm.weight": "dtype"}
    assert r.only_a == ["big"] and r.only_b == ["new"]
    dtype_change = next(c for c in r.changed if c.reason == "dtype")
    assert dtype_change.max_abs_diff == 0.0  # ones survive fp16 exactly: the upcast comparison says so


def test_fp16_weights_against_fp32_report_the_rounding_error(tmp_path, weights):
    a = simple_checkpoint(tmp_path / "a.pt", weights)
    half = {k: v.astype(np.float16) for k, v in weights.items()}
    r = diff_checkpoints(a, simple_checkpoint(tmp_path / "b.pt", half))
    emb = next(c for c in r.changed if c.name == "emb.weight")
    expected = np.abs(weights["emb.weight"].astype(np.float16).astype(np.float64) - weights["emb.weight"]).max()
    assert emb.reason == "dtype" and emb.max_abs_diff == pytest.approx(expected)


def test_resume_model_group_against_a_weights_file_and_only_model(tmp_path, weights):
    resume = {f"model.{k}": v for k, v in weights.items()}
    resume["optimizer.state.0.exp_avg"] = np.zeros(16, np.float32)
    a = simple_checkpoint(tmp_path / "resume.pt", resume)
    b = simple_checkpoint(tmp_path / "weights.pt", weights)
    r = diff_checkpoints(a, b)
    assert "prefix 'model.'" in r.match and r.only_a == ["optimizer.state.0.exp_avg"] and not r.changed
    r = diff_checkpoints(a, b, only=["model"])
    assert r.identical and len(r.same) == 3 and "only group(s) model" in r.match


def test_nanogpt_orig_mod_prefix_matches_plain_names(tmp_path, weights):
    a = simple_checkpoint(tmp_path / "a.pt", {f"_orig_mod.{k}": v for k, v in weights.items()})
    b = simple_checkpoint(tmp_path / "b.pt", weights)
    r = diff_checkpoints(a, b)
    assert r.identical and "_orig_mod" in r.match


def test_atol_accepts_small_differences(tmp_path, weights):
    a = simple_checkpoint(tmp_path / "a.pt", weights)
    nudged = dict(weights, big=weights["big"] + np.float32(1e-4))
    b = simple_checkpoint(tmp_path / "b.pt", nudged)
    assert not diff_checkpoints(a, b).identical
    r = diff_checkpoints(a, b, atol=1e-3)
    assert r.identical and r.within_atol == ["big"]


def test_strided_view_equals_its_contiguous_copy(tmp_path):
    base = np.arange(12 * 8, dtype=np.float32).reshape(12, 8)
    a = zip_checkpoint(tmp_path / "a.pt", {"0": base}, {"w": View("0", "float32", (8, 12), (1, 8))})  # base.T
    b = simple_checkpoint(tmp_path / "b.pt", {"w": np.ascontiguousarray(base.T)})
    assert diff_checkpoints(a, b).identical
    c = simple_checkpoint(tmp_path / "c.pt", {"w": np.ascontiguousarray(base.T) * 2})
    change = diff_checkpoints(a, c).changed[0]
    assert change.first_index == [0, 1] and change.n_diff == 95


def test_a_pt_file_and_its_safetensors_copy_are_identical(tmp_path, open_ckpt):
    from safetensors.torch import save_file

    torch.manual_seed(0)
    state = {"tok.weight": torch.randn(50, 8), "norm.weight": torch.ones(8), "blocks.0.w": torch.randn(8, 8).bfloat16()}
    torch.save(state, tmp_path / "w.pt")
    save_file(state, tmp_path / "w.safetensors")
    r = diff_checkpoints(open_ckpt(tmp_path / "w.pt"), open_ckpt(tmp_path / "w.safetensors"))
    assert r.identical and len(r.same) == 3


def test_a_different_step_counter_is_a_difference(tmp_path, weights):
    a = simple_checkpoint(tmp_path / "a.pt", weights)
    b = simple_checkpoint(tmp_path / "b.pt", weights)
    a.metadata["step"], b.metadata["step"] = 30, 60
    r = diff_checkpoints(a, b)
    assert not r.identical and r.metadata_changed == {"step": [30, 60]} and not r.changed
    assert diff_checkpoints(a, b, only=["model"]).identical


def _state():
    torch.manual_seed(0)
    return {
        "a.weight": torch.randn(30, 20),
        "b.weight": torch.randn(20).bfloat16(),
        "c": torch.arange(10),
        "t": torch.randn(8, 6).t(),
    }


@pytest.mark.parametrize("kind", ["legacy", "sharded", "dcp"])
def test_the_same_tensors_in_every_format_are_identical(tmp_path, open_ckpt, kind):
    import json
    import warnings

    state = _state()
    torch.save(state, tmp_path / "z.pt")
    reference = open_ckpt(tmp_path / "z.pt")
    if kind == "legacy":
        torch.save(state, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
        other = tmp_path / "legacy.pt"
    elif kind == "sharded":
        from safetensors.torch import save_file

        s1 = {"a.weight": state["a.weight"], "b.weight": state["b.weight"]}
        s2 = {"c": state["c"], "t": state["t"].contiguous()}
        save_file(s1, tmp_path / "m-00001.safetensors")
        save_file(s2, tmp_path / "m-00002.safetensors")
        weight_map = {**{k: "m-00001.safetensors" for k in s1}, **{k: "m-00002.safetensors" for k in s2}}
        other = tmp_path / "m.safetensors.index.json"
        other.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    else:
        import torch.distributed.checkpoint as dcp

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save({k: v.contiguous() for k, v in state.items()}, checkpoint_id=str(tmp_path / "dcp"))
        other = tmp_path / "dcp"
    r = diff_checkpoints(reference, open_ckpt(other))
    assert r.identical and len(r.same) == 4 and r.match == "names matched exactly"
    changed = dict(state, c=torch.arange(10) * 2)
    torch.save(changed, tmp_path / "changed.pt")
    r = diff_checkpoints(open_ckpt(tmp_path / "changed.pt"), open_ckpt(other))
    assert [(c.name, c.reason, c.n_diff, c.first_index) for c in r.changed] == [("c", "values", 9, [1])]


def test_big_transposed_view_against_its_contiguous_copy_reads_the_span_once(tmp_path, monkeypatch):
    import ckinspect.analysis.diff as diff_mod

    monkeypatch.setattr(diff_mod, "_DECODE_ELEMENTS", 1000)  # force many blocks on a small tensor
    base = np.random.default_rng(5).standard_normal((300, 200)).astype(np.float32)
    a = zip_checkpoint(tmp_path / "a.pt", {"0": base}, {"w": View("0", "float32", (200, 300), (1, 200))})
    copy = np.ascontiguousarray(base.T)
    copy[150, 7] += 1
    r = diff_checkpoints(a, simple_checkpoint(tmp_path / "b.pt", {"w": copy}))
    [c] = r.changed
    assert (c.n_diff, c.first_index) == (1, [150, 7]) and c.max_abs_diff == pytest.approx(1.0, abs=1e-5)


def test_many_tiny_tensors(tmp_path):
    # was quadratic in the tensor count once (minutes at 20k); bench/bench_diff.py times it, not this test
    arrays = {f"layers.{i}.w": np.full(4, i, np.float32) for i in range(5000)}
    a = simple_checkpoint(tmp_path / "a.pt", arrays)
    r = diff_checkpoints(a, a)
    assert r.identical and len(r.same) == 5000


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "bfloat16"])
def test_narrow_floats_decode_as_torch_does(name):
    from ckinspect.analysis.diff import decode

    width = 2 if name == "bfloat16" else 1
    codes = np.arange(1 << (8 * width), dtype=np.uint16 if width == 2 else np.uint8)
    ref = (
        torch.from_numpy(codes.view(np.int16) if width == 2 else codes.copy())
        .view(getattr(torch, name))
        .double()
        .numpy()
    )
    assert np.array_equal(decode(codes, name), ref, equal_nan=True)


def test_match_names_pairs_a_resume_files_model_with_a_bare_weights_file():
    from ckinspect.analysis.diff import match_names
    from ckinspect.analysis.inspect import inspect_path
    from tests.conftest import REPO

    resume = inspect_path(REPO / "samples/resumed-60/tiny_resume.pth", quick=True)
    weights = inspect_path(REPO / "samples/resumed-60/tiny.pth", quick=True)
    pairs = dict(p for p in match_names(resume, weights) if p[0] is not None)
    assert pairs["model.layers.0.attn.wq.weight"] == "layers.0.attn.wq.weight"
    assert pairs["optimizer.state.0.exp_avg"] is None
