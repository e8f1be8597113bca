"""read_torch_legacy against files written with torch.save(..., _use_new_zipfile_serialization=False)."""

from __future__ import annotations

import pickle
import struct
from pathlib import Path

import pytest
import torch

from ckinspect.formats.pickle_file import read_pickle
from ckinspect.formats.torch_legacy import read_torch_legacy
from tests.formats.storage_bytes import raw_bytes


@pytest.fixture(scope="module")
def legacy_file(tmp_path_factory) -> tuple[Path, dict]:
    torch.manual_seed(1)
    w = torch.randn(6, 4)
    state = {
        "model": {"w": w, "w_t": w.t(), "w_tail": w[2:], "tied": w, "h": torch.randn(3).half(),
                  "bf": torch.randn(2).bfloat16(), "ids": torch.arange(5), "mask": torch.tensor([True, False])},
        "optimizer": {"state": {0: {"exp_avg": torch.zeros(6, 4)}}, "param_groups": [{"lr": 0.01}]},
        "epoch": 2,
    }  # fmt: skip
    path = tmp_path_factory.mktemp("legacy") / "old.pt"
    torch.save(state, path, _use_new_zipfile_serialization=False)
    return path, state


def test_lists_legacy_file(legacy_file):
    path, state = legacy_file
    ckpt = read_torch_legacy(path)
    assert ckpt.findings == [] and ckpt.format == "torch-legacy"
    by_name = {t.name: t for t in ckpt.tensors}
    assert list(by_name) == ["model.w", "model.w_t", "model.w_tail", "model.tied", "model.h", "model.bf",
                             "model.ids", "model.mask", "optimizer.state.0.exp_avg"]  # fmt: skip
    assert by_name["model.w_t"].stride == (1, 4) and by_name["model.w_t"].shape == (4, 6)
    assert by_name["model.w_tail"].storage_offset == 8
    assert by_name["model.w"].storage_key == by_name["model.tied"].storage_key == by_name["model.w_t"].storage_key
    assert [by_name[n].dtype for n in ("model.h", "model.bf", "model.ids", "model.mask")] == [
        "float16", "bfloat16", "int64", "bool"]  # fmt: skip
    assert ckpt.tree["epoch"] == 2 and ckpt.tree["optimizer"]["param_groups"] == [{"lr": 0.01}]
    assert ckpt.metadata["byteorder"] == "little"


def test_storage_offsets_walk_the_count_prefixed_blocks(legacy_file):
    path, state = legacy_file
    ckpt = read_torch_legacy(path)
    by_name = {t.name: t for t in ckpt.tensors}
    for name, tensor in [("model.w", state["model"]["w"]), ("model.bf", state["model"]["bf"]),
                         ("model.ids", state["model"]["ids"]), ("model.mask", state["model"]["mask"]),
                         ("optimizer.state.0.exp_avg", state["optimizer"]["state"][0]["exp_avg"])]:  # fmt: skip
        storage = ckpt.storages[by_name[name].storage_key]
        assert raw_bytes(storage) == bytes(tensor.untyped_storage()), name
        assert storage.crc32 is None and storage.member is None
    last = max(ckpt.storages.values(), key=lambda s: s.offset)
    assert last.offset + last.nbytes == path.stat().st_size


def test_truncated_legacy_file_is_corrupt(legacy_file, tmp_path):
    path, _ = legacy_file
    data = path.read_bytes()
    for cut in (len(data) - 5, len(data) // 2, 40, 3):
        bad = tmp_path / f"cut{cut}.pt"
        bad.write_bytes(data[:cut])
        ckpt = read_torch_legacy(bad)
        assert [f.code for f in ckpt.findings] == ["CORRUPT"], cut
        assert "truncated" in ckpt.findings[0].message or "unreadable" in ckpt.findings[0].message


def test_plain_pickle_is_not_legacy(tmp_path):
    path = tmp_path / "plain.pkl"
    path.write_bytes(pickle.dumps({"a": 1}, protocol=2))
    ckpt = read_torch_legacy(path)
    assert [f.code for f in ckpt.findings] == ["CORRUPT"]
    assert read_pickle(path).tree == {"a": 1}


def test_legacy_many_storages(tmp_path):
    state = {f"p{i}": torch.full((i + 1,), float(i)) for i in range(300)}
    path = tmp_path / "many.pt"
    torch.save(state, path, _use_new_zipfile_serialization=False)
    ckpt = read_torch_legacy(path)
    assert ckpt.findings == [] and len(ckpt.tensors) == 300 and len(ckpt.storages) == 300
    t = ckpt.tensor("p299")
    assert raw_bytes(ckpt.storages[t.storage_key]) == bytes(state["p299"].untyped_storage())


def test_legacy_prefix_read_does_not_chase_garbage_lengths(tmp_path, monkeypatch):
    from ckinspect.formats import torch_legacy
    from ckinspect.io.reader import FileReader

    # a BINUNICODE claiming 3 GB inside a 2 MB file: nothing more than the file is ever requested
    path = tmp_path / "g.pt"
    path.write_bytes(b"\x80\x02X" + struct.pack("<I", 3 << 30) + b"\x00" * (2 << 20))
    asked = []
    real = FileReader.read_at
    monkeypatch.setattr(FileReader, "read_at", lambda self, o, n: asked.append(n) or real(self, o, n))
    ckpt = torch_legacy.read_torch_legacy(path)
    assert [f.code for f in ckpt.findings] == ["CORRUPT"]
    assert max(asked) <= 1 << 20
