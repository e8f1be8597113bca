"""io.zipwrite, the zip layer's streaming writer for torch archives: the records written one by one from
their sources in small pieces give the file torch.save writes from the same tensors in memory, byte for
byte (the 64-byte alignment, the data descriptors and their CRC-32s, the central directory, the zip64 end
records and the serialization id), and torch.load reads it. Torch is the oracle."""

from __future__ import annotations

import io
import struct

import pytest

from ckinspect.io.zipwrite import TorchArchiveWriter, _padding
from ckinspect.vocab import CkinspectError

torch = pytest.importorskip("torch")


def _pieces(data: bytes, piece: int = 7):
    return [data[i : i + piece] for i in range(0, len(data), piece)]


def _state():
    g = torch.Generator().manual_seed(0)
    return {"w": torch.randn(33, generator=g), "h": torch.ones(5, dtype=torch.float16), "e": torch.zeros(0)}


def _streamed(state) -> bytes:
    """The archive written record by record: torch's pickle (from torch.save of the same object, with the
    storages' bytes fed back as pieces), the records in torch's order."""
    from ckinspect.ops.torchio import record_names_hash

    whole = io.BytesIO()
    torch.save(state, whole)
    import zipfile

    out = io.BytesIO()
    writer = TorchArchiveWriter(out)
    with zipfile.ZipFile(io.BytesIO(whole.getvalue())) as archive:
        for info in archive.infolist():
            name = info.filename.partition("/")[2]
            if name in ("version", ".data/serialization_id"):
                continue  # the writer adds these at the end, as torch's does
            writer.write_record(name, _pieces(archive.read(info)), info.file_size)
    writer.finish(record_names_hash)
    return out.getvalue()


def test_a_streamed_archive_is_byte_for_byte_what_torch_save_writes():
    state = _state()
    expected = io.BytesIO()
    torch.save(state, expected)  # to a file object: the archive's folder is "archive"
    streamed = _streamed(state)
    assert streamed == expected.getvalue()
    loaded = torch.load(io.BytesIO(streamed), weights_only=True)
    assert all(torch.equal(loaded[k], v) for k, v in state.items())


def test_a_source_of_another_size_is_refused_with_the_record_named():
    writer = TorchArchiveWriter(io.BytesIO())
    with pytest.raises(CkinspectError, match=r"^data/0: 8 bytes written where the archive declares 132$"):
        writer.write_record("data/0", [b"\0" * 8], 132)


def test_records_past_4_gib_get_torchs_zip64_fields():
    """Where torch's writer (miniz) adds zip64 fields: a record of 4 GiB or more, or one starting past 4 GiB.
    Its padding counts them, so the record's first byte is still 64-byte aligned; the local zip64 field
    holds the size and a compressed size of 0 (miniz writes it before the bytes), the directory's both."""
    far = 5 << 30
    name = b"archive/data/7"
    pad = _padding(far, len(name), 10)
    assert (far + 30 + len(name) + 12 + len(pad)) % 64 == 0  # the zip64 field (4 + 8) comes first
    big = 4 << 30
    assert (30 + len(name) + 20 + len(_padding(0, len(name), big))) % 64 == 0

    class Sink:
        def __init__(self):
            self.head = b""

        def write(self, data):
            if len(self.head) < 4096:
                self.head += bytes(data[:4096])

    sink = Sink()
    writer = TorchArchiveWriter(sink)
    writer.pos = far  # as if 5 GiB had been written before this record
    writer.write_record("data/7", [b"x" * 10], 10)
    sig, _v, flags, _m, _t, _d, _crc, _cs, _us, nlen, xlen = struct.unpack_from("<4sHHHHHLLLHH", sink.head)
    extra = sink.head[30 + nlen : 30 + nlen + xlen]
    assert (sig, flags) == (b"PK\x03\x04", 0x0808)
    assert extra[:12] == struct.pack("<HHQ", 1, 8, far) and extra[12:14] == b"FB"
    descriptor = sink.head[30 + nlen + xlen + 10 :][:24]
    assert descriptor[:4] == b"PK\x07\x08" and struct.unpack("<QQ", descriptor[8:24]) == (10, 10)
    entry = writer._directory[-1]
    assert struct.unpack_from("<L", entry, 42)[0] == 0xFFFFFFFF  # the header offset is in the zip64 field
    assert entry[46 + len(name) :] == struct.pack("<HHQ", 1, 8, far)
