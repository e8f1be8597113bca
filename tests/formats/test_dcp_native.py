"""The compiled `.metadata` decoder (ckinspect/_native/dcpmeta.c) against the pure path it stands in for.

Every save here is written by torch (dcp.save, or torch's own planner and FileSystemWriter through
bench/scale_sims), then listed with --quick twice: through the columns (dcp_quick) and with
CKINSPECT_PURE=1 (the general decoder and dcp._Lister). The two must agree on everything a user sees:
findings (code, message, tensor, order), tensors, storages, the tree, metadata, globals. Damaged and
hostile `.metadata` files must give the same findings too, or the decoder declines them (None), which
sends them down the pure path.
"""

from __future__ import annotations

import os
import pickle
import random
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

from bench import scale_sims
from ckinspect._native import load
from ckinspect.dtypes import TORCH_DTYPE_ATTRS
from ckinspect.formats import dcp_metadata
from ckinspect.formats.dcp import read_dcp
from ckinspect.settings import PURE as PURE_ENV

NATIVE = load("dcpmeta")
needs_native = pytest.mark.skipif(NATIVE is None, reason="dcpmeta not built (test_the_decoder_is_built says why)")
REPO = Path(__file__).resolve().parents[2]


def test_the_decoder_is_built():
    """An installed ckinspect carries the compiled decoder (setup.py builds every _native/*.c); only
    CKINSPECT_PURE=1 asks for the pure path."""
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        assert load("dcpmeta") is None
        return
    assert NATIVE is not None, "ckinspect._native.dcpmeta is not built: run `python setup.py build_ext --inplace`"


def test_setup_builds_the_decoder(tmp_path):
    """What pip runs: setup.py's build_ext compiles dcpmeta.c into an importable module."""
    done = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(tmp_path / "lib"),
                           "--build-temp", str(tmp_path / "tmp")], cwd=REPO, capture_output=True, text=True,
                          check=False)  # fmt: skip
    built = list((tmp_path / "lib" / "ckinspect" / "_native").glob("dcpmeta*"))
    assert done.returncode == 0 and len(built) == 1, done.stderr[-2000:]


def _quiet_save(state, folder: Path, **kwargs) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled ... single process"
        dcp.save(state, checkpoint_id=str(folder), **kwargs)
    return folder


