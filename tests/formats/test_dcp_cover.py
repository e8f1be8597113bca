"""Whether a DCP tensor's chunks cover its shape exactly once (formats/dcp_cover), on every path that lists a
DCP save: the full read, --quick through the compiled decoder's columns (dcp_quick) and --quick pure
(CKINSPECT_PURE=1). The check against a brute-force oracle that counts every element; real saves planned and
written by torch's own DefaultSavePlanner and FileSystemWriter (which refuses a layout that does not tile,
and which dcp.load reads back) stay clean, whatever their layout; `.metadata` rewritten with torch's own
classes to leave a gap, overlap, repeat a chunk or step outside the shape gives one exact CORRUPT on every path.
"""

from __future__ import annotations

import io
import json
import pickle
import shutil
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ckinspect._native import load
from ckinspect.formats import dcp_cover
from ckinspect.formats.dcp import read_dcp
from ckinspect.settings import PURE as PURE_ENV
from tests.helpers.dcp_saves import loaded, sharded_save

needs_native = pytest.mark.skipif(load("dcpmeta") is None, reason="dcpmeta not built")


# ---- the check against an oracle that counts every element


def _oracle(shape, offsets, sizes) -> bool:
    if not shape:
        return len(offsets) >= 1  # a 0-d tensor is whole in any chunk of it (see dcp_cover's docstring)
    count = np.zeros(shape, dtype=np.int64)
    for o, s in zip(offsets, sizes, strict=True):
        if len(o) != len(shape) or len(s) != len(shape):
            return False
        if any(x < 0 for x in (*o, *s)) or any(a + b > w for a, b, w in zip(o, s, shape, strict=True)):
            return False
        count[tuple(slice(a, a + b) for a, b in zip(o, s, strict=True))] += 1
    return bool((count == 1).all())


@st.composite
def _tiling(draw, offsets, sizes, depth):
    """A guillotine tiling of the box: cut along one dimension, then each part again (or not)."""
    if depth == 0 or not sizes or draw(st.integers(0, 3)) == 0:
        return [(offsets, sizes)]
    k = draw(st.integers(0, len(sizes) - 1))
    cuts = sorted(draw(st.lists(st.integers(0, sizes[k]), min_size=1, max_size=3)))
    edges = [0, *cuts, sizes[k]]
    out = []
    for a, b in zip(edges, edges[1:], strict=False):
        o, s = list(offsets), list(sizes)
        o[k], s[k] = offsets[k] + a, b - a
        out += draw(_tiling(tuple(o), tuple(s), depth - 1))
    return out


@st.composite
def _layouts(draw):
    """(shape, offsets, sizes): a tiling, as it is or damaged one way, in any order."""
    shape = tuple(draw(st.lists(st.integers(0, 5), max_size=3)))
    boxes = draw(_tiling((0,) * len(shape), shape, 4))
    damage = draw(st.sampled_from(["none", "drop", "repeat", "shift", "resize", "extra"]))
    at = draw(st.integers(0, len(boxes) - 1))
    o, s = boxes[at]
    if damage == "drop":
        boxes.pop(at)
    elif damage == "repeat":
        boxes.append(boxes[at])
    elif damage in ("shift", "resize") and shape:
        k, step = draw(st.integers(0, len(shape) - 1)), draw(st.sampled_from([-1, 1]))
        moved = [list(o), list(s)]
        moved[damage == "resize"][k] += step
        boxes[at] = (tuple(moved[0]), tuple(moved[1]))
    elif damage == "extra":
        boxes.append(tuple(tuple(draw(st.integers(0, 4)) for _ in shape) for _ in range(2)))
    boxes = draw(st.permutations(boxes))
    return shape, [b[0] for b in boxes], [b[1] for b in boxes]


