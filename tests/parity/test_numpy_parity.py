"""NumPy is the oracle for .npy and .npz: a big-endian array (numpy writes `>f4` as it is held, and reads it
anywhere by swapping) is listed, its values read as numpy reads them, its NaN and Inf counted, and a diff
against the same values saved little-endian finds them identical. Before, such arrays were left unlisted
('arrays_not_listed'): a NaN in them went unreported."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ckinspect.analysis.diff import diff_checkpoints
from ckinspect.analysis.scan import scan_values
from ckinspect.formats import open_checkpoint
from tests.parity.test_torch_parity import ckinspect_bytes

DTYPES = ("f2", "f4", "f8", "c8", "c16", "i2", "i4", "i8", "u2", "u4", "u8", "i1", "u1", "b1")
CONTAINERS = ("npy", "npz")  # np.savez_compressed members: tests/parity/test_npz_compressed.py


def values(code: str) -> np.ndarray:
    rng = np.random.default_rng(25)
    if code[0] in "fc":
        a = (rng.standard_normal(12) * 3).astype(code)
        if code[0] == "c":
            a.imag = rng.standard_normal(12)
            a[3] = complex(np.nan, 1.0)
            a[4] = complex(1.0, np.inf)
        a[1], a[5], a[7] = np.nan, np.inf, -np.inf
        return a.reshape(3, 4)
    if code == "b1":
        return rng.integers(0, 2, 12).astype(bool).reshape(3, 4)
    info = np.iinfo(code)
    return rng.integers(max(info.min, -(2**62)), min(info.max, 2**62), 12).astype(code).reshape(3, 4)


def save(path: Path, a: np.ndarray, container: str) -> Path:
    if container == "npy":
        np.save(path.with_suffix(".npy"), a)
        return path.with_suffix(".npy")
    np.savez(path.with_suffix(".npz"), a=a)
    return path.with_suffix(".npz")


@pytest.mark.parametrize("container", CONTAINERS)
@pytest.mark.parametrize("code", DTYPES)
def test_big_endian_arrays_read_as_numpy_reads_them(code: str, container: str, tmp_path: Path) -> None:
    little = values(code).astype("<" + code if code not in ("i1", "u1", "b1") else code)
    big = little.astype(">" + code) if little.itemsize > 1 else little
    paths = {order: save(tmp_path / order, a, container) for order, a in (("little", little), ("big", big))}
    for order, path in paths.items():
        loaded = np.load(path)
        expected = loaded if container == "npy" else loaded["a"]
        ckpt = open_checkpoint(path)
        assert "arrays_not_listed" not in ckpt.metadata
        (t,) = ckpt.tensors
        assert t.shape == expected.shape
        native = np.ascontiguousarray(expected.astype(expected.dtype.newbyteorder("=")))
        assert ckinspect_bytes(ckpt, t) == native.tobytes(), order
        stats = scan_values(ckpt).stats
        if code[0] in "fc":
            nan = int(np.isnan(native).sum())
            nonfinite = int((~np.isfinite(native)).sum())
            assert (stats[t.name].nan, stats[t.name].nonfinite) == (nan, nonfinite), order
    result = diff_checkpoints(open_checkpoint(paths["little"]), open_checkpoint(paths["big"]))
    assert result.identical, (result.changed, result.unreadable)
    changed = little.copy()
    changed.reshape(-1).view(np.uint8)[-1] ^= 1  # the last byte of the last element, in either order
    other = save(tmp_path / "changed", changed.astype(big.dtype), container)
    assert not diff_checkpoints(open_checkpoint(paths["big"]), open_checkpoint(other)).identical
