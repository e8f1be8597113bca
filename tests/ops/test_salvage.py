"""`ckinspect salvage`: only whole, CRC-valid tensors come back, bit for bit.
(The `ckinspect salvage` command itself: tests/commands/test_salvage.py.)"""

from __future__ import annotations

import json
import struct

import pytest
import torch

from ckinspect.io.zipwalk import walk_local_headers
from ckinspect.ops.salvage import salvage
from ckinspect.vocab import SALVAGE_KEY
from tests.helpers.torch_files import bit_equal, cut, many_tensors


def _storage_ends(original: dict, data: bytes) -> dict[str, int]:
    """tensor name -> byte offset at which its storage member (data + data descriptor) ends."""
    ends = {}
    members = [m for m in walk_local_headers(data) if "/data/" in m.name]
    for name, t in original.items():
        raw = t.contiguous().view(torch.uint8).numpy().tobytes()
        m = next(m for m in members if data[m.data_offset : m.end] == raw)
        ends[name] = m.end + 16
    return ends


@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.75])
def test_salvage_of_a_cut_torch_file_recovers_exactly_the_whole_tensors_bit_exact(tmp_path, fraction):
    original = many_tensors(12)
    src = tmp_path / "w.pth"
    torch.save(original, src)
    data = src.read_bytes()
    cut_at = int(len(data) * fraction)
    expected = {n for n, end in _storage_ends(original, data).items() if end <= cut_at}
    broken = cut(src, fraction, tmp_path / "broken.pth")
    result = salvage(broken, tmp_path / "out.pth")
    loaded = torch.load(tmp_path / "out.pth", weights_only=True)
    lost = loaded.pop(SALVAGE_KEY)  # what was lost, recorded in the file itself
    assert set(result.recovered) == set(loaded) == expected
    assert set(lost["missing"]) == set(original) - expected and lost["dropped"] == []
    assert all(bit_equal(loaded[n], original[n]) for n in expected)
    assert {n for n, _ in result.missing} == set(original) - expected
    if fraction == 0.5:
        assert expected and set(original) - expected  # some of each at half


def test_a_storage_failing_its_crc_is_left_out_and_the_rest_recovered(tmp_path):
    original = many_tensors(6)
    src = tmp_path / "w.pth"
    torch.save(original, src)
    data = bytearray(src.read_bytes())
    victim = original["layer03.weight"].contiguous().view(torch.uint8).numpy().tobytes()
    at = bytes(data).index(victim) + 5
    data[at] ^= 0x01
    src.write_bytes(bytes(data))
    result = salvage(src, tmp_path / "out.safetensors")
    from safetensors.torch import load_file

    loaded = load_file(tmp_path / "out.safetensors")
    assert set(loaded) == set(original) - {"layer03.weight"}
    assert all(bit_equal(loaded[n], original[n]) for n in loaded)
    assert [(n, "CRC" in why) for n, why in result.missing] == [("layer03.weight", True)]


def test_lost_central_directory_loses_nothing_and_keeps_shared_storages_shared(tmp_path):
    state = {"emb": torch.randn(8, 4), "step": 7, "names": ["a", "b"]}
    state["head"] = state["emb"]  # tied
    state["row"] = state["emb"][2]  # a view
    src = tmp_path / "w.pth"
    torch.save(state, src)
    data = src.read_bytes()
    broken = tmp_path / "nodir.pth"
    broken.write_bytes(data[: data.index(b"PK\x01\x02")])  # everything but the central directory
    result = salvage(broken, tmp_path / "out.pth")
    loaded = torch.load(tmp_path / "out.pth", weights_only=True)
    assert not result.missing and loaded["step"] == 7 and loaded["names"] == ["a", "b"]
    assert bit_equal(loaded["emb"], state["emb"]) and bit_equal(loaded["row"], state["row"])
    assert loaded["head"].untyped_storage().data_ptr() == loaded["emb"].untyped_storage().data_ptr()


def test_salvage_of_a_cut_safetensors_keeps_tensors_wholly_inside_the_file(tmp_path):
    from safetensors.torch import load_file, save_file

    original = many_tensors(8)
    src = tmp_path / "w.safetensors"
    save_file(original, src)
    data = src.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + n])
    cut_at = len(data) // 2
    expected = {k for k, v in header.items() if k != "__metadata__" and 8 + n + v["data_offsets"][1] <= cut_at}
    broken = cut(src, 0.5, tmp_path / "broken.safetensors")
    result = salvage(broken, tmp_path / "out.safetensors")
    loaded = load_file(tmp_path / "out.safetensors")
    assert set(loaded) == set(result.recovered) == expected and expected
    assert all(bit_equal(loaded[k], original[k]) for k in expected)
    assert len(result.missing) == len(original) - len(expected)


def test_salvage_of_a_cut_legacy_torch_file_keeps_the_storages_wholly_inside(tmp_path):
    original = many_tensors(6)
    src = tmp_path / "old.pt"
    torch.save(original, src, _use_new_zipfile_serialization=False)
    data = src.read_bytes()
    broken = cut(src, 0.6, tmp_path / "broken.pt")
    result = salvage(broken, tmp_path / "out.pt")
    loaded = torch.load(tmp_path / "out.pt", weights_only=True)
    assert set(loaded.pop(SALVAGE_KEY)["missing"]) == {n for n, _ in result.missing}
    ends = {n: data.index(t.contiguous().view(torch.uint8).numpy().tobytes()) + t.nbytes for n, t in original.items()}
    expected = {n for n, end in ends.items() if end <= int(len(data) * 0.6)}
    assert set(loaded) == set(result.recovered) == expected and expected and len(expected) < len(original)
    assert all(bit_equal(loaded[n], original[n]) for n in expected)