def _state() -> dict:
    torch.manual_seed(5)
    return {
        "model": {
            "w": torch.randn(4, 3), "b": torch.arange(5), "h": torch.randn(2, 2).bfloat16(),
            "f16": torch.randn(3).half(), "f64": torch.randn(2, 2).double(), "mask": torch.ones(3, dtype=torch.bool),
            "u8": torch.arange(4, dtype=torch.uint8), "i8": torch.arange(3, dtype=torch.int8),
            "c": torch.randn(2, dtype=torch.complex64), "scalar": torch.tensor(2.5), "empty": torch.zeros(0, 3),
        },
        "optim": {"state": {0: {"exp_avg": torch.zeros(4, 3), "step": torch.tensor(3.0)}},
                  "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99), "params": [0], "name": None}]},
        "step": 30, "epoch": 1, "config": {"dim": 3, "name": "tiny", "layers": [1, 2]}, "blob": b"\x00\x01",
    }  # fmt: skip


@pytest.fixture(scope="module")
def saves(tmp_path_factory) -> dict[str, Path]:
    """Saves as torch writes them, across its options."""
    root = tmp_path_factory.mktemp("native")
    out = {"plain": _quiet_save(_state(), root / "plain")}
    out["per_item_files"] = _quiet_save(_state(), root / "per_item_files",
                                        storage_writer=FileSystemWriter(str(root / "per_item_files"),
                                                                        single_file_per_rank=False))  # fmt: skip
    out["threads"] = _quiet_save(_state(), root / "threads", storage_writer=FileSystemWriter(
        str(root / "threads"), thread_count=3, per_thread_copy_ahead=0))  # fmt: skip
    out["not_flattened"] = _quiet_save(_state(), root / "not_flattened",
                                       planner=DefaultSavePlanner(flatten_state_dict=False))  # fmt: skip
    out["no_dedup"] = _quiet_save(
        _state(), root / "no_dedup", planner=DefaultSavePlanner(dedup_replicated_tensors=False)
    )
    for ranks in (2, 3):  # torch's own planner and writer over ranks: chunks sharded on dim 0, replicated 0-d steps
        scale_sims.dcp_save(root / f"ranks{ranks}", ranks, "tiny")
        out[f"ranks{ranks}"] = root / f"ranks{ranks}"
    scale_sims.dcp_save_direct(root / "direct4", 4, "tiny")
    out["direct4"] = root / "direct4"
    return out


def _seen(ckpt) -> dict:
    """All a listing holds that a user sees."""
    return {
        "findings": [(f.code, f.message, f.tensor) for f in ckpt.findings],
        "tensors": list(ckpt.tensors),
        "storages": dict(ckpt.storages),
        "tree": repr(ckpt.tree),
        "metadata": repr(ckpt.metadata),
        "globals": list(ckpt.globals),
        "files": list(ckpt.files),
        "file_bytes": ckpt.file_bytes,
    }


def _both(folder: Path, monkeypatch, metadata_name: str = ".metadata") -> tuple[dict, dict, bool]:
    """(native listing, pure listing, whether the columns were used)."""
    used = []
    real = dcp_metadata.native_columns

    def spy(source, size):
        cols = real(source, size)
        used.append(cols is not None)
        return cols

    monkeypatch.setattr(dcp_metadata, "native_columns", spy)
    native = _seen(read_dcp(folder, metadata_name, trust_layout=True))
    with monkeypatch.context() as pure:
        pure.setenv(PURE_ENV, "1")
        plain = _seen(read_dcp(folder, metadata_name, trust_layout=True))
    return native, plain, any(used)


@needs_native
@pytest.mark.parametrize("name", ["plain", "per_item_files", "threads", "not_flattened", "no_dedup", "ranks2",
                                  "ranks3", "direct4"])  # fmt: skip
def test_torch_saves_list_the_same_through_the_columns(saves, name, monkeypatch):
    native, plain, used = _both(saves[name], monkeypatch)
    assert used, "the decoder declined a save torch wrote"
    assert native == plain
    assert native["tensors"] and not native["findings"]


@needs_native
def test_the_json_report_is_the_same(saves):
    """The CLI's own report of a sharded save, byte for byte, each path in its own process."""
    env = {k: v for k, v in os.environ.items() if k != PURE_ENV}
    cmd = [sys.executable, "-m", "ckinspect", "--report", "--quick", "--format", "json", str(saves["ranks3"])]
    native = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, cwd=REPO)
    pure = subprocess.run(cmd, capture_output=True, text=True, env={**env, PURE_ENV: "1"}, check=False, cwd=REPO)
    assert native.returncode == pure.returncode == 0 and native.stdout == pure.stdout and '"dcp"' in native.stdout


def _rewritten(saved: Path, tmp_path: Path, change, protocol: int = 4, name: str = "m") -> Path:
    """A copy of `saved` whose Metadata went through `change(meta)` and was pickled again (as torch does)."""
    folder = tmp_path / name
    shutil.copytree(saved, folder)
    meta = pickle.loads((folder / ".metadata").read_bytes())  # a file this test wrote: safe to load
    change(meta)
    (folder / ".metadata").write_bytes(pickle.dumps(meta, protocol=protocol))
    return folder


@needs_native
@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_every_pickle_protocol_lists_the_same(saves, tmp_path, protocol, monkeypatch):
    folder = _rewritten(saves["ranks2"], tmp_path, lambda meta: None, protocol)
    native, plain, used = _both(folder, monkeypatch)
    assert used and native == plain


def _first_chunk_key(meta):
    return next(k for k in meta.storage_data if k.offset is not None and len(k.offset) and k.fqn.startswith("model"))


def _drop_storage_record(meta):
    del meta.storage_data[_first_chunk_key(meta)]


def _retarget(path):
    def change(meta):
        key = _first_chunk_key(meta)
        meta.storage_data[key].relative_path = path

    return change


def _respan(offset=None, length=None):
    def change(meta):
        info = meta.storage_data[_first_chunk_key(meta)]
        info.offset = info.offset if offset is None else offset(info.offset)
        info.length = info.length if length is None else length(info.length)

    return change


def _overlap(meta):
    infos = [v for k, v in meta.storage_data.items() if v.relative_path == "__1_0.distcp"]
    infos[3].offset = infos[2].offset + 1


def _no_planner(meta):
    meta.planner_data = None


def _no_storage_meta(meta):
    meta.storage_meta = None


def _version_gone(meta):
    del meta.version


