"""sniff picks the reader from the bytes; describe says what a non-checkpoint looks like."""

from __future__ import annotations

import gzip
import io
import json
import pickle
import random
import struct
import zipfile

import pytest
import torch
from safetensors.torch import save_file

from ckinspect.formats.sniff import describe, sniff

LFS = b"version https://git-lfs.github.com/spec/v1\noid sha256:4d7a2146\nsize 1234567\n"


@pytest.fixture
def files(tmp_path):
    def make(name: str, data: bytes):
        path = tmp_path / name
        path.write_bytes(data)
        return path

    return make


def test_torch_files(tmp_path):
    zip_path, legacy_path = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.save({"w": torch.zeros(2)}, zip_path)
    torch.save({"w": torch.zeros(2)}, legacy_path, _use_new_zipfile_serialization=False)
    assert sniff(zip_path) == "torch-zip"
    assert sniff(legacy_path) == "torch-legacy"
    # a torch zip cut short has lost its directory but is still a torch zip (its reader says it is truncated)
    truncated = tmp_path / "cut.pt"
    truncated.write_bytes(zip_path.read_bytes()[:200])
    assert sniff(truncated) == "torch-zip"


@pytest.mark.parametrize("protocol", [0, 1, 2, 4, 5])
def test_legacy_magic_in_every_protocol(files, protocol):
    data = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=protocol) + pickle.dumps(1001, protocol=protocol)
    assert sniff(files("old.pt", data)) == "torch-legacy"


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_plain_pickles(files, protocol):
    assert sniff(files("x.pkl", pickle.dumps({"a": [1, 2.0, "x"]}, protocol=protocol))) == "pickle"


def test_safetensors_and_others(tmp_path, files):
    path = tmp_path / "m.safetensors"
    save_file({"w": torch.zeros(3)}, path)
    assert sniff(path) == "safetensors"
    assert sniff(files("renamed.bin", path.read_bytes())) == "safetensors"
    # a header whose length is absurd still goes to the safetensors reader, which says why
    assert sniff(files("big.safetensors", struct.pack("<Q", 2**33) + b"{}")) == "safetensors"
    assert sniff(files("short.safetensors", b"\x01\x02")) == "safetensors"
    assert sniff(files("m.safetensors.index.json", b"{}")) == "sharded"
    assert sniff(files("plain.zip", _zip({"readme.txt": b"hi"}))) == "unknown"


def test_dcp_folder(tmp_path):
    dcp = tmp_path / "step_10"
    dcp.mkdir()
    assert sniff(dcp) == "unknown"
    (dcp / "__0_0.distcp").write_bytes(b"x")
    assert sniff(dcp) == "dcp"
    only_meta = tmp_path / "step_20"
    only_meta.mkdir()
    (only_meta / ".metadata").write_bytes(b"x")
    assert sniff(only_meta) == "dcp"


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"", "empty"),
        (b"step=30\nloss=1.25\n", "text"),
        ("Grüße, ünïcode text\n".encode() * 300, "text"),
        (LFS, "a git-lfs pointer (run `git lfs pull`)"),
        (random.Random(4096).randbytes(4096), "random bytes"),  # fixed: some draws start like a header
        (b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head><body></body></html>", "an HTML page"),
        (b"\n  <html lang='en'><body>Access denied</body></html>", "an HTML page"),
        (json.dumps({"error": "not found"}).encode(), "JSON text"),
        (_zip({"readme.txt": b"hi"}), "a zip archive without data.pkl"),
        (gzip.compress(b"x" * 1000), "a gzip archive"),
        (b"\x00" * 5000, "zero bytes (a preallocated or unwritten file)"),
        (bytes(range(256)) * 2 + b"\x00" * 3000, "binary data"),
    ],
    ids=[
        "empty",
        "text",
        "unicode-text",
        "lfs",
        "random",
        "html",
        "html-indented",
        "json",
        "zip",
        "gzip",
        "zeros",
        "binary",
    ],
)
def test_describe(files, data, expected):
    path = files("model.pt", data)
    assert sniff(path) == "unknown"
    assert describe(path) == expected


def test_text_is_not_mistaken_for_an_old_pickle(files):
    # protocol 0 opcodes are printable letters: text starting with one must not become "pickle"
    for text in (b"I am a readme.\n", b"(draft) notes\n.", b"Now.", b"Loss went down."):
        assert sniff(files("notes", text)) == "unknown", text


def test_zip_with_data_pkl_later_in_the_archive(files):
    # not torch's own member order, but a zip whose members include */data.pkl is still a torch zip
    data = _zip({"archive/version": b"3", "archive/byteorder": b"little", "archive/data.pkl": b"\x80\x02}q\x00."})
    assert sniff(files("reordered.pt", data)) == "torch-zip"
