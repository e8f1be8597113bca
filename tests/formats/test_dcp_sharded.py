"""A tensor sharded over ranks in a DCP save, as `--quick` lists it: one entry per tensor (its global shape,
dtype and bytes), its chunks checked in bulk against the data files. The saves are planned and written by
torch's own DefaultSavePlanner and FileSystemWriter (bench/scale_sims.dcp_save: FSDP2's Shard(0) over 4 ranks),
and every count the tests expect comes from torch's own reader of the same folder."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest
from torch.distributed.checkpoint import FileSystemReader

from bench import scale_sims
from ckinspect.formats.dcp import read_dcp

RANKS = 4


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("dcp") / "sharded"
    scale_sims.dcp_save(folder, RANKS, "tiny")
    return folder


def _copy(sharded: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "copy"
    shutil.copytree(sharded, folder)
    return folder


def _chunks_by_file(folder: Path) -> dict[str, list[tuple[str, int, int]]]:
    """torch's own view: (fqn, offset, length) of every tensor chunk, per data file."""
    meta = FileSystemReader(str(folder)).read_metadata()
    out: dict[str, list[tuple[str, int, int]]] = {}
    for index, info in meta.storage_data.items():
        if len(meta.state_dict_metadata[index.fqn].chunks if hasattr(meta.state_dict_metadata[index.fqn],
                                                                      "chunks") else []) > 1:  # fmt: skip
            out.setdefault(info.relative_path, []).append((index.fqn, info.offset, info.length))
    return out


def test_a_sharded_tensor_is_one_entry_with_its_global_shape(sharded):
    meta = FileSystemReader(str(sharded)).read_metadata()
    full, quick = read_dcp(sharded), read_dcp(sharded, trust_layout=True)
    assert full.findings == quick.findings == []
    sharded_fqns = {fqn for fqn, md in meta.state_dict_metadata.items() if len(getattr(md, "chunks", [])) > 1}
    assert len(sharded_fqns) == 3 * len(scale_sims.llama_params("tiny"))  # weights, exp_avg, exp_avg_sq
    by_name = {t.name: t for t in quick.tensors}
    for fqn in sharded_fqns:
        md = meta.state_dict_metadata[fqn]
        tensor = by_name[fqn]
        assert tensor.shape == tuple(md.size) and tensor.dtype == "float32" and tensor.is_contiguous
        extents = full.storages[tensor.storage_key].extents  # the full read: every chunk's bytes, one entry
        assert extents is not None and extents.whole and len(extents) == len(md.chunks)
        assert quick.storages[tensor.storage_key].nbytes == tensor.nbytes == sum(extents.length)
        assert quick.storages[tensor.storage_key].offset is None  # no value is read from this listing
        assert quick.storages[tensor.storage_key].extents is None
    # one entry per tensor, not per chunk, in the full read too (the listing does not depend on --quick)
    assert len(quick.tensors) == len(meta.state_dict_metadata) - sum(
        1 for md in meta.state_dict_metadata.values() if not hasattr(md, "chunks"))  # fmt: skip
    assert [(t.name, t.shape, t.dtype) for t in full.tensors] == [(t.name, t.shape, t.dtype) for t in quick.tensors]
    assert not any("[" in t.name for t in full.tensors)
    assert {t.name for t in quick.tensors} >= sharded_fqns
    assert quick.metadata["dcp_sharded"] == full.metadata["dcp_sharded"]
    # placed in the tree where the state dict had it
    up = "model.layers.1.mlp.up_proj.weight"
    assert quick.tree["model"][up] is by_name[f"model.{up}"]


