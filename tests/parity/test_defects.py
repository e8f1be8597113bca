"""Each defect class of issue 25 outside the harness's matrix, as a user meets it: exact outcomes (finding codes,
exit statuses, names), and a hostile pickle whose formatting must stay bounded (a generous subprocess
timeout, never a timing assert)."""

from __future__ import annotations

import json
import pickle
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
import torch.utils.serialization as serialization

from ckinspect.analysis.scan import scan_values
from ckinspect.formats import open_checkpoint
from tests.conftest import cli_env, run_cli

pytestmark = pytest.mark.usefixtures("pickle_paths")  # on the compiled pickle pass and the pure path

# ---------------------------------------------------------------- bounded formatting


def _nested(levels: int, close: bytes, memo: int) -> bytes:
    """Opcodes leaving on the stack a list (close b"l") or tuple (b"t") of two of the one before, `levels`
    deep, through the memo (from index `memo`): a few bytes per level, 2**levels leaves when unfolded."""

    def put(i: int) -> bytes:
        return b"r" + struct.pack("<I", memo + i)

    def get(i: int) -> bytes:
        return b"j" + struct.pack("<I", memo + i)

    out = (b"]" if close == b"l" else b")") + put(0) + b"0"  # each level memoised, then popped
    for i in range(levels):
        out += b"(" + get(i) + get(i) + close + put(i + 1) + b"0"
    return out + get(levels)


def _tensor_opcodes(key: str, location: bytes = b"X\x03\x00\x00\x00cpu") -> bytes:
    return (b"ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX"
            + struct.pack("<I", len(key)) + key.encode() + location + b"K\x04tQK\x00K\x04\x85K\x01\x85\x89"
            b"ccollections\nOrderedDict\n)RtR")  # fmt: skip


def hostile_archive(path: Path) -> Path:
    """A torch zip whose data.pkl (a few hundred bytes) holds a torch.device, a pathlib path and a storage
    location built from 60 levels of shared substructure (2**60 leaves unfolded), beside one ordinary tensor.
    (A dict key of such tuples is not here: CPython's own unpickler hashes it for 2**60 steps.)"""
    pkl = b"\x80\x02}("  # EMPTY_DICT, MARK
    pkl += b"X\x01\x00\x00\x00w" + _tensor_opcodes("0")
    pkl += b"X\x03\x00\x00\x00dev" + b"ctorch\ndevice\n" + _nested(60, b"l", 1000) + b"\x85R"
    pkl += b"X\x04\x00\x00\x00path" + b"cpathlib\nPosixPath\n" + _nested(60, b"l", 2000) + b"\x85R"
    pkl += b"X\x01\x00\x00\x00v" + _tensor_opcodes("0", location=_nested(60, b"l", 3000))
    pkl += b"u."
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("archive/data.pkl", pkl)
        zf.writestr("archive/byteorder", b"little")
        zf.writestr("archive/data/0", struct.pack("<4f", 1, 2, 3, 4))
    return path


def test_formatting_a_hostile_pickle_is_bounded_by_what_it_prints(tmp_path):
    path = hostile_archive(tmp_path / "laughs.pt")
    proc = subprocess.run([sys.executable, "-m", "ckinspect", "--report", "--format", "json", str(path)],
                          capture_output=True, text=True, timeout=300, env=cli_env())  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    entry = json.loads(proc.stdout)["files"][0]
    # pathlib.PosixPath is benign; the shared structure's POP and LIST are opcodes torch's safe loader lacks
    assert [f["code"] for f in entry["findings"]] == ["ALLOWLIST_NEEDED", "WEIGHTS_ONLY_REFUSED"]
    assert [t["name"] for t in entry["tensors"]] == ["w", "v"]
    assert entry["storage_bytes"] == 16


# ---------------------------------------------------------------- CRCs


def test_one_zero_crc_among_real_ones_is_still_damage(tmp_path):
    path = tmp_path / "one.pt"
    torch.save({"a": torch.ones(4), "b": torch.arange(4.0)}, path)
    raw = bytearray(path.read_bytes())
    at = raw.find(b"PK\x01\x02")
    while raw[at + 46 : at + 46 + len(b"one/data/1")] != b"one/data/1":  # that member's central directory entry
        at = raw.find(b"PK\x01\x02", at + 4)
    raw[at + 16 : at + 20] = b"\0\0\0\0"  # its CRC-32, what torch's reader and ckinspect check against
    path.write_bytes(bytes(raw))
    ckpt = open_checkpoint(path)
    assert [f.code for f in ckpt.findings] == []
    found = [f.message for f in scan_values(ckpt).findings]
    assert len(found) == 1 and found[0].startswith("CRC mismatch in one/data/1 (expected 00000000"), found


