"""safetensors' packed sub-byte floats (F4: 4 bits, F6_*: 6 bits an element) and AMD's fp8 (F8_*FNUZ):
sizes counted in bits, diffs over the packed bytes, and a clean refusal where torch has no such dtype."""

import json
import struct

from ckinspect.formats import open_checkpoint
from tests.conftest import run_cli

# name -> (safetensors dtype, shape, bytes it occupies)
TENSORS = {
    "w4": ("F4", [64, 32], 1024),  # 2048 elements, two a byte
    "w6": ("F6_E2M3", [4, 8], 24),  # 32 elements x 6 bits
    "w6b": ("F6_E3M2", [4], 3),
    "scale": ("F8_E4M3FNUZ", [32], 32),
    "bias": ("F8_E5M2FNUZ", [8], 8),
}


def write(path, changed_byte=None):
    header, offset = {}, 0
    for name, (dtype, shape, nbytes) in TENSORS.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    data = bytearray(range(256)) * (offset // 256 + 1)
    data = data[:offset]
    if changed_byte is not None:
        data[changed_byte] ^= 0xFF
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def test_sizes_are_counted_in_bits(tmp_path):
    path = write(tmp_path / "packed.safetensors")
    ckpt = open_checkpoint(path)
    assert ckpt.findings == []
    assert {t.name: t.nbytes for t in ckpt.tensors} == {name: spec[2] for name, spec in TENSORS.items()}
    assert {t.name: t.dtype for t in ckpt.tensors} == {
        "w4": "float4_e2m1fn", "w6": "float6_e2m3fn", "w6b": "float6_e3m2fn",
        "scale": "float8_e4m3fnuz", "bias": "float8_e5m2fnuz",
    }  # fmt: skip

    proc = run_cli("--report", "--quick", "--format", "json", path)
    assert proc.returncode == 0, proc.stderr
    entry = json.loads(proc.stdout)["files"][0]
    assert {t["name"]: t["bytes"] for t in entry["tensors"]} == {name: spec[2] for name, spec in TENSORS.items()}
    assert entry["tensor_bytes"] == entry["storage_bytes"] == sum(spec[2] for spec in TENSORS.values())
    assert entry["findings"] == []


def test_a_packed_size_that_does_not_fill_whole_bytes_is_corrupt(tmp_path):
    raw = json.dumps({"w": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}).encode()
    path = tmp_path / "odd.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0\0")
    ckpt = open_checkpoint(path)
    assert [f.code for f in ckpt.findings] == ["CORRUPT"]
    assert "3 F4 elements do not fill whole bytes" in ckpt.findings[0].message


def test_diff_compares_packed_bytes_and_points_at_the_element(tmp_path):
    a = write(tmp_path / "a.safetensors")
    b = write(tmp_path / "b.safetensors", changed_byte=5)  # w4's byte 5 holds elements 10 and 11
    proc = run_cli("diff", a, b, "--report", "--format", "json")
    assert proc.returncode == 1, proc.stderr
    diff = json.loads(proc.stdout)["diff"]
    changed = {c["name"]: c for c in diff["changed"]}
    assert set(changed) == {"w4"} and changed["w4"]["first_index"] == [0, 10]
    assert changed["w4"]["n_diff"] == 1  # one byte
    assert not diff["unreadable"]


def test_convert_to_torch_refuses_what_torch_cannot_hold_in_one_line(tmp_path):
    path = write(tmp_path / "packed.safetensors")
    before = path.read_bytes()
    proc = run_cli("convert", path, tmp_path / "out.pt")
    assert proc.returncode == 2
    assert proc.stderr == "ckinspect: torch has no dtype float4_e2m1fn, and converting goes through torch\n"
    assert not (tmp_path / "out.pt").exists() and path.read_bytes() == before


def test_convert_to_safetensors_keeps_packed_tensors_byte_for_byte(tmp_path):
    """No torch on the way to safetensors: the packed bytes are copied as they are."""
    path = write(tmp_path / "packed.safetensors")
    proc = run_cli("convert", path, tmp_path / "out.safetensors")
    assert proc.returncode == 0, proc.stderr
    out = open_checkpoint(tmp_path / "out.safetensors")
    assert out.findings == []
    assert {t.name: (t.dtype, list(t.shape), t.nbytes) for t in out.tensors} == {
        t.name: (t.dtype, list(t.shape), t.nbytes) for t in open_checkpoint(path).tensors
    }
    data_bytes = sum(nbytes for _, _, nbytes in TENSORS.values())
    assert (tmp_path / "out.safetensors").read_bytes()[-data_bytes:] == path.read_bytes()[-data_bytes:]


def test_salvage_to_torch_names_the_packed_tensors_it_cannot_keep(tmp_path):
    path = write(tmp_path / "packed.safetensors")
    proc = run_cli("salvage", path, tmp_path / "out.pt", "--format", "json")
    result = json.loads(proc.stdout)
    missing = {m["tensor"]: m["why"] for m in result["missing"]}
    assert set(missing) == {"w4", "w6", "w6b"}
    assert missing["w4"] == "torch has no F4 dtype: salvage to a .safetensors file keeps it"
    assert set(result["recovered"]) == {"scale", "bias"}
    kept = run_cli("salvage", path, tmp_path / "out.safetensors", "--format", "json")
    assert set(json.loads(kept.stdout)["recovered"]) == set(TENSORS)
    assert (tmp_path / "out.safetensors").read_bytes()[-1088:] == path.read_bytes()[-1088:]