def test_a_truncated_rank_file_names_every_chunk_it_cut(sharded, tmp_path):
    folder = _copy(sharded, tmp_path)
    target = "__2_0.distcp"
    chunks = sorted(_chunks_by_file(folder)[target], key=lambda c: c[1])
    cut = chunks[len(chunks) // 2][1] + 10  # inside the middle chunk's item
    with open(folder / target, "r+b") as f:
        f.truncate(cut)
    quick = read_dcp(folder, trust_layout=True)
    expected = sum(1 for _fqn, offset, length in chunks if offset + length > cut)
    unsharded_cut = sum(
        1 for index, info in FileSystemReader(str(folder)).read_metadata().storage_data.items()
        if info.relative_path == target and info.offset + info.length > cut
    ) - expected  # fmt: skip
    assert [f.code for f in quick.findings] == ["CORRUPT"] * (expected + unsharded_cut)
    assert all(f"{target} is truncated" in f.message for f in quick.findings)
    assert sum("[" in (f.tensor or "") for f in quick.findings) == expected


def test_a_missing_rank_file_is_missing_parts_for_each_of_its_chunks(sharded, tmp_path):
    folder = _copy(sharded, tmp_path)
    (folder / "__1_0.distcp").unlink()
    items = [i for i in FileSystemReader(str(folder)).read_metadata().storage_data.values()
             if i.relative_path == "__1_0.distcp"]  # fmt: skip
    quick = read_dcp(folder, trust_layout=True)
    assert [f.code for f in quick.findings] == ["MISSING_PARTS"] * len(items)
    assert all("__1_0.distcp is missing" in f.message for f in quick.findings)


def test_overlapping_items_in_a_rank_file_are_corrupt(sharded, tmp_path):
    folder = _copy(sharded, tmp_path)
    meta = pickle.loads((folder / ".metadata").read_bytes())
    target = "__3_0.distcp"
    ordered = sorted((info.offset, index) for index, info in meta.storage_data.items() if info.relative_path == target)
    second = meta.storage_data[ordered[1][1]]
    second.offset -= 8  # reaches into the item before it
    (folder / ".metadata").write_bytes(pickle.dumps(meta))
    quick = read_dcp(folder, trust_layout=True)
    assert [f.code for f in quick.findings] == ["CORRUPT"]
    assert f"{target}: " in quick.findings[0].message and "overlaps the item before it" in quick.findings[0].message


@pytest.mark.parametrize("ranks", [1, 2, 4, 16])
def test_the_direct_metadata_writer_writes_what_torchs_planner_and_writer_write(tmp_path, ranks):
    """bench/scale_sims.dcp_save_direct (no planner: the 1024-rank save) against dcp_save (torch's
    DefaultSavePlanner and FileSystemWriter): `.metadata` and every rank file byte for byte identical."""
    # the same save id (the writer's uuid) and the same folder (StorageMeta keeps its path): written in turn
    folder = tmp_path / "ckpt"
    scale_sims.dcp_save(folder, ranks, "tiny", save_id="the-save")
    a = folder.rename(tmp_path / "planned")
    scale_sims.dcp_save_direct(folder, ranks, "tiny", save_id="the-save")
    b = folder
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir()) and len(names) == ranks + 1
    assert (a / ".metadata").read_bytes() == (b / ".metadata").read_bytes()
    for name in names[1:]:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.mark.parametrize(("shapes", "ranks"), [("tiny", 1), ("tiny", 2), ("tiny", 16), ("vocab233", 240)])
def test_the_streaming_writer_writes_what_torchs_planner_and_writer_write(tmp_path, monkeypatch, shapes, ranks):
    """bench/scale_sims.dcp_save_stream (the 405B over 2048 ranks: `.metadata` pickled as the files are written,
    never held) against dcp_save (torch's DefaultSavePlanner and FileSystemWriter): every file byte for byte
    identical. vocab233 over 240 ranks: 2,000 storage records, so C's pickler ends storage_data with an empty
    MARK SETITEMS batch, which Python's pickler would not write."""
    monkeypatch.setitem(scale_sims.LLAMA, "vocab233", {"layers": 1, "hidden": 16, "inter": 40, "kv": 8, "vocab": 233})
    folder = tmp_path / "ckpt"
    scale_sims.dcp_save(folder, ranks, shapes, save_id="the-save")
    a = folder.rename(tmp_path / "planned")
    counts = scale_sims.dcp_save_stream(folder, ranks, shapes, save_id="the-save")
    assert scale_sims.prove_same(a, folder) == ranks + 1
    meta = FileSystemReader(str(folder)).read_metadata()
    tensors = [e for e in meta.state_dict_metadata.values() if hasattr(e, "chunks")]
    assert counts["entries"] == len(meta.state_dict_metadata)
    assert counts["chunks"] == sum(len(e.chunks) for e in tensors)
    if shapes == "vocab233":
        assert len(meta.storage_data) == 2000


@pytest.mark.parametrize("count", [1, 2, 999, 1000, 1001, 2000, 2001])
def test_the_streaming_pickler_batches_as_cpythons_c_pickler(count):
    """scale_sims._CPickler writes what pickle.dump (C) writes for dicts and lists of any length, where Python's
    own pickler differs at a full last batch (dicts) and a last batch of one (lists)."""
    import io
    import pickle

    obj = {"d": {f"k{i}": [i] * (i % 3) for i in range(count)}, "l": [(i, str(i)) for i in range(count)]}
    out = io.BytesIO()
    scale_sims._CPickler(out).dump(obj)
    assert out.getvalue() == pickle.dumps(obj, protocol=4)


def test_last_good_quick_names_the_newest_whole_sharded_save(sharded, tmp_path, capsys):
    """A run of two 4-rank saves: last-good --quick names the newer, and the older once a rank file of the
    newer is cut (the chunks it held are checked though each tensor is one entry)."""
    from ckinspect.cli import main

    run = tmp_path / "run"
    run.mkdir()
    for step in (100, 200):
        shutil.copytree(sharded, run / f"step-{step}")
    assert main(["last-good", str(run), "--quick"]) == 0
    assert capsys.readouterr().out.strip() == str(run / "step-200")
    with open(run / "step-200" / "__3_0.distcp", "r+b") as f:
        f.truncate(f.seek(0, 2) // 2)
    assert main(["last-good", str(run), "--quick"]) == 0
    assert capsys.readouterr().out.strip() == str(run / "step-100")
