"""`ckinspect convert`: what goes in comes out bit for bit, in the form asked for.
(The `ckinspect convert` command itself: tests/commands/test_convert.py.)"""

from __future__ import annotations

import json

import pytest
import torch

from ckinspect.ops.convert import convert
from ckinspect.vocab import CkinspectError
from tests.helpers.torch_files import bit_equal, resume_state


def _flat(obj, prefix=""):
    if isinstance(obj, torch.Tensor):
        return {prefix: obj}
    out = {}
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    for k, v in items:
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


@pytest.fixture
def resume(tmp_path):
    path = tmp_path / "run_resume.pth"
    torch.save(resume_state(30, seed=1), path)
    return path


def test_pt_to_safetensors_round_trip_is_identical_and_names_the_tied_copy(resume, tmp_path):
    from safetensors.torch import load_file

    out = tmp_path / "all.safetensors"
    result = convert(resume, out)
    original = _flat(torch.load(resume, weights_only=True))
    loaded = load_file(out)
    assert set(loaded) == set(original)
    assert all(bit_equal(loaded[k], original[k]) for k in original)
    assert any("model.head.weight" in n and "shared" in n for n in result.notes)
    # and back: safetensors -> torch file, still identical
    back = tmp_path / "back.pth"
    convert(out, back)
    again = torch.load(back, weights_only=True)
    assert set(again) == set(original) and all(bit_equal(again[k], original[k]) for k in original)


def test_resume_to_weights_only_model_loads_into_the_model(resume, tmp_path):
    out = tmp_path / "weights.pth"
    result = convert(resume, out, only=["model"])
    weights = torch.load(out, weights_only=True)
    expected = resume_state(30, seed=1)["model"]
    assert result.subtree == "model" and set(weights) == set(expected)
    assert all(bit_equal(weights[k], expected[k]) for k in expected)
    assert out.stat().st_size < resume.stat().st_size / 2  # the optimizer's moments are gone


def test_dtype_cast_to_bf16_safetensors(resume, tmp_path):
    from safetensors.torch import load_file

    from ckinspect.commands.convert import render

    result = convert(resume, tmp_path / "w.safetensors", only=["model"], dtype="bf16")
    doc = json.loads(render(result, "json"))
    loaded = load_file(tmp_path / "w.safetensors")
    expected = resume_state(30, seed=1)["model"]
    assert doc["cast"] == result.cast >= 1 and set(loaded) == set(expected)
    assert all(bit_equal(loaded[k], expected[k].to(torch.bfloat16)) for k in expected)


def test_legacy_torch_file_becomes_a_zip(tmp_path):
    state = {"w": torch.randn(5, 3), "step": 4}
    legacy = tmp_path / "old.pt"
    torch.save(state, legacy, _use_new_zipfile_serialization=False)
    convert(legacy, tmp_path / "new.pt")
    assert (tmp_path / "new.pt").read_bytes()[:4] == b"PK\x03\x04"
    loaded = torch.load(tmp_path / "new.pt", weights_only=True)
    assert loaded["step"] == 4 and bit_equal(loaded["w"], state["w"])


def test_dcp_folder_becomes_one_file(tmp_path):
    import warnings

    import torch.distributed.checkpoint as dcp

    state = {"model": {"w": torch.randn(6, 4), "b": torch.arange(5, dtype=torch.int64)}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=str(tmp_path / "ckpt"))
    convert(tmp_path / "ckpt", tmp_path / "one.pth")
    loaded = _flat(torch.load(tmp_path / "one.pth", weights_only=True))
    assert set(loaded) == {"model.w", "model.b"}
    assert bit_equal(loaded["model.w"], state["model"]["w"]) and bit_equal(loaded["model.b"], state["model"]["b"])


def test_a_damaged_input_is_refused_with_a_pointer_to_salvage(resume, tmp_path):
    broken = tmp_path / "broken.pth"
    broken.write_bytes(resume.read_bytes()[: resume.stat().st_size // 2])
    with pytest.raises(CkinspectError, match="salvage"):
        convert(broken, tmp_path / "out.pth")
    assert not (tmp_path / "out.pth").exists()


def test_only_optimizer_keeps_a_loadable_optimizer_state_dict(resume, tmp_path):
    result = convert(resume, tmp_path / "opt.pth", only=["optimizer"])
    saved = torch.load(tmp_path / "opt.pth", weights_only=True)
    expected = resume_state(30, seed=1)["optimizer"]
    assert result.subtree == "optimizer" and set(saved) == {"state", "param_groups"}
    assert saved["param_groups"] == expected["param_groups"]
    assert all(bit_equal(saved["state"][i][k], v) for i, st in expected["state"].items() for k, v in st.items())