def _columns(cases):
    """Many tensors' chunks as dcp_metadata.Columns lays them out: per chunk, its slice of a flat pool."""
    firsts, counts, o_index, o_pool, s_index, s_pool = [], [], [0], [], [0], []
    for _shape, offsets, sizes in cases:
        firsts.append(len(o_index) - 1)
        counts.append(len(offsets))
        for o, s in zip(offsets, sizes, strict=True):
            o_pool += o
            s_pool += s
            o_index.append(len(o_pool))
            s_index.append(len(s_pool))
    arrays = (np.array(a, dtype=np.int64) for a in (o_index, o_pool, s_index, s_pool))
    return [c[0] for c in cases], firsts, counts, *arrays


@pytest.mark.parametrize("way", ["dict", "arrays", "identity"])
@settings(max_examples=400, deadline=None)
@given(_layouts())
def test_the_check_agrees_with_counting_every_element(way, layout):
    """A tensor of few chunks is summed in a dict, of many in arrays; cut along many dimensions, by the identity."""
    small = {"dict": dcp_cover._SMALL_CORNERS, "arrays": -1, "identity": -1}[way]
    corner_dims = 0 if way == "identity" else dcp_cover.MAX_CORNER_DIMS
    with mock.patch.object(dcp_cover, "_SMALL_CORNERS", small), mock.patch.object(dcp_cover, "MAX_CORNER_DIMS",
                                                                                 corner_dims):  # fmt: skip
        assert dcp_cover.covers(*layout) == _oracle(*layout)


@pytest.mark.parametrize("corner_dims", [dcp_cover.MAX_CORNER_DIMS, 0])
@settings(max_examples=100, deadline=None)
@given(st.lists(_layouts(), min_size=1, max_size=12))
def test_many_tensors_at_once_agree_with_counting_every_element(corner_dims, cases):
    """dcp_quick's call: every tensor of a save in one call, their chunks in one pool."""
    with mock.patch.object(dcp_cover, "MAX_CORNER_DIMS", corner_dims):
        got = dcp_cover.exact_covers(*_columns(cases))
    assert got.tolist() == [_oracle(*case) for case in cases]


def test_tensors_cut_alike_are_checked_once_and_a_difference_anywhere_is_seen():
    """Layouts are shared by the tensors cut alike; one that differs only in its middle chunks is its own."""
    rows = [((2 * i, 0), (2, 4)) for i in range(50)]
    gap = [*rows[:20], ((41, 0), (1, 4)), *rows[21:]]  # rows 40:41 missing, first and last chunks the same
    cases = [((100, 4), [o for o, _ in r], [s for _, s in r]) for r in (rows, rows, gap, rows, gap)]
    assert dcp_cover.exact_covers(*_columns(cases)).tolist() == [True, True, False, True, False]


def test_a_listing_checks_each_distinct_layout_once():
    """The pure listers ask Remembered for every tensor: a layout seen before is not checked again, one that
    differs anywhere is, and what cannot be remembered (a list where an int belongs) is checked as it is."""
    remembered = dcp_cover.Remembered()
    rows = [(2 * i,) for i in range(40)], [(2,)] * 40
    gap = [(2 * i,) for i in range(40) if i != 20], [(2,)] * 39
    with mock.patch.object(dcp_cover, "covers", wraps=dcp_cover.covers) as checked:
        answers = [remembered.covers((80,), *layout) for layout in (rows, rows, gap, rows, gap)]
        assert remembered.covers((80,), [(0,), ([1],)], [(1,), (79,)]) is False  # a list for an int: no cover
    assert answers == [True, True, False, True, False]
    assert checked.call_count == 3


