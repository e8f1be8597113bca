"""DCP at frontier scale: limits that scale with `.metadata`'s own size, the fast `.metadata` decoder, and the
structure-only listing (`--quick`) that trusts `.metadata`'s layout and checks each data file once."""

from __future__ import annotations

import pickle
import tracemalloc
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)

from ckinspect._native import load
from ckinspect.formats import dcp_metadata
from ckinspect.formats.dcp import BYTES_PER_DECLARED, declared_limit, read_dcp
from ckinspect.formats.pickle_scan import scan_stream
from tests.hostile.corpus import _dcp_many_chunks


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    torch.manual_seed(3)
    state = {
        "model": {"w": torch.randn(4, 3), "b": torch.arange(5), "h": torch.randn(2, 2).bfloat16()},
        "optim": {"state": {"w": {"exp_avg": torch.zeros(4, 3), "step": torch.tensor(3.0)}},
                  "param_groups": [{"lr": 0.1}]},
        "step": 30,
    }  # fmt: skip
    folder = tmp_path_factory.mktemp("dcp") / "ckpt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled ... single process"
        dcp.save(state, checkpoint_id=str(folder))
    return folder


def _listing(ckpt) -> list[tuple]:
    return sorted((t.name, t.dtype, t.shape, t.stride, t.storage_key) for t in ckpt.tensors)


def test_quick_listing_equals_the_item_by_item_one(saved):
    full, trusted = read_dcp(saved), read_dcp(saved, trust_layout=True)
    assert full.findings == trusted.findings == []
    assert _listing(trusted) == _listing(full) and len(full.tensors) == 5
    assert trusted.tree["step"] == full.tree["step"] == 30
    assert trusted.tree["optim"]["param_groups"] == [{"lr": 0.1}]
    # the globals .metadata names (the items' own pickles are not opened)
    scanned = {g.qualname for g in scan_stream((saved / ".metadata").read_bytes())[0].globals}
    assert set(trusted.globals) == scanned and set(full.globals) - scanned == {
        "torch._utils._rebuild_tensor_v2", "collections.OrderedDict", "torch.FloatStorage", "torch.LongStorage",
        "torch.BFloat16Storage"}  # fmt: skip
    # each chunk's storage is sized from .metadata; no raw offset (no value will be read from this listing)
    for t in trusted.tensors:
        s = trusted.storages[t.storage_key]
        assert s.nbytes == t.nbytes == full.storages[full.tensor(t.name).storage_key].nbytes and s.offset is None


def test_the_fast_decoder_reads_what_torch_writes_and_names_the_same_globals(saved):
    data = (saved / ".metadata").read_bytes()
    fields = dcp_metadata.fast_fields(data)
    assert fields is not None
    assert set(fields["state_dict_metadata"]) == set(pickle.loads(data).state_dict_metadata)