def _transform(meta):
    meta.storage_data[_first_chunk_key(meta)].transform_descriptors = ["zstd"]


def _huge_chunk(meta):
    md = meta.state_dict_metadata["model.model.embed_tokens.weight"]
    md.chunks[0] = type(md.chunks[0])(md.chunks[0].offsets, torch.Size([2**40, 2**30]))


def _big_chunk(meta):  # numel * bits past int64: the arrays hand these to Python's integers
    md = meta.state_dict_metadata["model.model.embed_tokens.weight"]
    md.chunks[1] = type(md.chunks[1])(md.chunks[1].offsets, torch.Size([2**46, 2**10]))


def _overlap_sharded(meta):
    sharded = [v for k, v in meta.storage_data.items() if v.relative_path == "__0_0.distcp" and k.offset
               and k.fqn.startswith("model")]  # fmt: skip
    sharded[4].offset = sharded[1].offset


def _no_chunks(meta):
    meta.state_dict_metadata["model.model.norm.weight"].chunks = []


def _sharded_chunk(meta):
    """The key and index of a chunk of a tensor sharded over both ranks (not the first: offsets past 0)."""
    key = next(k for k in meta.storage_data if k.offset and k.offset[0] and k.fqn.startswith("model"))
    chunks = meta.state_dict_metadata[key.fqn].chunks
    return key, next(i for i, c in enumerate(chunks) if c.offsets == key.offset)


def _chunk_dropped(meta):  # a gap: the chunk and its storage record gone
    key, at = _sharded_chunk(meta)
    del meta.state_dict_metadata[key.fqn].chunks[at]
    del meta.storage_data[key]


def _chunk_moved(meta):  # one row further: past the end, and a gap before it
    key, at = _sharded_chunk(meta)
    chunks = meta.state_dict_metadata[key.fqn].chunks
    moved = torch.Size([chunks[at].offsets[0] + 1, *chunks[at].offsets[1:]])
    chunks[at] = type(chunks[at])(moved, chunks[at].sizes)
    meta.storage_data[type(key)(key.fqn, moved)] = meta.storage_data.pop(key)


def _step_without_chunks(meta):  # a 0-d tensor whose one element no chunk holds
    next(md for fqn, md in meta.state_dict_metadata.items() if fqn.endswith(".step")).chunks = []


DECLINED = {"transformed", "huge_chunk"}  # what the columns do not carry: the pure path lists these
MUTATIONS = {
    "record_dropped": _drop_storage_record, "outside": _retarget("../elsewhere.distcp"),
    "missing_file": _retarget("__9_0.distcp"), "negative_offset": _respan(offset=lambda o: -1),
    "short": _respan(length=lambda n: 10), "past_the_end": _respan(offset=lambda o: o + 10**9),
    "overlap": _overlap, "no_planner": _no_planner, "no_storage_meta": _no_storage_meta,
    "no_version": _version_gone, "transformed": _transform, "huge_chunk": _huge_chunk, "no_chunks": _no_chunks,
    "big_chunk": _big_chunk, "overlap_sharded": _overlap_sharded, "chunk_dropped": _chunk_dropped,
    "chunk_moved": _chunk_moved, "step_without_chunks": _step_without_chunks,
}  # fmt: skip


@needs_native
@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_a_damaged_layout_gives_the_same_findings(saves, tmp_path, mutation, monkeypatch):
    folder = _rewritten(saves["ranks2"], tmp_path, MUTATIONS[mutation])
    native, plain, used = _both(folder, monkeypatch)
    assert native == plain
    assert used == (mutation not in DECLINED)
    if mutation not in ("no_planner", "no_storage_meta", "no_version", "transformed"):
        assert native["findings"], "the damage went unseen"
    if mutation in ("chunk_dropped", "chunk_moved", "step_without_chunks", "no_chunks"):  # a layout that does not tile
        assert [(code, message.endswith("exactly once")) for code, message, _ in native["findings"]] == [
            ("CORRUPT", True)]  # fmt: skip


@needs_native
def test_truncated_and_flipped_metadata_give_the_same_findings(saves, tmp_path, monkeypatch):
    """Cut at many places and with bytes changed at random: the decoder declines (nearly all) or agrees."""
    data = (saves["ranks2"] / ".metadata").read_bytes()
    rng = random.Random(26)
    variants = [data[:cut] for cut in sorted(rng.sample(range(1, len(data)), 40))]
    for _ in range(60):
        raw = bytearray(data)
        for at in rng.sample(range(2, len(raw)), rng.choice([1, 2, 8])):
            raw[at] = rng.randrange(256)
        variants.append(bytes(raw))
    folder = tmp_path / "v"
    shutil.copytree(saves["ranks2"], folder)
    for raw in variants:
        (folder / ".metadata").write_bytes(raw)
        native, plain, _used = _both(folder, monkeypatch)
        assert native == plain


