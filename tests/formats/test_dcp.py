"""read_dcp against folders written by torch.distributed.checkpoint.save (single process, no process group)."""

from __future__ import annotations

import pickle
import shutil
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from ckinspect.formats.dcp import read_dcp
from tests.formats.storage_bytes import raw_bytes


@pytest.fixture(scope="module")
def dcp_folder(tmp_path_factory) -> tuple[Path, dict]:
    torch.manual_seed(2)
    state = {
        "model": {"w": torch.randn(4, 3), "b": torch.arange(5), "h": torch.randn(2, 2).bfloat16()},
        "optimizer": {"state": {"w": {"exp_avg": torch.zeros(4, 3)}}, "param_groups": [{"lr": 0.1}]},
        "step": 30,
        "config": {"dim": 3},
    }
    folder = tmp_path_factory.mktemp("dcp") / "ckpt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled ... single process"
        dcp.save(state, checkpoint_id=str(folder))
    return folder, state


def test_lists_dcp_tensors_and_values(dcp_folder):
    folder, state = dcp_folder
    ckpt = read_dcp(folder)
    assert ckpt.findings == [] and ckpt.format == "dcp" and ckpt.path == folder
    by_name = {t.name: t for t in ckpt.tensors}
    assert set(by_name) == {"model.w", "model.b", "model.h", "optimizer.state.w.exp_avg"}
    assert by_name["model.w"].shape == (4, 3) and by_name["model.w"].dtype == "float32"
    assert by_name["model.b"].dtype == "int64" and by_name["model.h"].dtype == "bfloat16"
    assert ckpt.tree["step"] == 30
    assert ckpt.tree["config"] == {"dim": 3}
    assert ckpt.tree["optimizer"]["param_groups"] == [{"lr": 0.1}]
    assert ckpt.tree["model"]["w"].name == "model.w"
    assert folder / ".metadata" in ckpt.files and any(p.suffix == ".distcp" for p in ckpt.files)
    assert ckpt.file_bytes == sum(p.stat().st_size for p in ckpt.files)
    assert ckpt.metadata["dcp_ranks"] == 1


def test_dcp_storages_hold_the_tensor_bytes(dcp_folder):
    folder, state = dcp_folder
    ckpt = read_dcp(folder)
    by_name = {t.name: t for t in ckpt.tensors}
    for name, tensor in [("model.w", state["model"]["w"]), ("model.b", state["model"]["b"]),
                         ("model.h", state["model"]["h"])]:  # fmt: skip
        t = by_name[name]
        storage = ckpt.storages[t.storage_key]
        assert storage.file.suffix == ".distcp"
        got = raw_bytes(storage)[t.byte_offset : t.byte_offset + t.nbytes]
        assert got == tensor.contiguous().numpy().tobytes() if tensor.dtype != torch.bfloat16 else got == bytes(
            tensor.contiguous().untyped_storage())  # fmt: skip


def test_missing_metadata_is_corrupt(dcp_folder, tmp_path):
    folder, _ = dcp_folder
    copy = tmp_path / "nometa"
    shutil.copytree(folder, copy)
    (copy / ".metadata").unlink()
    ckpt = read_dcp(copy)
    assert [f.code for f in ckpt.findings] == ["CORRUPT"]
    assert "DCP folder without .metadata" in ckpt.findings[0].message
    (copy / ".metadata.tmp").write_bytes(b"partial")
    assert ".metadata.tmp" in read_dcp(copy).findings[0].message