@pytest.mark.parametrize(
    ("shape", "offsets", "sizes", "covered"),
    [
        ((4,), [(0,), (2.0,)], [(2,), (2,)], False),  # a float
        ((4,), [(0,), ("2",)], [(2,), (2,)], False),  # a string numpy would read as 2
        ((4,), [(0,), None], [(2,), (2,)], False),
        ((4,), [(0,), (2, 0)], [(2,), (2,)], False),  # ragged
        ((4,), [(0,), (2**70,)], [(2,), (2,)], False),  # past int64
        ((2**70,), [(0,)], [(2**70,)], False),  # no torch.Size holds it
        ((4,), [(0,), (4,)], [(4,), (0,)], True),  # an empty chunk at the end, as a DTensor's empty shard
        ((4,), [(0,), (5,)], [(4,), (0,)], False),  # an empty chunk outside
        ((4,), [(0,), (2,)], [(2,), (2,)], True),
        ((4,), [(0,), (2,), (2,)], [(2,), (2,), (0,)], True),
        ((), [(), ()], [(), ()], True),  # 0-d, saved by two ranks
        ((), [], [], False),
        ((0, 3), [], [], True),  # nothing to cover
        ((3, 2), [(0, 0)], [(3, 2)], True),
        ((3, 2), [(0, 0)], [(3, 1)], False),
        ((3, 2), [], [], False),
        ([3], [(0,)], [(3,)], True),
        ("ab", [(0,)], [(3,)], False),
    ],
)  # fmt: skip
def test_what_is_not_a_box_of_ints_within_the_shape_is_no_cover(shape, offsets, sizes, covered):
    for small in (dcp_cover._SMALL_CORNERS, -1):
        with mock.patch.object(dcp_cover, "_SMALL_CORNERS", small):
            assert dcp_cover.covers(shape, offsets, sizes) is covered


# ---- real saves, as torch's own planner and writer make them


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return {
        "model.w": torch.randn(8, 6, generator=g),
        "model.b": torch.randn(5, generator=g),  # fewer rows than ranks above 5: empty shards
        "model.emb": torch.randn(13, 4, 3, generator=g),
        "model.step": torch.tensor(7.0),
    }


def _bands_state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(4)
    return {"model.w": torch.randn(64, 96, generator=g), "model.b": torch.randn(5, generator=g)}


def _listings(folder: Path, monkeypatch) -> dict:
    """The findings (code, message, tensor) of every path, and whether the full read calls each tensor whole."""
    out = {}
    full = read_dcp(folder)
    out["full"] = [(f.code, f.message, f.tensor) for f in full.findings]
    out["whole"] = {t.name: full.storages[t.storage_key].extents.whole for t in full.tensors
                    if full.storages[t.storage_key].extents is not None}  # fmt: skip
    out["quick"] = [(f.code, f.message, f.tensor) for f in read_dcp(folder, trust_layout=True).findings]
    with monkeypatch.context() as pure:
        pure.setenv(PURE_ENV, "1")
        out["quick_pure"] = [(f.code, f.message, f.tensor) for f in read_dcp(folder, trust_layout=True).findings]
    return out


def _row_bands(pieces_in_row, ranks: int):
    """Each row of a 2-D tensor a band of its own, cut into its own number of columns; chunks dealt to the
    ranks in turn. No grid: the column cuts differ from row to row."""

    def layout(fqn, shape):
        per_rank: list[list] = [[] for _ in range(ranks)]
        dealt = 0
        for row in range(shape[0]):
            widths = [len(a) for a in np.array_split(np.arange(shape[1]), pieces_in_row(row))]
            for start, width in zip(np.cumsum([0, *widths[:-1]]).tolist(), widths, strict=True):
                per_rank[dealt % ranks].append(((row, start), (1, width)))
                dealt += 1
        return per_rank

    return layout