# ---- hostile streams: the decoder itself declines them, bounded, and read_dcp says what the pure path says

_META = "torch.distributed.checkpoint.metadata"


def _hostile() -> dict[str, bytes]:
    head = f"\x80\x04c{_META}\nMetadata\n)\x81".encode()
    return {
        "deep_marks": b"\x80\x04" + b"(" * 200_000 + b".",
        "deep_lists": b"\x80\x04" + b"]" * 200_000 + b"a" * 199_999 + b".",
        "memo_index_far": head + b"r\x00\x00\x00\x40.",  # LONG_BINPUT 2**30
        "memo_get_far": head + b"j\xff\xff\xff\x7f.",
        "string_past_end": head + b"\x8d" + (2**60).to_bytes(8, "little") + b"abc",
        "frame_past_end": b"\x80\x04\x95" + (2**40).to_bytes(8, "little") + b"N.",
        "laughs": bytes(_laughs()),
        "os_system": b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00trueR.",
        "stack_global_exec": b"\x80\x04\x8c\x08builtins\x8c\x04exec\x93\x8c\x01x\x85R.",
        "not_metadata": b"\x80\x04]\x94.",
        "empty_tuple_newobj_of_size": b"\x80\x04ctorch\nSize\n)\x81.",
    }


def _laughs() -> bytearray:
    """One chunk list shared by 1,000 entries through the memo: 1,000 x 1,000 declared chunks."""
    out = bytearray(f"\x80\x02c{_META}\nMetadata\n)\x81}}(X\x13\x00\x00\x00state_dict_metadata}}(".encode())
    out += f"X\x01\x00\x00\x00wc{_META}\nTensorStorageMetadata\n)\x81}}X\x06\x00\x00\x00chunks](".encode()
    out += f"c{_META}\nChunkStorageMetadata\n)\x81q\x01".encode() + b"h\x01" * 999 + b"eq\x02sb"
    for i in range(999):
        name = f"w{i}".encode()
        out += b"X" + len(name).to_bytes(4, "little") + name + f"c{_META}\nTensorStorageMetadata\n)\x81}}".encode()
        out += b"X\x06\x00\x00\x00chunksh\x02sb"
    out += b"uX\x0c\x00\x00\x00storage_data}ub."
    return out


@needs_native
@pytest.mark.parametrize("name", sorted(_hostile()))
def test_hostile_metadata_is_declined_and_judged_the_same(name, tmp_path, monkeypatch):
    raw = _hostile()[name]
    assert NATIVE.decode(raw, len(raw), TORCH_DTYPE_ATTRS) is None
    (tmp_path / ".metadata").write_bytes(raw)
    (tmp_path / "__0_0.distcp").write_bytes(b"")
    native, plain, used = _both(tmp_path, monkeypatch)
    assert not used and native == plain and native["findings"]


@needs_native
def test_the_decoder_names_the_globals_the_scan_names(saves):
    from ckinspect.formats.pickle_scan import scan_stream

    data = (saves["ranks3"] / ".metadata").read_bytes()
    cols = dcp_metadata.native_columns(data, len(data))
    assert cols is not None
    assert [g.qualname for g in cols.global_refs()] == [g.qualname for g in scan_stream(data)[0].globals]
    meta = pickle.loads(data)
    assert len(cols.entries) == len(meta.state_dict_metadata) and cols.storage_records == len(meta.storage_data)
    assert cols.chunks == sum(len(getattr(md, "chunks", ())) for md in meta.state_dict_metadata.values())


@needs_native
@pytest.mark.parametrize("window", [1, 7, 64, 4096])
def test_a_streamed_metadata_decodes_as_the_whole_bytes_do(saves, window):
    """read_at windows of any size, an opcode or a name cut at any byte: the same columns, read in order (a
    window begins where the opcode the last one cut begins)."""
    data = (saves["ranks3"] / ".metadata").read_bytes()
    asked = []

    def read_at(offset, length):
        asked.append((offset, length))
        return data[offset : offset + length]

    whole = NATIVE.decode(data, len(data), TORCH_DTYPE_ATTRS)
    assert whole is not None and NATIVE.decode(read_at, len(data), TORCH_DTYPE_ATTRS, window) == whole
    assert asked[0][0] == 0 and all(a < b <= a + n for (a, n), (b, _) in zip(asked, asked[1:], strict=False))
    assert asked[-1][0] + asked[-1][1] == len(data)