def test_missing_or_truncated_distcp_is_corrupt(dcp_folder, tmp_path):
    folder, _ = dcp_folder
    copy = tmp_path / "nodata"
    shutil.copytree(folder, copy)
    data_file = next(copy.glob("*.distcp"))
    data = data_file.read_bytes()
    data_file.write_bytes(data[: len(data) // 2])
    ckpt = read_dcp(copy)
    assert {f.code for f in ckpt.findings} == {"CORRUPT"} and "truncated" in ckpt.findings[0].message
    data_file.unlink()
    ckpt = read_dcp(copy)
    assert {f.code for f in ckpt.findings} == {"MISSING_PARTS"} and "missing" in ckpt.findings[0].message


def test_metadata_that_is_not_dcp(tmp_path):
    folder = tmp_path / "fake"
    folder.mkdir()
    (folder / ".metadata").write_bytes(pickle.dumps({"hello": 1}))
    ckpt = read_dcp(folder)
    assert [f.code for f in ckpt.findings] == ["CORRUPT"] and "not DCP Metadata" in ckpt.findings[0].message
    (folder / ".metadata").write_bytes(b"\x00garbage")
    assert [f.code for f in read_dcp(folder).findings] == ["CORRUPT"]


def test_mutated_metadata_never_raises(dcp_folder, tmp_path):
    import random

    folder, _ = dcp_folder
    copy = tmp_path / "mut"
    shutil.copytree(folder, copy)
    original = (folder / ".metadata").read_bytes()
    rng = random.Random(3)
    outcomes = set()
    for _ in range(60):
        data = bytearray(original)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        (copy / ".metadata").write_bytes(bytes(data))
        ckpt = read_dcp(copy)
        outcomes.update(f.code for f in ckpt.findings)
        assert {f.code for f in ckpt.findings} <= {"CORRUPT", "UNSAFE_PICKLE", "ALLOWLIST_NEEDED"}
    assert "CORRUPT" in outcomes


def _repickle_metadata(folder: Path, out: Path, reduce_enum) -> None:
    """Copy a DCP folder, re-pickling its `.metadata` with enum members reduced by `reduce_enum`."""
    import enum

    shutil.copytree(folder, out)

    class Pickler(pickle.Pickler):
        def reducer_override(self, obj):
            if isinstance(obj, enum.Enum):
                return reduce_enum(obj)
            return NotImplemented

    metadata = pickle.loads((folder / ".metadata").read_bytes())  # our own file, just written by torch
    with open(out / ".metadata", "wb") as f:
        Pickler(f, protocol=2).dump(metadata)


def test_enum_members_pickled_by_getattr_are_data_not_code(dcp_folder, tmp_path):
    """Python 3.11.0-3.11.x pickles enum members as getattr(EnumClass, "NAME"); such folders are ordinary."""
    folder, state = dcp_folder
    out = tmp_path / "py311-early"
    _repickle_metadata(folder, out, lambda member: (getattr, (type(member), member.name)))
    assert b"getattr" in (out / ".metadata").read_bytes()
    ckpt = read_dcp(out)
    assert [f.code for f in ckpt.findings] == []
    assert sorted(t.name for t in ckpt.tensors) == sorted(t.name for t in read_dcp(folder).tensors)
    assert "builtins.getattr" in ckpt.globals


def test_getattr_on_anything_but_an_enum_class_is_refused(dcp_folder, tmp_path):
    folder, _ = dcp_folder
    out = tmp_path / "getattr-builtin"
    _repickle_metadata(folder, out, lambda member: (getattr, (dict, "fromkeys")))
    ckpt = read_dcp(out)
    unsafe = [f for f in ckpt.findings if f.code == "UNSAFE_PICKLE"]
    assert len(unsafe) == 1 and "builtins.getattr (applied to <class 'dict'>, 'fromkeys')" in unsafe[0].message
    assert ckpt.tensors == []


def test_getattr_reaching_os_system_is_refused_and_never_runs(dcp_folder, tmp_path):
    import posix

    folder, _ = dcp_folder
    out = tmp_path / "getattr-posix"
    marker = tmp_path / "PWNED-dcp-getattr"

    class Payload:
        def __reduce__(self):
            return (posix.system, (f"touch {marker}",))

    _repickle_metadata(folder, out, lambda member: Payload().__reduce__())
    ckpt = read_dcp(out)
    assert [f.code for f in ckpt.findings] == ["UNSAFE_PICKLE"]
    assert "posix.system" in ckpt.findings[0].message
    assert not marker.exists()