@pytest.fixture(scope="module")
def saves(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cover")
    out = {}
    for ranks in (2, 3, 4, 8, 16):
        out[f"rows{ranks}"] = root / f"rows{ranks}"
        sharded_save(out[f"rows{ranks}"], _state(), ranks, empty_shards=True)
    out["grid4"] = root / "grid4"
    sharded_save(out["grid4"], _state(), 4, grid=True)
    bands = _row_bands(lambda row: 30 + row % 7, 4)
    out["bands"] = root / "bands"  # 2,109 chunks of model.w, in rows cut 30 to 36 ways
    sharded_save(out["bands"], _bands_state(), 4,
                 layout=lambda fqn, shape: bands(fqn, shape) if fqn == "model.w" else
                 [[((r * 2,), (min(2, 5 - 2 * r),))] if r < 3 else [] for r in range(4)])  # fmt: skip
    return out


@needs_native
@pytest.mark.parametrize("name", ["rows2", "rows3", "rows4", "rows8", "rows16", "grid4", "bands"])
def test_torchs_own_layouts_are_clean_on_every_path(saves, name, monkeypatch):
    """Torch's planner at 2 to 16 ranks (uneven rows, empty shards), a 2-D grid, and 2,109 chunks of rows each
    cut differently (which the pairwise test gave up on and called CORRUPT): no finding, every tensor whole."""
    seen = _listings(saves[name], monkeypatch)
    assert seen["full"] == seen["quick"] == seen["quick_pure"] == []
    assert seen["whole"] and all(seen["whole"].values())


def test_the_layouts_are_what_torch_reads(saves):
    """dcp.load reads every one of them back whole (the oracle that they are real tilings)."""
    for name, state in (("rows16", _state()), ("grid4", _state()), ("bands", _bands_state())):
        assert all(torch.equal(loaded(saves[name], state)[k], v) for k, v in state.items())
    meta = pickle.loads((saves["bands"] / ".metadata").read_bytes())  # written by this test: safe to load
    assert len(meta.state_dict_metadata["model.w"].chunks) == 2109
    assert len(meta.state_dict_metadata["model.b"].chunks) == 3


# ---- .metadata rewritten with torch's own classes


def _rewritten(saved: Path, tmp_path: Path, change) -> Path:
    folder = tmp_path / saved.name
    shutil.copytree(saved, folder)
    meta = pickle.loads((folder / ".metadata").read_bytes())  # written by this test: safe to load
    change(meta, folder)
    (folder / ".metadata").write_bytes(pickle.dumps(meta, protocol=4))
    return folder


def _chunk_at(meta, fqn, offsets):
    chunks = meta.state_dict_metadata[fqn].chunks
    return next(i for i, c in enumerate(chunks) if tuple(c.offsets) == offsets)


def _moved(fqn, offsets, new_offsets=None, new_sizes=None):
    """The chunk at `offsets` declared at other offsets or sizes, its storage record following its key."""

    def change(meta, folder):
        from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex

        chunks = meta.state_dict_metadata[fqn].chunks
        at = _chunk_at(meta, fqn, offsets)
        old = chunks[at]
        chunks[at] = ChunkStorageMetadata(torch.Size(new_offsets or old.offsets), torch.Size(new_sizes or old.sizes))
        info = meta.storage_data.pop(MetadataIndex(fqn, torch.Size(offsets)))
        meta.storage_data[MetadataIndex(fqn, chunks[at].offsets)] = info

    return change


def _dropped(fqn, offsets):
    def change(meta, folder):
        from torch.distributed.checkpoint.metadata import MetadataIndex

        del meta.state_dict_metadata[fqn].chunks[_chunk_at(meta, fqn, offsets)]
        del meta.storage_data[MetadataIndex(fqn, torch.Size(offsets))]

    return change


def _added(fqn, offsets, sizes):
    """One more chunk, its item appended to rank 0's file as FileSystemWriter writes one (a torch.save zip)."""

    def change(meta, folder):
        from torch.distributed.checkpoint.filesystem import _StorageInfo
        from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex

        buf = io.BytesIO()
        torch.save(torch.zeros(sizes), buf)
        with open(folder / "__0_0.distcp", "ab") as f:
            offset = f.tell()
            f.write(buf.getvalue())
        meta.state_dict_metadata[fqn].chunks.append(ChunkStorageMetadata(torch.Size(offsets), torch.Size(sizes)))
        meta.storage_data[MetadataIndex(fqn, torch.Size(offsets))] = _StorageInfo("__0_0.distcp", offset,
                                                                                 len(buf.getvalue()))  # fmt: skip

    return change


def _repeated(fqn, offsets):
    """A chunk listed twice (one storage record: its key is the same)."""

    def change(meta, folder):
        chunks = meta.state_dict_metadata[fqn].chunks
        chunks.append(chunks[_chunk_at(meta, fqn, offsets)])

    return change


def _corrupt(folder: Path, count: int, fqn: str = "model.w", shape: str = "[8, 6]") -> tuple[str, str, str]:
    return ("CORRUPT", f"{folder.name}/.metadata: the {count} chunks of {fqn} do not cover its shape {shape} "
                       "exactly once", fqn)  # fmt: skip


# model.w of rows4: rows 0:2, 2:4, 4:6, 6:8, one a rank
DAMAGE = {
    "gap": (_dropped("model.w", (2, 0)), 3),
    "overlap": (_added("model.w", (3, 0), (2, 6)), 5),
    "repeated": (_repeated("model.w", (2, 0)), 5),
    "outside": (_moved("model.w", (6, 0), new_offsets=(7, 0)), 4),
    "negative_offset": (_moved("model.w", (0, 0), new_offsets=(-1, 0)), 4),
    "negative_size": (_moved("model.w", (6, 0), new_sizes=(-2, 6)), 4),
}


@needs_native
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_layout_that_does_not_tile_is_corrupt_on_every_path(saves, tmp_path, damage, monkeypatch):
    change, count = DAMAGE[damage]
    folder = _rewritten(saves["rows4"], tmp_path, change)
    seen = _listings(folder, monkeypatch)
    cover = _corrupt(folder, count)
    # what else each path says of the same damage, before it
    full_before = {"negative_size": [("CORRUPT", "model.w[6:4,0:6]: .metadata says shape (-2, 6), the stored "
                                                 "tensor has (2, 6)", "model.w[6:4,0:6]")]}  # fmt: skip
    quick_after = {}
    if damage == "repeated":  # both chunks name one item: the rank file's check sees it twice
        file, offset = _item(folder, "model.w", (2, 0))
        quick_after[damage] = [("CORRUPT", f"{folder.name}/{file}: model.w[2:4,0:6] at byte {offset} overlaps the "
                                           "item before it", "model.w[2:4,0:6]")]  # fmt: skip
    assert seen["full"] == [*full_before.get(damage, []), cover]
    assert seen["quick"] == seen["quick_pure"] == [cover, *quick_after.get(damage, [])]
    assert seen["whole"]["model.w"] is False and seen["whole"]["model.emb"] is True


def _item(folder: Path, fqn: str, offsets) -> tuple[str, int]:
    """The data file and byte offset of a chunk's item."""
    meta = pickle.loads((folder / ".metadata").read_bytes())  # written by this test: safe to load
    return next((v.relative_path, v.offset) for k, v in meta.storage_data.items()
                if k.fqn == fqn and tuple(k.offset) == offsets)  # fmt: skip


@needs_native
def test_rows_cut_differently_with_one_chunk_moved_are_corrupt(saves, tmp_path, monkeypatch):
    """The 2,109-chunk layout with one chunk one column to the right (it overlaps the next, leaves a gap)."""
    folder = _rewritten(saves["bands"], tmp_path, _moved("model.w", (10, 6), new_offsets=(10, 7)))
    seen = _listings(folder, monkeypatch)
    assert seen["full"] == seen["quick"] == seen["quick_pure"] == [_corrupt(folder, 2109, shape="[64, 96]")]
    assert seen["whole"] == {"model.w": False, "model.b": True}


@pytest.mark.parametrize("pure", [False, True])
@pytest.mark.parametrize("quick", [False, True])
def test_the_cli_fails_on_a_layout_that_does_not_tile(saves, tmp_path, monkeypatch, capsys, pure, quick):
    from ckinspect.cli import main

    folder = _rewritten(saves["rows4"], tmp_path, DAMAGE["gap"][0])
    if pure:
        monkeypatch.setenv(PURE_ENV, "1")
    assert main(["--report", str(folder), "--format", "json", *(["--quick"] if quick else [])]) == 1
    findings = json.loads(capsys.readouterr().out)["files"][0]["findings"]
    assert findings == [{"code": "CORRUPT", "severity": "error", "message": _corrupt(folder, 3)[1],
                         "tensor": "model.w"}]  # fmt: skip
    assert main(["--report", str(saves["rows4"]), *(["--quick"] if quick else [])]) == 0
