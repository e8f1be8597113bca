"""Equal tensors in separate storages (issue 27): MiniMind's `{k: v.half()}` save holds its tied embedding
twice; the value scan says so with the bytes sharing would save, --quick reads no value for it."""

from __future__ import annotations

import torch

from ckinspect.analysis.inspect import inspect_path
from tests.analysis.minimind import DIMS, save_minimind_weights


def test_minimind_tied_embedding_saved_twice_is_named(tmp_path):
    path = tmp_path / "full_sft_512.pth"
    state = save_minimind_weights(path)
    assert state["lm_head.weight"].data_ptr() != state["model.embed_tokens.weight"].data_ptr()
    findings = [f for f in inspect_path(path).findings if f.code == "DUPLICATE_STORAGE"]
    embedding = DIMS["vocab_size"] * DIMS["hidden_size"] * 2  # float16
    assert [(f.severity, f.tensor) for f in findings] == [("info", "model.embed_tokens.weight")]
    share = embedding / path.stat().st_size
    assert findings[0].message == (
        "model.embed_tokens.weight and lm_head.weight hold equal bytes in 2 separate storages: saving them as one "
        f"(tied) would save {embedding / 1024:.1f} KiB, {share:.0%} of the file"
    )
    assert not [f for f in inspect_path(path, quick=True).findings if f.code == "DUPLICATE_STORAGE"]


def test_same_shape_and_size_but_other_values_are_not_duplicates(tmp_path):
    path = tmp_path / "two.pth"
    torch.manual_seed(0)
    a = torch.randn(128, 128)
    b = a.clone()
    b[-1, -1] += 1.0  # one element apart
    torch.save({"a": a, "b": b, "c": a.clone(), "z1": torch.zeros(128, 128), "z2": torch.zeros(128, 128)}, path)
    (finding,) = [f for f in inspect_path(path).findings if f.code == "DUPLICATE_STORAGE"]
    assert finding.message.startswith("a and c hold equal bytes in 2 separate storages")


def test_storages_of_odd_length_compare_to_their_last_byte(tmp_path):
    # 32,769 float16 values: 65,538 bytes, not a whole number of 64-bit words
    path = tmp_path / "odd.pth"
    a = torch.arange(32769, dtype=torch.float16)
    b = a.clone()
    b[-1] = -b[-1]  # only the last value's sign bit differs (a CRC collision aside, never the same CRC)
    torch.save({"a": a, "b": b, "c": a.clone(), "z1": torch.zeros(32769, dtype=torch.float16),
                "z2": torch.zeros(32769, dtype=torch.float16)}, path)  # fmt: skip
    findings = [f for f in inspect_path(path).findings if f.code == "DUPLICATE_STORAGE"]
    assert [f.message.split(" hold ")[0] for f in findings] == ["a and c"]
