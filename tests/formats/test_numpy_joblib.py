"""NumPy .npy/.npz arrays as tensors (object arrays scanned as pickles), and joblib's raw array blocks
read where joblib writes them, so an intact joblib file is judged by its globals, not called CORRUPT."""

from __future__ import annotations

import pickle

import joblib
import numpy as np
import pytest

from ckinspect.analysis.diff import value_blocks
from ckinspect.formats import open_checkpoint
from ckinspect.io.blobs import Blobs


def values(ckpt, name):
    t = next(t for t in ckpt.tensors if t.name == name)
    with Blobs() as blobs:
        return np.concatenate([b.ravel() for b in value_blocks(blobs, ckpt, t)])


def codes(ckpt):
    return sorted(f.code for f in ckpt.findings)


@pytest.mark.parametrize("order", ["C", "F"])
def test_npy_array_is_a_tensor_with_its_bytes(tmp_path, order):
    array = np.asarray(np.arange(12, dtype=np.float32).reshape(3, 4), order=order)
    np.save(tmp_path / "a.npy", array)
    ckpt = open_checkpoint(tmp_path / "a.npy")
    assert ckpt.format == "numpy" and codes(ckpt) == []
    (t,) = ckpt.tensors
    assert (t.name, t.dtype, t.shape) == ("tensor", "float32", (3, 4))
    assert values(ckpt, "tensor").tolist() == array.ravel(order="C").tolist()


def test_npz_stored_and_compressed_members(tmp_path):
    np.savez(tmp_path / "plain.npz", w=np.arange(5, dtype=np.int16), b=np.ones(2))
    np.savez_compressed(tmp_path / "small.npz", w=np.arange(5, dtype=np.int16))
    plain = open_checkpoint(tmp_path / "plain.npz")
    assert sorted((t.name, t.dtype, t.shape) for t in plain.tensors) == [("b", "float64", (2,)), ("w", "int16", (5,))]
    assert values(plain, "w").tolist() == [0, 1, 2, 3, 4]
    small = open_checkpoint(tmp_path / "small.npz")
    assert [(t.name, t.dtype, t.shape) for t in small.tensors] == [("w", "int16", (5,))]
    assert small.storages["npy/w"].offset is None  # deflated: listed, not addressable in place


def test_object_array_is_a_pickle_and_is_scanned(tmp_path):
    np.save(tmp_path / "obj.npy", np.array([print, 1], dtype=object), allow_pickle=True)
    ckpt = open_checkpoint(tmp_path / "obj.npy")
    assert codes(ckpt) == ["UNSAFE_PICKLE"] and "builtins.print" in ckpt.findings[0].message
    assert ckpt.tensors == []


def test_truncated_npy_is_corrupt(tmp_path):
    np.save(tmp_path / "a.npy", np.ones(100))
    data = (tmp_path / "a.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[:-8])
    ckpt = open_checkpoint(tmp_path / "cut.npy")
    assert codes(ckpt) == ["CORRUPT"] and "needs 800 bytes but the file holds 792" in ckpt.findings[0].message


def test_joblib_arrays_are_read_where_joblib_writes_them(tmp_path):
    weights = np.arange(10.0)
    fortran = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    path = tmp_path / "model.joblib"
    joblib.dump(
        {"w": weights, "f": fortran, "names": np.array(["a", "b"]), "o": np.array([1, "x"], dtype=object)}, path
    )
    ckpt = open_checkpoint(path)
    assert ckpt.format == "pickle"
    assert codes(ckpt) == ["UNSAFE_PICKLE"]  # joblib's wrapper is a class pickle would import, not damage
    assert "joblib.numpy_pickle.NumpyArrayWrapper" in ckpt.findings[0].message
    assert ckpt.metadata["joblib_arrays"] == 4
    listed = {t.dtype: t for t in ckpt.tensors}
    assert sorted(listed) == ["float32", "float64"]  # the string and object arrays are not tensors
    assert values(ckpt, listed["float64"].name).tolist() == weights.tolist()
    assert values(ckpt, listed["float32"].name).tolist() == fortran.ravel(order="C").tolist()


def test_a_cut_joblib_file_is_corrupt(tmp_path):
    path = tmp_path / "model.joblib"
    joblib.dump({"w": np.arange(1000.0)}, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 4000])
    ckpt = open_checkpoint(path)
    assert "CORRUPT" in codes(ckpt) and "runs past the end of the file" in " ".join(f.message for f in ckpt.findings)


def test_old_protocol_pickles_of_any_size_are_scanned(tmp_path):
    """Protocol 0 over 1 MiB with Python 2 byte strings: a pickle, judged by its globals, not "text"."""
    table = {f"\u5b57{i}": float(i) / 7 for i in range(60_000)}
    path = tmp_path / "prob_emit.p"
    path.write_bytes(pickle.dumps(table, protocol=0))
    assert path.stat().st_size > 1 << 20
    ckpt = open_checkpoint(path)
    assert ckpt.format == "pickle" and codes(ckpt) == []
    hostile = tmp_path / "big_hostile.p"
    hostile.write_bytes(pickle.dumps(table, protocol=0)[:-1] + b"0cos\nsystem\n(S'true'\ntR.")
    assert codes(open_checkpoint(hostile)) == ["UNSAFE_PICKLE"]
