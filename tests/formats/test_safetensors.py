"""The safetensors header reader: same listing as safetensors itself, precise CORRUPT findings, never raises."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.torch import save_file

from ckinspect.formats.safetensors import read_safetensors


def write_raw(path: Path, header: dict | bytes, data: bytes = b"", header_len: int | None = None) -> Path:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if header_len is None else header_len) + raw + data)
    return path


def corrupt_messages(ckpt) -> list[str]:
    assert all(f.code == "CORRUPT" for f in ckpt.findings)
    return [f.message for f in ckpt.findings]


def test_listing_matches_safe_open(tmp_path):
    tensors = {
        "model.embed.weight": torch.randn(10, 4),
        "model.norm.weight": torch.ones(4, dtype=torch.bfloat16),
        "model.head.weight": torch.randn(3, 4, dtype=torch.float16),
        "step": torch.tensor(7, dtype=torch.int64),
        "mask": torch.tensor([True, False]),
        "empty": torch.zeros(0, 5),
    }
    path = tmp_path / "m.safetensors"
    save_file(tensors, path, metadata={"format": "pt", "note": "hi"})

    ckpt = read_safetensors(path)

    assert ckpt.findings == []
    assert ckpt.format == "safetensors"
    assert ckpt.metadata == {"format": "pt", "note": "hi"}
    assert ckpt.file_bytes == path.stat().st_size and ckpt.files == [path]
    header_len = struct.unpack("<Q", path.read_bytes()[:8])[0]
    header = json.loads(path.read_bytes()[8 : 8 + header_len])
    with safe_open(path, framework="pt") as f:
        assert sorted(t.name for t in ckpt.tensors) == sorted(f.keys())
        for info in ckpt.tensors:
            real = f.get_tensor(info.name)
            assert info.dtype == str(real.dtype).removeprefix("torch.")
            assert info.shape == tuple(real.shape)
            assert info.stride == real.stride()
            assert info.nbytes == real.numel() * real.element_size()
            storage = ckpt.storages[info.storage_key]
            assert storage.key == info.name and storage.file == path
            begin, end = header[info.name]["data_offsets"]
            assert storage.offset == 8 + header_len + begin and storage.nbytes == end - begin
            # the offset really addresses the tensor's bytes
            with open(path, "rb") as raw:
                raw.seek(storage.offset)
                assert raw.read(storage.nbytes) == real.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    assert ckpt.tensor("model.norm.weight").dtype == "bfloat16"
    assert set(ckpt.tree) == set(tensors)


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda p: p.write_bytes(b"\x05\x00\x00"), "3 bytes, shorter than the 8-byte header length"),
        (
            lambda p: write_raw(p, {}, header_len=200_000_000),
            "exceeds safetensors' limit of 100,000,000 bytes (95.4 MiB)",
        ),
        (lambda p: write_raw(p, b'{"a": 1}', header_len=5000), "runs past the end of the 16-byte file"),
        (lambda p: write_raw(p, b'{"\xff\xfe": 1}'), "header is not valid UTF-8"),
        (lambda p: write_raw(p, b'{"a": [1, 2'), "header is not valid JSON at line 1"),
        (lambda p: write_raw(p, b"[1, 2]"), "safetensors header is JSON list, not an object"),
        (
            lambda p: write_raw(p, {"w": {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4),
            "tensor 'w': unknown dtype 'F33'",
        ),
        (
            lambda p: write_raw(p, {"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}}, b"\0" * 20),
            "tensor 'w': offsets [0, 20] hold 20 bytes but F32 [2, 3] needs 24",
        ),
        (
            lambda p: write_raw(p, {"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, b"\0" * 8),
            "tensor 'w': data_offsets [8, 0] end before they begin",
        ),
        (
            lambda p: write_raw(p, {"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, b"\0" * 8),
            "tensor 'w': shape [-2] is not a list of non-negative integers",
        ),
        (
            lambda p: write_raw(
                p,
                {
                    "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                    "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
                },
                b"\0" * 12,
            ),
            "tensor 'b': offsets [4, 12] overlap the previous tensor (ends at 8)",
        ),
        (
            lambda p: write_raw(
                p,
                {
                    "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                    "b": {"dtype": "F32", "shape": [2], "data_offsets": [12, 20]},
                },
                b"\0" * 20,
            ),
            "gap of 4 unused bytes before tensor 'b' (offsets 8..12)",
        ),
        (
            lambda p: write_raw(p, {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 10),
            "tensor 'w': offsets [0, 16] run past the end of the data (10 bytes; file truncated?)",
        ),
        (
            lambda p: write_raw(p, {"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 7),
            "3 trailing bytes after the last tensor",
        ),
        (
            lambda p: write_raw(p, {"__metadata__": {"step": 3}}),
            "__metadata__['step'] is int, not a string",
        ),
    ],
    ids=[
        "short", "oversized-header", "header-past-end", "not-utf8", "bad-json", "json-array",
        "unknown-dtype", "size-mismatch", "reversed-offsets", "negative-shape", "overlap", "gap",
        "beyond-file", "trailing", "metadata-not-string",
    ],
)  # fmt: skip
def test_corruption_is_a_precise_finding(tmp_path, make, expected):
    path = tmp_path / "bad.safetensors"
    make(path)
    ckpt = read_safetensors(path)
    messages = corrupt_messages(ckpt)
    assert any(expected in m for m in messages), messages
    assert ckpt.format == "safetensors"


def test_one_cause_per_broken_entry(tmp_path):
    # a malformed entry leaves a hole in the data: that is its fault, not a second "gap" problem
    header = {
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F33", "shape": [2], "data_offsets": [8, 16]},
    }
    ckpt = read_safetensors(write_raw(tmp_path / "x.safetensors", header, b"\0" * 16))
    assert corrupt_messages(ckpt) == ["tensor 'b': unknown dtype 'F33'"]
    assert [t.name for t in ckpt.tensors] == ["a"]


def test_truncated_real_file_keeps_listing_and_unaddressable_storage(tmp_path):
    path = tmp_path / "m.safetensors"
    save_file({"a": torch.zeros(100), "b": torch.zeros(100)}, path)
    data = path.read_bytes()
    path.write_bytes(data[:-50])
    ckpt = read_safetensors(path)
    assert [t.name for t in ckpt.tensors] == ["a", "b"]
    last = ckpt.storages["b"]
    assert last.offset is None  # its bytes are not all there: nothing may read them
    assert ckpt.storages["a"].offset is not None
    assert any("run past the end of the data" in m for m in corrupt_messages(ckpt))


def test_many_problems_are_capped(tmp_path):
    header = {f"t{i}": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]} for i in range(40)}  # 39 overlaps
    ckpt = read_safetensors(write_raw(tmp_path / "x.safetensors", header, b"\0" * 8))
    messages = corrupt_messages(ckpt)
    assert len(messages) == 11 and messages[-1] == "... and 29 more safetensors header problems"


def test_missing_file_is_a_finding_not_an_exception(tmp_path):
    ckpt = read_safetensors(tmp_path / "nope.safetensors")
    assert corrupt_messages(ckpt) == ["cannot read safetensors file: No such file or directory"]


def test_fifty_thousand_tensors_list_fast(tmp_path):
    n = 50_000
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for i in range(n):
        header[f"model.layers.{i // 10}.p{i % 10}.weight"] = {
            "dtype": "F16",
            "shape": [2, 2],
            "data_offsets": [offset, offset + 8],
        }
        offset += 8
    path = write_raw(tmp_path / "many.safetensors", header, b"\0" * offset)
    ckpt = read_safetensors(path)  # bench/safetensors_listing.py times this against safetensors' own reader
    assert ckpt.findings == [] and len(ckpt.tensors) == n and len(ckpt.storages) == n


GOOD = {"a": torch.zeros(3), "b": torch.zeros(2, 2, dtype=torch.bfloat16), "c": torch.zeros(0, dtype=torch.int64)}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    edits=st.lists(
        st.tuples(st.integers(0, 10_000), st.sampled_from(list(b'0123456789{}[],:" aFIU\x00\xff'))),
        min_size=1,
        max_size=3,
    ),
    cut=st.one_of(st.none(), st.integers(0, 400)),
    extra=st.binary(max_size=9),
)
def test_accepts_exactly_what_safetensors_accepts(tmp_path, edits, cut, extra):
    """Mutated files: never an exception, and a finding exactly when safetensors itself refuses the file."""
    path = tmp_path / "m.safetensors"
    save_file(GOOD, path, metadata={"format": "pt"})
    data = bytearray(path.read_bytes())
    header_len = struct.unpack("<Q", data[:8])[0]
    for position, byte in edits:
        data[8 + position % header_len] = byte
    if cut is not None:
        data = data[: min(cut, len(data))]
    path.write_bytes(bytes(data) + extra)

    try:
        with safe_open(path, framework="numpy") as f:
            f.keys()
        refused = False
    except Exception:
        refused = True
    ckpt = read_safetensors(path)
    assert all(f.code == "CORRUPT" for f in ckpt.findings)
    assert bool(ckpt.findings) == refused, [f.message for f in ckpt.findings]


def test_whitespace_before_the_header_object_is_accepted_like_safetensors(tmp_path):
    raw = b' {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}'
    ckpt = read_safetensors(write_raw(tmp_path / "m.safetensors", raw, b"\0" * 4))
    assert ckpt.findings == [] and ckpt.tensor("a").shape == (1,)
