"""io.zipfill, the zip layer's writer for torch archives: the records torch.save(skip_data) leaves empty,
written in place from their sources, give the file torch.save writes from the tensors in memory, byte for
byte (CRC-32s in the data descriptors and the central directory, and the serialization id torch derives
from them). Torch is the oracle."""

from __future__ import annotations

import os

import pytest

from ckinspect.io.zipfill import fill_records
from ckinspect.vocab import CkinspectError

torch = pytest.importorskip("torch")


class _Bytes:
    def __init__(self, data: bytes, piece: int = 7) -> None:
        self.data, self.piece = data, piece

    def chunks(self):
        return [self.data[i : i + self.piece] for i in range(0, len(self.data), self.piece)]


def _state():
    g = torch.Generator().manual_seed(0)
    return {"w": torch.randn(33, generator=g), "h": torch.ones(5, dtype=torch.float16), "e": torch.zeros(0)}


def _skeleton(path):
    with torch.serialization.skip_data():
        torch.save(_state(), path)


def test_filled_records_give_torch_saves_bytes(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    whole, filled = tmp_path / "a" / "m.pt", tmp_path / "b" / "m.pt"  # torch names the archive's folder by the file
    torch.save(_state(), whole)
    _skeleton(filled)
    assert filled.read_bytes() != whole.read_bytes()
    state = _state()  # torch numbers storages in the order its pickler meets them: w, h, e
    sources = {str(i): _Bytes(t.numpy().tobytes()) for i, t in enumerate(state.values())}
    fd = os.open(filled, os.O_RDWR)
    try:
        fill_records(fd, sources)
    finally:
        os.close(fd)
    assert filled.read_bytes() == whole.read_bytes()
    loaded = torch.load(filled, weights_only=True)
    assert all(torch.equal(loaded[k], v) for k, v in state.items())


def test_a_source_of_another_size_is_refused_with_the_record_named(tmp_path):
    filled = tmp_path / "filled.pt"
    _skeleton(filled)
    fd = os.open(filled, os.O_RDWR)
    try:
        with pytest.raises(CkinspectError, match=r"^data/0: 8 bytes written where torch.save left 132$"):
            fill_records(fd, {"0": _Bytes(b"\0" * 8)})
    finally:
        os.close(fd)