def test_a_save_without_crcs_is_an_info_and_still_scanned(tmp_path):
    path = tmp_path / "nocrc.pt"
    serialization.config.save.compute_crc32 = False
    try:
        torch.save({"w": torch.tensor([1.0, float("nan")])}, path)
    finally:
        serialization.config.save.compute_crc32 = True
    proc = run_cli("--report", "--format", "json", path)
    findings = json.loads(proc.stdout)["files"][0]["findings"]
    assert [(f["code"], f["severity"]) for f in findings] == [("CRC_NOT_RECORDED", "info"), ("NONFINITE", "error")]
    assert proc.returncode == 1


# ---------------------------------------------------------------- safetensors float8 and complex


def _safetensors(path: Path, tensors: dict[str, tuple[str, list[int], bytes]]) -> Path:
    header, data, offset = {}, b"", 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        data += raw
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def test_nan_and_inf_in_safetensors_float8_and_complex_are_counted_as_torch_counts_them(tmp_path):
    codes = bytes([0x00, 0x7F, 0xFF, 0x7C, 0xFC, 0x80, 0x38, 0x7E])
    cplx = torch.tensor([complex(1, 2), complex(float("nan"), 0), complex(0, float("inf")), complex(float("nan"),
                         float("inf"))], dtype=torch.complex64)  # fmt: skip
    tensors = {name: (st, [8], codes) for name, st in (("e4m3", "F8_E4M3"), ("e5m2", "F8_E5M2"),
               ("e8m0", "F8_E8M0"), ("e4m3fnuz", "F8_E4M3FNUZ"), ("e5m2fnuz", "F8_E5M2FNUZ"))}  # fmt: skip
    tensors["c64"] = ("C64", [4], cplx.numpy().tobytes())
    path = _safetensors(tmp_path / "fp8.safetensors", tensors)
    stats = scan_values(open_checkpoint(path)).stats
    dtypes = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "e8m0": torch.float8_e8m0fnu,
              "e4m3fnuz": torch.float8_e4m3fnuz, "e5m2fnuz": torch.float8_e5m2fnuz}  # fmt: skip
    for name, dtype in dtypes.items():
        t = torch.frombuffer(bytearray(codes), dtype=torch.uint8).view(dtype).float()
        assert (stats[name].nan, stats[name].nonfinite) == (int(t.isnan().sum()), int((~t.isfinite()).sum())), name
    assert (stats["c64"].nan, stats["c64"].nonfinite) == (int(cplx.isnan().sum()), int((~cplx.isfinite()).sum()))
    assert (stats["e8m0"].nan, stats["c64"].nan, stats["c64"].nonfinite) == (1, 2, 3)


# ---------------------------------------------------------------- names, convert


def test_full_names_in_json_and_sarif(tmp_path):
    path = tmp_path / "long.pt"
    long_key = "layer_" + "x" * 3000
    torch.save({long_key: torch.tensor([float("nan")]), "a": {"b" * 1500: {"c" * 1500: torch.zeros(1)}}}, path)
    report = json.loads(run_cli("--report", "--format", "json", path).stdout)["files"][0]
    assert [t["name"] for t in report["tensors"]] == [long_key, f"a.{'b' * 1500}.{'c' * 1500}"]
    assert report["findings"][0]["tensor"] == long_key
    sarif = json.loads(run_cli("--report", "--format", "sarif", path).stdout)
    (result,) = sarif["runs"][0]["results"]
    names = [loc["fullyQualifiedName"] for loc in result["locations"][0].get("logicalLocations", [])]
    assert names == [long_key]