@needs_native
def test_a_file_that_changes_while_streamed_is_declined(saves):
    data = (saves["ranks3"] / ".metadata").read_bytes()
    assert NATIVE.decode(lambda offset, length: data[offset : offset + length - 1], len(data), TORCH_DTYPE_ATTRS,
                         4096) is None  # fmt: skip


def _unframed(data: bytes) -> bytes:
    """The same pickle without its FRAME opcodes (so that a name can change length)."""
    import pickletools

    ops = list(pickletools.genops(data))
    return b"".join(data[pos : ops[i + 1][2] if i + 1 < len(ops) else len(data)]
                    for i, (op, _arg, pos) in enumerate(ops) if op.name != "FRAME")  # fmt: skip


@needs_native
def test_a_module_name_with_a_nul_is_not_the_module_before_it(saves, tmp_path, monkeypatch):
    """`torch\\0x` is not `torch`: a C comparison of names would stop at the NUL and take the global for a dtype."""
    folder = tmp_path / "nul"
    shutil.copytree(saves["ranks2"], folder)
    data = _unframed((folder / ".metadata").read_bytes())
    assert NATIVE.decode(data, len(data), TORCH_DTYPE_ATTRS) is not None  # unframed, it is still torch's save
    bad = data.replace(b"\x8c\x05torch\x94\x8c\x07float32", b"\x8c\x07torch\x00x\x94\x8c\x07float32", 1)
    assert bad != data and NATIVE.decode(bad, len(bad), TORCH_DTYPE_ATTRS) is None
    (folder / ".metadata").write_bytes(bad)
    native, plain, used = _both(folder, monkeypatch)
    assert not used and native == plain and [f[0] for f in native["findings"]] == ["UNSAFE_PICKLE"]


@needs_native
@pytest.mark.remote
@pytest.mark.parametrize("mutation", ["as_saved", "transformed"])
def test_a_remote_metadata_is_fetched_once_whether_the_decoder_takes_it_or_not(saves, tmp_path, mutation):
    """Over a URL the compiled decoder reads `.metadata` in ranged GETs; when it declines it (here: a transform
    it does not carry), the general path lists it from the bytes already fetched, not from a second GET."""
    from ckinspect.io.folders import Listings, open_folder
    from tests.helpers.remote_servers import range_server

    folder = _rewritten(saves["ranks2"], tmp_path, MUTATIONS.get(mutation, lambda meta: None))
    local = read_dcp(folder, trust_layout=True)
    with range_server(tmp_path) as server, Listings().in_use():
        remote = read_dcp(open_folder(f"{server.url}/{folder.name}/"), trust_layout=True)  # listed, then read
        sent, requests = server.by_name[".metadata"]
    assert (sent, requests) == ((folder / ".metadata").stat().st_size, 1)
    assert [(f.code, f.message, f.tensor) for f in remote.findings] == [
        (f.code, f.message, f.tensor) for f in local.findings]  # fmt: skip
    assert [t.name for t in remote.tensors] == [t.name for t in local.tensors]
    assert ("dcp_transforms" in remote.metadata) == (mutation == "transformed")


@pytest.mark.parametrize("keep", [0, 5, 16, 1000])
def test_a_kept_prefix_spares_the_general_path_what_the_decoder_read(keep):
    """Windows in order, overlapping where an opcode was cut: the first `keep` bytes are kept, and the rest of
    the file is all that is read again."""
    from ckinspect.formats.dcp import _KeptPrefix

    data = bytes(range(40))
    asked = []

    def read_at(offset, length):
        asked.append((offset, length))
        return data[offset : offset + length]

    kept = _KeptPrefix(read_at, keep)
    for offset, length in [(0, 8), (6, 8), (14, 8), (20, 8)]:  # a decoder that declines at byte 28
        assert kept.read_at(offset, length) == data[offset : offset + length]
    asked.clear()
    assert kept.rest(len(data)) == data
    held = min(keep, 28)
    assert asked == ([(held, len(data) - held)] if held < len(data) else [])
