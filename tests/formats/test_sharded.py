"""Sharded sets: one Checkpoint from an index and its shards, and CORRUPT where they disagree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from ckinspect.formats.sharded import read_sharded


def make_set(
    folder: Path, shards: dict[str, dict[str, torch.Tensor]], weight_map: dict[str, str] | None = None
) -> Path:
    for shard, tensors in shards.items():
        save_file(tensors, folder / shard, metadata={"format": "pt"})
    if weight_map is None:
        weight_map = {name: shard for shard, tensors in shards.items() for name in tensors}
    index = folder / "model.safetensors.index.json"
    total = sum(t.numel() * t.element_size() for tensors in shards.values() for t in tensors.values())
    index.write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    return index


SHARDS = {
    "model-00001-of-00002.safetensors": {"embed.weight": torch.zeros(8, 4), "layers.0.weight": torch.zeros(4, 4)},
    "model-00002-of-00002.safetensors": {
        "layers.1.weight": torch.zeros(4, 4, dtype=torch.bfloat16),
        "head.weight": torch.zeros(8, 4),
    },
}


def test_two_safetensors_shards_make_one_checkpoint(tmp_path):
    index = make_set(tmp_path, SHARDS)
    ckpt = read_sharded(index)
    assert ckpt.findings == []
    assert ckpt.format == "sharded" and ckpt.path == index
    assert ckpt.files == [tmp_path / name for name in sorted(SHARDS)]
    assert ckpt.file_bytes == sum((tmp_path / name).stat().st_size for name in SHARDS)
    assert sorted(t.name for t in ckpt.tensors) == sorted(n for s in SHARDS.values() for n in s)
    assert ckpt.metadata["total_size"] == (32 + 16 + 32) * 4 + 16 * 2
    assert ckpt.metadata["format"] == "pt"
    layer1 = ckpt.tensor("layers.1.weight")
    assert layer1.dtype == "bfloat16" and layer1.shape == (4, 4)
    storage = ckpt.storages[layer1.storage_key]
    assert layer1.storage_key == "model-00002-of-00002.safetensors:layers.1.weight"
    assert storage.file == tmp_path / "model-00002-of-00002.safetensors"
    assert storage.member == "model-00002-of-00002.safetensors"
    # every tensor's storage exists and its absolute offset really points at its bytes
    for tensor in ckpt.tensors:
        assert ckpt.storages[tensor.storage_key].nbytes == tensor.nbytes


def test_missing_shard(tmp_path):
    index = make_set(tmp_path, SHARDS)
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    ckpt = read_sharded(index)
    assert [f.code for f in ckpt.findings] == ["MISSING_PARTS"]
    assert ckpt.findings[0].message.startswith("shard model-00002-of-00002.safetensors is missing (2 tensors (")
    assert sorted(t.name for t in ckpt.tensors) == ["embed.weight", "layers.0.weight"]


def test_tensor_the_index_names_but_the_shard_lacks(tmp_path):
    weight_map = {name: shard for shard, tensors in SHARDS.items() for name in tensors}
    weight_map["ghost.weight"] = "model-00001-of-00002.safetensors"
    ckpt = read_sharded(make_set(tmp_path, SHARDS, weight_map))
    assert [f.message for f in ckpt.findings] == [
        "shard model-00001-of-00002.safetensors lacks 1 tensor ('ghost.weight') that the index places there"
    ]


def test_shard_tensor_the_index_does_not_name(tmp_path):
    weight_map = {name: shard for shard, tensors in SHARDS.items() for name in tensors}
    del weight_map["head.weight"]
    ckpt = read_sharded(make_set(tmp_path, SHARDS, weight_map))
    assert [(f.code, f.tensor) for f in ckpt.findings] == [("CORRUPT", "head.weight")]
    assert "holds 'head.weight', which the index does not place there" in ckpt.findings[0].message


def test_corrupt_shard_findings_name_the_shard(tmp_path):
    index = make_set(tmp_path, SHARDS)
    shard = tmp_path / "model-00001-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-10])
    ckpt = read_sharded(index)
    assert ckpt.findings and all(f.code == "CORRUPT" for f in ckpt.findings)
    assert any(f.message.startswith("shard model-00001-of-00002.safetensors: tensor") for f in ckpt.findings)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("not json", "index is not valid JSON"),
        ('{"metadata": {}}', "index has no weight_map object"),
        ('{"weight_map": {"a": 3}}', "index weight_map gives no shard file name for 1 tensor ('a')"),
        ('{"weight_map": {"a": "../../etc/passwd"}}', "index names shard '../../etc/passwd' outside its folder"),
    ],
)
def test_bad_index(tmp_path, text, expected):
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(text)
    ckpt = read_sharded(index)
    assert len(ckpt.findings) == 1 and ckpt.findings[0].code == "CORRUPT"
    assert ckpt.findings[0].message.startswith(expected)


def test_bin_shards(tmp_path):
    torch.save({"a.weight": torch.zeros(2, 3)}, tmp_path / "pytorch_model-00001-of-00002.bin")
    torch.save({"b.weight": torch.ones(5, dtype=torch.float16)}, tmp_path / "pytorch_model-00002-of-00002.bin")
    index = tmp_path / "pytorch_model.bin.index.json"
    index.write_text(
        json.dumps(
            {
                "weight_map": {
                    "a.weight": "pytorch_model-00001-of-00002.bin",
                    "b.weight": "pytorch_model-00002-of-00002.bin",
                }
            }
        )
    )
    ckpt = read_sharded(index)
    assert [f for f in ckpt.findings if f.code == "CORRUPT"] == []
    assert {t.name: (t.dtype, t.shape) for t in ckpt.tensors} == {
        "a.weight": ("float32", (2, 3)),
        "b.weight": ("float16", (5,)),
    }
    assert len({t.storage_key for t in ckpt.tensors}) == 2 and all(t.storage_key in ckpt.storages for t in ckpt.tensors)


def test_bin_shards_merge_storages_findings_and_globals(tmp_path, monkeypatch):
    """The merge of pickle shards, with a stand-in for the torch zip reader (its own tests cover it)."""
    import sys
    import types

    from ckinspect.model import Checkpoint, StorageInfo, TensorInfo

    def fake_read_torch_zip(path, reader=None):
        ckpt = Checkpoint(path=path, format="torch-zip", file_bytes=path.stat().st_size, files=[path])
        second = "-00002-of-" in path.name
        name = "b.weight" if second else "a.weight"
        ckpt.storages["0"] = StorageInfo("0", "float32", 24, path, 64, member="archive/data/0")
        ckpt.tensors.append(TensorInfo(name, "float32", (2, 3), (3, 1), "0"))
        ckpt.globals = ["collections.OrderedDict", "torch._utils._rebuild_tensor_v2"]
        if second:
            ckpt.globals.append("os.system")
            ckpt.add("UNSAFE_PICKLE", "names os.system, which can run code")
        return ckpt

    monkeypatch.setitem(
        sys.modules, "ckinspect.formats.torch_zip", types.SimpleNamespace(read_torch_zip=fake_read_torch_zip)
    )
    shards = ["pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"]
    for shard in shards:
        torch.save({}, tmp_path / shard)
    index = tmp_path / "pytorch_model.bin.index.json"
    index.write_text(json.dumps({"weight_map": {"a.weight": shards[0], "b.weight": shards[1]}}))

    ckpt = read_sharded(index)

    assert [t.storage_key for t in ckpt.tensors] == [f"{shards[0]}:0", f"{shards[1]}:0"]
    assert set(ckpt.storages) == {f"{shards[0]}:0", f"{shards[1]}:0"}
    assert ckpt.storages[f"{shards[1]}:0"].file == tmp_path / shards[1]
    assert ckpt.storages[f"{shards[1]}:0"].member == "archive/data/0"  # the zip member stays the precise place
    assert ckpt.globals == ["collections.OrderedDict", "torch._utils._rebuild_tensor_v2", "os.system"]
    assert [(f.code, f.message) for f in ckpt.findings] == [
        ("UNSAFE_PICKLE", f"shard {shards[1]}: names os.system, which can run code")
    ]