def test_nothing_to_write_names_the_groups_asked_for_and_those_there(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save({"w": torch.ones(2)}, path)
    proc = run_cli("convert", path, tmp_path / "out.safetensors", "--only", "optimizer")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "ckinspect: nothing to write: no tensors in group(s) optimizer (this file has model)"


def test_convert_counts_and_names_what_it_left_out(tmp_path):
    path = tmp_path / "mixed.pt"
    torch.save({"w": torch.ones(2), "c": torch.ones(2, dtype=torch.complex128)}, path)
    out = tmp_path / "out.safetensors"
    proc = run_cli("convert", path, out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].endswith(" bytes, 1 left out")
    assert "1 tensor(s) left out: the safetensors output cannot hold their dtype (c)" in proc.stdout
    refused = run_cli("convert", path, tmp_path / "refused.safetensors", "--refuse-left-out")
    assert refused.returncode == 2
    assert refused.stderr.strip() == ("ckinspect: refused: safetensors cannot hold 1 tensor(s) of this file: "
                                      "c (complex128); nothing was written")  # fmt: skip
    assert not (tmp_path / "refused.safetensors").exists()


# ---------------------------------------------------------------- salvage of big-endian and CRC-less saves


def test_salvage_swaps_a_big_endian_save_and_accepts_one_without_crcs(tmp_path):
    from ckinspect.ops.salvage import salvage
    from tests.parity import torch_cases as tc

    saved = {"f": tc.base_values("float32"), "c": tc.base_values("complex64"), "u": tc.base_values("uint16"),
             "z": torch.arange(4096.0)}  # fmt: skip
    for crc in (True, False):
        path = tmp_path / f"big-{crc}.pt"
        with tc.save_config(crc=crc):
            tc.save_big_endian(saved, path)
        expected = torch.load(path, weights_only=True)  # torch's values: typed storages swapped, uint16 not
        raw = path.read_bytes()
        cut = tmp_path / f"cut-{crc}.pt"
        cut.write_bytes(raw[: raw.find(b"/data/3") + 1000])  # 1000 bytes into z's storage (16 KiB)
        for out in (tmp_path / f"out-{crc}.pth", tmp_path / f"out-{crc}.safetensors"):
            result = salvage(cut, out)
            assert sorted(result.recovered) == ["c", "f", "u"], result.missing
            if out.suffix == ".pth":
                back = torch.load(out, weights_only=True)
                assert back.pop("ckinspect_salvage")["missing"] == [n for n, _ in result.missing]  # recorded
            else:
                from safetensors.torch import load_file

                back = load_file(out)
            assert {k: v.view(torch.uint8).tolist() for k, v in back.items()} == {
                k: expected[k].view(torch.uint8).tolist() for k in ("c", "f", "u")}  # fmt: skip


def test_convert_to_pth_names_the_quantized_tensors_it_leaves_out_and_why(tmp_path):
    """A .pth from the listing has no quantizer (scale, zero point) to give a quantized tensor: each is left out,
    named, with that reason; per-channel scales and zero points, plain tensors, are written as torch saved them."""
    q = torch.quantize_per_tensor(torch.tensor([0.5, -1.0, 2.0]), 0.25, 3, torch.quint8)
    pc = torch.quantize_per_channel(torch.ones(2, 3), torch.tensor([0.5, 0.25], dtype=torch.float64),
                                    torch.tensor([0, 1]), 0, torch.qint8)  # fmt: skip
    path, out = tmp_path / "quantized.pt", tmp_path / "out.pth"
    torch.save({"q": q, "pc": pc, "w": torch.arange(3.0)}, path)
    proc = run_cli("convert", path, out)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].endswith(" bytes, 2 left out")
    assert ("2 tensor(s) left out: the torch-zip output cannot hold their dtype (q, pc.values); quantized: "
            "ckinspect reads their integers but does not rebuild the scale and zero point; pass --refuse-left-out "
            "to refuse instead") in proc.stdout  # fmt: skip
    assert "pc (per_channel_affine, shape [2, 3]) written as its parts: pc.scales, pc.zero_points" in proc.stdout
    loaded = torch.load(out, weights_only=True)
    assert sorted(loaded) == ["pc", "w"] and sorted(loaded["pc"]) == ["scales", "zero_points"]
    assert torch.equal(loaded["w"], torch.arange(3.0))
    assert torch.equal(loaded["pc"]["scales"], pc.q_per_channel_scales())
    assert torch.equal(loaded["pc"]["zero_points"], pc.q_per_channel_zero_points())
    refused = run_cli("convert", path, tmp_path / "refused.pth", "--refuse-left-out")
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "ckinspect: refused: torch-zip cannot hold 2 tensor(s) of this file: q (quint8), pc.values (qint8); "
        "quantized: ckinspect reads their integers but does not rebuild the scale and zero point; nothing was written"
    )
    assert not (tmp_path / "refused.pth").exists()


def test_weights_only_refusal_is_found_past_a_thousand_long_strings(tmp_path):
    """A protocol-2 save whose LONG4 integer (an opcode torch's weights_only unpickler lacks) comes after 1,200
    strings of 300 bytes: torch refuses it. The check once counted each long string as one of its 1,000 steps
    and stopped before the LONG4 ('no findings'); strings are now stepped over, not counted."""
    path = tmp_path / "long.pt"
    torch.save({"names": ["x" * 300 + str(i) for i in range(1200)], "big": 2**2100, "w": torch.ones(3)}, path)
    with pytest.raises(pickle.UnpicklingError, match="Unsupported operand 139"):  # 0x8b, LONG4
        torch.load(path, weights_only=True)
    (finding,) = open_checkpoint(path).findings
    assert finding.code == "WEIGHTS_ONLY_REFUSED" and "LONG4" in finding.message