def test_the_fast_decoder_declines_anything_else(tmp_path):
    meta = tmp_path / ".metadata"
    meta.write_bytes(b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00trueR.")
    assert dcp_metadata.fast_fields(meta.read_bytes()) is None  # declined (and the scan refused it first)
    ckpt = read_dcp(tmp_path, trust_layout=True)
    assert [f.code for f in ckpt.findings] == ["UNSAFE_PICKLE"]


def test_a_damaged_item_is_caught_by_the_full_read_and_the_last_item_by_the_quick_one(saved, tmp_path):
    import shutil

    folder = tmp_path / "c"
    shutil.copytree(saved, folder)
    data = folder / "__0_0.distcp"
    raw = bytearray(data.read_bytes())
    raw[-22:-18] = b"XXXX"  # the last item's end-of-directory record
    data.write_bytes(bytes(raw))
    quick = read_dcp(folder, trust_layout=True)
    assert [f.code for f in quick.findings] == ["CORRUPT"]
    assert "does not end as torch.save ends a file" in quick.findings[0].message
    assert any(f.code == "CORRUPT" for f in read_dcp(folder).findings)


def _many_chunk_save(folder: Path, chunks: int) -> int:
    """A .metadata with one tensor in `chunks` one-element chunks, each a distinct record as torch's writer
    makes them (written by pickle.dump of torch's own dataclasses, as FileSystemWriter.finish does), and a
    data file holding each chunk's 4 raw bytes. Returns what it declares."""
    folder.mkdir()
    props = TensorProperties(dtype=torch.float32)
    metas, storage = [], {}
    for i in range(chunks):
        offsets = torch.Size((i,))
        metas.append(ChunkStorageMetadata(offsets, torch.Size((1,))))
        storage[MetadataIndex("w", torch.Size((i,)), i)] = _StorageInfo("__0_0.distcp", 4 * i, 4)
    md = Metadata({"w": TensorStorageMetadata(props, torch.Size((chunks,)), metas)}, storage_data=storage)
    with open(folder / ".metadata", "wb") as f:
        pickle.dump(md, f)
    with open(folder / "__0_0.distcp", "wb") as f:
        f.truncate(4 * chunks)
    return 1 + 2 * chunks


@pytest.mark.slow
def test_more_than_a_million_declared_records_list_when_the_file_carries_them(tmp_path):
    """The old fixed bound (1,000,000 entries and chunks) refused every 70B + AdamW save above 229 ranks."""
    folder = tmp_path / "big"
    declared = _many_chunk_save(folder, 520_000)
    assert declared > 1_000_000 and declared <= declared_limit((folder / ".metadata").stat().st_size)
    ckpt = read_dcp(folder, trust_layout=True)
    # one entry for the sharded tensor (its global shape), every chunk checked against the data file
    assert ckpt.findings == [] and [(t.name, t.shape) for t in ckpt.tensors] == [("w", (520_000,))]
    assert ckpt.storages[ckpt.tensors[0].storage_key].nbytes == 4 * 520_000
    with open(folder / "__0_0.distcp", "r+b") as f:
        f.truncate(4 * 520_000 - 2)  # the last chunk's bytes cut short
    cut = read_dcp(folder, trust_layout=True)
    assert [(f.code, f.tensor) for f in cut.findings] == [("CORRUPT", "w[519999:520000]")]


def test_a_memo_shared_structure_is_refused_at_the_cost_of_what_it_read(tmp_path):
    """Two million chunks that are one memoized object (2 bytes a reference): refused, and the refusal costs
    memory in proportion to the 4 MB read, not to what it declares."""
    (tmp_path / ".metadata").write_bytes(_dcp_many_chunks(2_000_000))
    size = (tmp_path / ".metadata").stat().st_size
    tracemalloc.start()
    try:
        ckpt = read_dcp(tmp_path, trust_layout=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [f.code for f in ckpt.findings] == ["CORRUPT"] and ckpt.tensors == []
    assert f"one per {BYTES_PER_DECLARED} bytes" in ckpt.findings[0].message
    # each 2-byte reference is one 8-byte slot of the decoded list, twice that while the list grows
    assert peak < 16 * size


def test_the_limit_follows_the_file(tmp_path):
    assert declared_limit(0) == 1024
    assert declared_limit(440_000_000) == 27_500_000  # a 1024-rank 70B save: 404 MB, 4.45 million declared


def test_metadata_is_judged_and_decoded_in_one_pass_of_the_c_unpickler(saved, monkeypatch):
    """torch's own .metadata on the pure path: the lean walk, then the fast decoder, which names every global;
    neither the scan's general way nor the restricted unpickler runs."""
    import ckinspect.formats.dcp as dcp_module
    import ckinspect.formats.pickle_scan as pickle_scan

    monkeypatch.setenv("CKINSPECT_PURE", "1")  # the compiled decoder's own pass: the test below

    def never(*args, **kwargs):
        raise AssertionError("a second pass over .metadata")

    expected = read_dcp(saved, trust_layout=True)
    metadata = (saved / ".metadata").read_bytes()
    c_passes = []
    walk = pickle_scan._cpython_walk

    def counted(data, result, lexed, unpickler=pickle_scan._Recorder, **kwargs):
        if bytes(data) == metadata:  # the rank files' own data.pkl are decoded in one pass of their own each
            c_passes.append(unpickler)
        return walk(data, result, lexed, unpickler, **kwargs)

    monkeypatch.setattr(pickle_scan, "_cpython_walk", counted)
    monkeypatch.setattr(pickle_scan, "scan_pickle", never)
    monkeypatch.setattr(dcp_module, "decode", never)
    ckpt = read_dcp(saved, trust_layout=True)
    assert c_passes == [dcp_metadata.FastUnpickler]
    assert ckpt.findings == [] and _listing(ckpt) == _listing(expected) and ckpt.globals == expected.globals
    assert set(ckpt.globals) == {g.qualname for g in scan_stream((saved / ".metadata").read_bytes())[0].globals}


def test_a_global_hidden_behind_stack_global_in_real_metadata_is_named(saved, tmp_path):
    """A real .metadata whose param-group value is replaced by posix.system("...") (protocol 4, names off the
    stack): the fast decoder declines, the scan names it, nothing runs."""
    import shutil

    folder = tmp_path / "c"
    shutil.copytree(saved, folder)
    meta = pickle.loads((folder / ".metadata").read_bytes())
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            import posix

            return posix.system, (f"touch {marker}",)

    meta.planner_data = {"x": Payload()}
    (folder / ".metadata").write_bytes(pickle.dumps(meta, protocol=4))
    ckpt = read_dcp(folder, trust_layout=True)
    assert [f.code for f in ckpt.findings] == ["UNSAFE_PICKLE"] and "posix.system" in ckpt.findings[0].message
    assert not marker.exists() and ckpt.tensors == []


def test_the_c_pass_reads_metadata_in_place(saved, monkeypatch):
    """The C unpickler reads the very bytes object read_dcp read: a copy (BytesIO of a memoryview) held the
    whole `.metadata` twice at the listing's peak, 404 MB at 1024 ranks."""
    import ckinspect.formats.dcp as dcp_module

    monkeypatch.setenv("CKINSPECT_PURE", "1")  # the pure path's pass (the compiled decoder reads it in place too)
    read, files = [], []
    real = dcp_module.scan_decoding

    class Keeping(dcp_metadata.FastUnpickler):
        def __init__(self, file):
            super().__init__(file)
            files.append(file)

    def keeping(data, unpickler):
        read.append(data)
        return real(data, Keeping)

    monkeypatch.setattr(dcp_module, "scan_decoding", keeping)
    ckpt = read_dcp(saved, trust_layout=True)
    assert ckpt.findings == [] and ckpt.tensors
    assert len(read) == len(files) == 1 and files[0].getvalue() is read[0]


@pytest.mark.skipif(load("dcpmeta") is None, reason="dcpmeta not built")
def test_the_compiled_decoder_is_the_one_pass_over_metadata(saved, monkeypatch):
    """With the compiled decoder (--quick): one pass of it judges and decodes .metadata; neither the scan nor
    any unpickler runs over it, and the listing is the pure path's."""
    import ckinspect.formats.dcp as dcp_module
    import ckinspect.formats.pickle_scan as pickle_scan

    def never(*args, **kwargs):
        raise AssertionError("another pass over .metadata")

    with monkeypatch.context() as pure:
        pure.setenv("CKINSPECT_PURE", "1")
        expected = read_dcp(saved, trust_layout=True)
    monkeypatch.setattr(dcp_module, "scan_decoding", never)
    monkeypatch.setattr(pickle_scan, "scan_pickle", never)
    monkeypatch.setattr(dcp_module, "decode", never)
    ckpt = read_dcp(saved, trust_layout=True)
    assert ckpt.findings == [] and _listing(ckpt) == _listing(expected) and ckpt.globals == expected.globals
