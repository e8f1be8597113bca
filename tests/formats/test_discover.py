"""find_checkpoints: what a folder holds, each checkpoint once, temporaries never on their own."""

from __future__ import annotations

import json
import pickle
import tarfile

import pytest
import torch
from safetensors.torch import save_file

from ckinspect.formats.discover import Target, TmpSuffix, find_checkpoints, is_temporary
from ckinspect.vocab import CkinspectError


@pytest.fixture
def mixed(tmp_path):
    root = tmp_path / "runs"
    root.mkdir()
    torch.save({"w": torch.zeros(2)}, root / "final.pt")
    (root / "final.pt.tmp").write_bytes(b"half a save")  # interrupted save: reported on final.pt
    (root / ".final.pt.a8k2x.tmp").write_bytes(b"x")  # atomic_write's hidden temporary
    (root / "notes.txt").write_text("not a checkpoint")
    (root / "config.json").write_text("{}")
    # a DCP folder: its contents are one checkpoint
    dcp = root / "step_100"
    dcp.mkdir()
    (dcp / ".metadata").write_bytes(b"meta")
    (dcp / "__0_0.distcp").write_bytes(b"shard")
    (dcp / "extra.pt").write_bytes(b"inside dcp")
    (dcp / ".metadata.tmp").write_bytes(b"half")
    # an index + shards: one checkpoint
    hf = root / "hf"
    hf.mkdir()
    save_file({"a": torch.zeros(1)}, hf / "model-00001-of-00002.safetensors")
    save_file({"b": torch.zeros(1)}, hf / "model-00002-of-00002.safetensors")
    (hf / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})
    )
    save_file({"c": torch.zeros(1)}, hf / "adapter.safetensors")  # not a shard: listed by itself
    (hf / "tf_model.h5.index.json").write_text(json.dumps({"weight_map": {"a": "tf_model-00001-of-00001.h5"}}))
    (hf / "tf_model-00001-of-00001.h5").write_bytes(b"\x89HDF\r\n\x1a\n")  # TensorFlow's: no reader, not listed
    # extension-less checkpoint, and extension-less junk
    torch.save({"w": torch.zeros(1)}, root / "latest")
    (root / "LICENSE").write_text("MIT")
    torch.save({"epoch": 3}, root / "model_best.pth.tar")  # the ImageNet example's name: a torch file
    with tarfile.open(root / "logs.tar", "w") as archive:  # a real tar is not a checkpoint
        archive.add(root / "notes.txt", arcname="notes.txt")
    (root / "state.pkl").write_bytes(pickle.dumps({"step": 1}))
    # quarantine from a repair: never searched
    quarantine = root / ".ckinspect-quarantine"
    quarantine.mkdir()
    torch.save({}, quarantine / "final.pt")
    # a DCP folder whose save was interrupted before .metadata: still one (corrupt) checkpoint
    broken = root / "step_200"
    broken.mkdir()
    (broken / "__0_0.distcp").write_bytes(b"shard")
    (broken / ".metadata.tmp").write_bytes(b"half")
    # an empty subfolder and a tmp-only folder hold nothing
    (root / "empty").mkdir()
    (root / "tmp_only").mkdir()
    (root / "tmp_only" / "resume.pth.tmp").write_bytes(b"x")
    return root


def test_mixed_folder(mixed):
    assert find_checkpoints([mixed]) == [
        Target(mixed / "final.pt", "file"),
        Target(mixed / "hf" / "adapter.safetensors", "file"),
        Target(mixed / "hf" / "model.safetensors.index.json", "sharded"),
        Target(mixed / "latest", "file"),
        Target(mixed / "model_best.pth.tar", "file"),
        Target(mixed / "state.pkl", "file"),
        Target(mixed / "step_100", "dcp"),
        Target(mixed / "step_200", "dcp"),
    ]


def test_given_files_and_dcp_folder(mixed):
    targets = find_checkpoints([mixed / "step_100", mixed / "notes.txt", mixed / "hf" / "model.safetensors.index.json"])
    assert targets == [
        Target(mixed / "step_100", "dcp"),
        Target(mixed / "notes.txt", "file"),  # named by the user: its reader says what it is
        Target(mixed / "hf" / "model.safetensors.index.json", "sharded"),
    ]


