"""np.savez_compressed, with numpy as the oracle: a deflated .npz member's values are read as numpy reads them
(streamed through io.values, never inflated whole), so the value scan counts its NaN and Inf, a diff compares
it value for value (against the same values in a plain np.savez file too), and convert writes its values, not
the member's .npy header. Before, such members were listed only: "no findings" with NaN inside, a diff that
could not compare them, and a convert that wrote the header's bytes as the first elements."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from ckinspect.analysis.diff import diff_checkpoints
from ckinspect.analysis.scan import scan_values
from ckinspect.formats import open_checkpoint
from ckinspect.io.reader import FileReader
from ckinspect.io.zipdir import data_offset, read_directory
from ckinspect.ops.convert import convert
from tests.parity.test_numpy_parity import DTYPES, values
from tests.parity.test_torch_parity import ckinspect_bytes

SAFETENSORS_HOLDS = {"f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "b1"}


def native(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.astype(a.dtype.newbyteorder("=")))


@pytest.mark.parametrize("order", ["little", "big"])
@pytest.mark.parametrize("code", DTYPES)
def test_compressed_members_are_scanned_diffed_and_converted_as_numpy_reads_them(
    code: str, order: str, tmp_path: Path
) -> None:
    a = values(code)
    if order == "big" and a.itemsize > 1:
        a = a.astype(">" + code)
    np.savez_compressed(tmp_path / "c.npz", a=a, twice=a)
    np.savez(tmp_path / "p.npz", a=native(a), twice=native(a))
    loaded = np.load(tmp_path / "c.npz")
    ckpt = open_checkpoint(tmp_path / "c.npz")
    assert ckpt.storages["npy/a"].deflated is not None
    stats = scan_values(ckpt).stats
    for t in ckpt.tensors:
        expected = native(loaded[t.name])
        assert ckinspect_bytes(ckpt, t) == expected.tobytes()
        if code[0] in "fc":
            nan, nonfinite = int(np.isnan(expected).sum()), int((~np.isfinite(expected)).sum())
            assert (stats[t.name].nan, stats[t.name].nonfinite) == (nan, nonfinite)
    if code[0] in "fc":
        assert {f.code for f in scan_values(ckpt).findings} == {"NONFINITE"}
    same = diff_checkpoints(ckpt, open_checkpoint(tmp_path / "p.npz"))
    assert same.identical and sorted(same.same) == ["a", "twice"], (same.changed, same.unreadable)
    changed = native(a).copy()
    changed.reshape(-1).view(np.uint8)[-1] ^= 1
    np.savez_compressed(tmp_path / "changed.npz", a=changed, twice=native(a))
    other = diff_checkpoints(ckpt, open_checkpoint(tmp_path / "changed.npz"))
    assert [(c.name, c.n_diff) for c in other.changed] == [("a", 1)] and other.same == ["twice"]
    if code in SAFETENSORS_HOLDS:
        from safetensors.numpy import load_file

        convert(tmp_path / "c.npz", tmp_path / "out.safetensors", announce=lambda _: None)
        written = load_file(tmp_path / "out.safetensors")
        assert written["a"].tobytes() == native(loaded["a"]).tobytes()
        assert written["a"].shape == loaded["a"].shape


def test_a_large_member_is_read_across_many_blocks_in_bounded_memory(tmp_path: Path) -> None:
    """256 MiB of float32 (mostly zeros, so the file is small) with NaN and Inf at block edges: counted
    exactly, and the scan and the diff hold a few blocks, never the member (a whole inflate holds 256 MiB)."""
    n = 64 << 20
    a = np.zeros(n, dtype=np.float32)
    a[[0, (1 << 20) - 1, 1 << 20, (8 << 20) - 1, n - 1]] = [np.nan, np.inf, -np.inf, np.nan, np.nan]
    np.savez_compressed(tmp_path / "big.npz", w=a)
    b = a.copy()
    b[(8 << 20) + 3] = 1.5
    np.savez_compressed(tmp_path / "other.npz", w=b)
    del a, b
    assert (tmp_path / "big.npz").stat().st_size < 1 << 20
    ckpt = open_checkpoint(tmp_path / "big.npz")
    tracemalloc.start()
    try:
        stats = scan_values(ckpt).stats["w"]
        result = diff_checkpoints(ckpt, open_checkpoint(tmp_path / "other.npz"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (stats.nan, stats.nonfinite) == (3, 5)
    assert [(c.name, c.n_diff, c.first_index) for c in result.changed] == [("w", 1, [(8 << 20) + 3])]
    assert peak < 64 << 20, f"peak {peak >> 20} MiB for a 256 MiB member"


def test_fortran_order_member_is_scanned_and_its_c_order_reads_say_why_not(tmp_path: Path) -> None:
    a = np.asfortranarray(values("f4"))
    np.savez_compressed(tmp_path / "f.npz", a=a)
    np.savez(tmp_path / "plain.npz", a=a)
    ckpt = open_checkpoint(tmp_path / "f.npz")
    stats = scan_values(ckpt).stats["a"]
    assert (stats.nan, stats.nonfinite) == (1, 3)
    result = diff_checkpoints(ckpt, open_checkpoint(tmp_path / "plain.npz"))
    assert not result.identical and [name for name, _ in result.unreadable] == ["a"]
    assert "cannot be read without inflating the member whole" in result.unreadable[0][1]


def _damaged(tmp_path: Path, how: str) -> Path:
    a = np.linspace(0, 1, 4096, dtype=np.float64)
    np.savez_compressed(tmp_path / "ok.npz", w=a)
    data = bytearray((tmp_path / "ok.npz").read_bytes())
    with open(tmp_path / "ok.npz", "rb") as f:
        reader = FileReader(f.fileno(), len(data))
        (member,), _ = read_directory(reader)
        start = data_offset(reader, member)
    if how == "crc":  # the zip entry's CRC-32 no longer matches what the stream inflates to
        central = bytes(data).rindex(b"PK\x01\x02")
        data[central + 16] ^= 0xFF
    else:  # bytes inside the deflate stream
        for i in range(start + member.compressed_size // 2, start + member.compressed_size // 2 + 16):
            data[i] ^= 0x5A
    (tmp_path / f"{how}.npz").write_bytes(bytes(data))
    return tmp_path / f"{how}.npz"


@pytest.mark.parametrize("how", ["crc", "stream"])
def test_a_damaged_member_is_corrupt_as_numpy_refuses_it(how: str, tmp_path: Path) -> None:
    path = _damaged(tmp_path, how)
    with pytest.raises(Exception):  # noqa: B017 - zipfile's BadZipFile or zlib.error, as numpy lets them through
        np.load(path)["w"]
    out = subprocess.run([sys.executable, "-m", "ckinspect", "--report", "--format", "json", str(path)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 1, out.stderr
    findings = json.loads(out.stdout)["files"][0]["findings"]
    assert [(f["code"], f.get("tensor")) for f in findings] == [("CORRUPT", "w")]
    assert "w.npy" in findings[0]["message"]


@pytest.mark.parametrize("crc", [True, False])
def test_a_torch_save_whose_members_a_zip_tool_deflated_is_read_as_torch_reads_it(crc: bool, tmp_path: Path) -> None:
    """torch.load inflates deflated members (its miniz reader does): a torch.save archive re-zipped with deflate
    (by zipfile here, as a user's archiver would) has its NaN counted, is identical to the original, converts
    value for value. Without CRCs (compute_crc32=False), the stream is not held to the zeros."""
    import zipfile

    import torch

    w = torch.linspace(-3, 3, 4096)
    w[7], w[4000] = float("nan"), float("-inf")
    state = {"w": w, "h": w.to(torch.bfloat16), "i": torch.arange(300)}
    torch.save(state, tmp_path / "stored.pt")
    with zipfile.ZipFile(tmp_path / "stored.pt") as zi, zipfile.ZipFile(tmp_path / "deflated.pt", "w") as zo:
        for info in zi.infolist():
            zo.writestr(info.filename, zi.read(info.filename), compress_type=zipfile.ZIP_DEFLATED)
    if not crc:  # the zeros torch.save writes under compute_crc32=False, as an archiver copying entries keeps them
        data = bytearray((tmp_path / "deflated.pt").read_bytes())
        pos = 0
        while (pos := bytes(data).find(b"PK\x01\x02", pos)) >= 0:
            data[pos + 16 : pos + 20] = b"\0\0\0\0"
            pos += 4
        pos = 0
        while (pos := bytes(data).find(b"PK\x03\x04", pos)) >= 0:
            data[pos + 14 : pos + 18] = b"\0\0\0\0"
            pos += 4
        (tmp_path / "deflated.pt").write_bytes(bytes(data))
    loaded = torch.load(tmp_path / "deflated.pt", weights_only=True)
    ckpt = open_checkpoint(tmp_path / "deflated.pt")
    assert all(ckpt.storages[t.storage_key].deflated is not None for t in ckpt.tensors)
    assert (ckpt.storages[ckpt.tensor("w").storage_key].deflated[4] is None) == (not crc)
    scan = scan_values(ckpt)
    assert sorted((f.code, f.tensor) for f in scan.findings) == [("NONFINITE", "h"), ("NONFINITE", "w")]
    assert scan.skipped == []
    for name in ("w", "h"):
        assert (scan.stats[name].nan, scan.stats[name].nonfinite) == (1, 2), name
        assert ckinspect_bytes(ckpt, ckpt.tensor(name)) == loaded[name].view(torch.uint8).numpy().tobytes()
    result = diff_checkpoints(open_checkpoint(tmp_path / "stored.pt"), ckpt)
    assert result.identical and sorted(result.same) == ["h", "i", "w"], (result.changed, result.unreadable)
    from safetensors.torch import load_file

    convert(tmp_path / "deflated.pt", tmp_path / "out.safetensors", announce=lambda _: None)
    written = load_file(tmp_path / "out.safetensors")
    assert all(torch.equal(written[k].view(torch.uint8), loaded[k].view(torch.uint8)) for k in loaded)
