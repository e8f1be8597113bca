"""Readers never follow a path a file names outside its folder, nor through a symlink."""

from __future__ import annotations

import json
import shutil
import warnings

import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import save_file

from ckinspect.formats.dcp import read_dcp
from ckinspect.formats.sharded import read_sharded


def test_sharded_index_naming_a_symlinked_shard_is_corrupt_and_not_read(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    save_file({"a": torch.ones(2)}, outside / "real.safetensors")
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "model-00001-of-00001.safetensors").symlink_to(outside / "real.safetensors")
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"a": "model-00001-of-00001.safetensors"}}))
    ckpt = read_sharded(index)
    assert [f.code for f in ckpt.findings] == ["CORRUPT"]
    assert "is a symlink; not followed" in ckpt.findings[0].message
    assert ckpt.tensors == [] and ckpt.files == []


def test_dcp_metadata_naming_a_file_outside_or_through_a_symlink_is_corrupt(tmp_path):
    folder = tmp_path / "ckpt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"w": torch.ones(4)}, checkpoint_id=str(folder))
    data = next(folder.glob("*.distcp"))
    outside = tmp_path / "outside.distcp"
    shutil.move(data, outside)
    data.symlink_to(outside)
    ckpt = read_dcp(folder)
    codes = {f.code for f in ckpt.findings}
    assert codes == {"CORRUPT"}
    assert any("is a symlink; not followed" in f.message for f in ckpt.findings)


def test_a_stand_in_shows_a_billion_shared_lists_in_a_few_characters():
    import argparse
    import pickle

    from ckinspect.formats.unpickler import restricted_load

    laughs: list = ["x"]
    for _ in range(60):
        laughs = [laughs, laughs]
    record = restricted_load(pickle.dumps(argparse.Namespace(x=laughs, y=argparse.Namespace(z=laughs)), protocol=2))
    shown = repr(record)
    assert shown.startswith("Opaque(argparse.Namespace") and len(shown) < 400