def test_each_checkpoint_once(mixed):
    targets = find_checkpoints([mixed / "final.pt", mixed, mixed / "final.pt"])
    assert [t.path for t in targets].count(mixed / "final.pt") == 1
    assert targets[0] == Target(mixed / "final.pt", "file")


def test_hf_trainer_folder_lists_its_files(tmp_path):
    folder = tmp_path / "checkpoint-500"
    folder.mkdir()
    (folder / "trainer_state.json").write_text("{}")
    save_file({"w": torch.zeros(1)}, folder / "model.safetensors")
    for name in ("optimizer.pt", "rng_state.pth", "scheduler.pt", "training_args.bin"):
        torch.save({}, folder / name)
    assert [t.path.name for t in find_checkpoints([folder])] == [
        "model.safetensors",
        "optimizer.pt",
        "rng_state.pth",
        "scheduler.pt",
        "training_args.bin",
    ]


def test_missing_path(tmp_path):
    with pytest.raises(CkinspectError, match=r"nope: no such file or folder$"):
        find_checkpoints([tmp_path / "nope"])


def test_symlink_loop_terminates(tmp_path):
    torch.save({}, tmp_path / "a.pt")
    (tmp_path / "loop").symlink_to(tmp_path)
    assert [t.path.name for t in find_checkpoints([tmp_path])] == ["a.pt"]


def test_temporaries():
    assert is_temporary("model.pt.tmp") and is_temporary("/x/.metadata.tmp") and is_temporary(".m.pt.k2j.tmp")
    assert not is_temporary("model.pt") and not is_temporary("tmp/model.pt")
    assert TmpSuffix.main_name("model.pt.tmp") == "model.pt"
    assert TmpSuffix.main_name(".metadata.tmp") == ".metadata"
    assert TmpSuffix.main_name("model.pt") is None


def test_a_folder_of_torchscript_pickle_and_numpy_files_lists_each(tmp_path, capsys):
    """Files the report judges alone are listed in folder mode too: .jit, .p, .joblib, .npy, .npz."""
    import numpy as np

    from ckinspect.cli import main

    module = torch.jit.trace(torch.nn.Linear(2, 2), torch.ones(1, 2))
    torch.jit.save(module, str(tmp_path / "vad.jit"))
    (tmp_path / "prob.p").write_bytes(pickle.dumps({"B": 0.5}, protocol=0))
    np.save(tmp_path / "w.npy", np.ones(3, dtype=np.float32))
    np.savez(tmp_path / "filters.npz", half=np.zeros(4))
    names = [t.path.name for t in find_checkpoints([tmp_path])]
    assert names == ["filters.npz", "prob.p", "vad.jit", "w.npy"]
    assert main(["--report", str(tmp_path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    formats = {f["path"].rsplit("/", 1)[-1]: (f["format"], f["tensor_count"]) for f in doc["files"]}
    assert formats == {
        "filters.npz": ("numpy", 1),
        "prob.p": ("pickle", 0),
        "vad.jit": ("torchscript", 2),
        "w.npy": ("numpy", 1),
    }


def test_a_hugging_face_folder_names_its_weights_preferring_safetensors(tmp_path):
    from ckinspect.formats.discover import model_folder_weights

    (tmp_path / "pytorch_model.bin").write_bytes(b"x")
    assert model_folder_weights(tmp_path) is None  # no config.json: not a model folder
    (tmp_path / "config.json").write_text("{}")
    assert model_folder_weights(tmp_path) == tmp_path / "pytorch_model.bin"
    (tmp_path / "model.safetensors").write_bytes(b"x")
    assert model_folder_weights(tmp_path) == tmp_path / "model.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text("{}")
    assert model_folder_weights(tmp_path) == tmp_path / "model.safetensors.index.json"
    assert model_folder_weights(tmp_path / "model.safetensors") is None  # a file, not a folder
