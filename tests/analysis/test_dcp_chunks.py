"""A DCP tensor sharded over ranks is one entry in the full read too (not one per chunk), and every value
reader goes through all of its chunks: the value scan's statistics, the C-order reads (diff, TUI, convert)
and the diff, chunk against chunk or across different cuts. Real values, saved over 2 and 4 ranks by torch's
own planner and writer (tests/helpers/dcp_saves); torch.distributed.checkpoint.load into full tensors is the
oracle for every number."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from ckinspect.analysis.diff import diff_checkpoints
from ckinspect.analysis.scan import scan_values
from ckinspect.formats.dcp import read_dcp
from ckinspect.io.blobs import Blobs
from ckinspect.io.values import decode, raw_blocks
from ckinspect.jobs.parallel import scan_checkpoints
from tests.helpers.dcp_saves import loaded, sharded_save


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    state = {
        "model.wq": torch.randn(13, 10, generator=g),
        "model.norm": torch.randn(9, generator=g),
        "model.emb": (torch.randn(6, 8, 3, generator=g) * 100).to(torch.bfloat16),
        "model.half": torch.randn(8, 6, generator=g).to(torch.float16),
        "optim.state.model.wq.exp_avg": torch.randn(13, 10, generator=g, dtype=torch.float64),
        "optim.state.model.wq.step": torch.tensor(12.0),
        "model.ids": torch.arange(40, dtype=torch.int64).reshape(8, 5),
    }
    state["model.wq"][11, 3] = float("nan")  # row 11 of 13: the last rank's chunk (rows 12/4 -> 4 a rank)
    state["model.wq"][0, 9] = float("-inf")
    state["model.norm"][2] = 1e6  # beyond float16
    state["model.emb"][5, 7, 2] = float("inf")
    return state


@pytest.fixture(scope="module")
def saves(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("chunks")
    state = _state()
    changed = {k: v.clone() for k, v in state.items()}
    changed["model.wq"][5, 2] += 1
    changed["model.emb"][1, 0, 0] = 0.5
    out = {}
    for name, st, ranks, grid in [("rows4", state, 4, False), ("rows2", state, 2, False), ("grid4", state, 4, True),
                                  ("changed4", changed, 4, False), ("changed_grid4", changed, 4, True)]:  # fmt: skip
        out[name] = root / name
        sharded_save(out[name], st, ranks, grid=grid)
    return out


def _torch_stats(t: torch.Tensor) -> dict[str, float | int]:
    """The scan's statistics computed by torch on the full tensor dcp.load gives."""
    x = t.double().reshape(-1)
    finite = x[torch.isfinite(x)]
    return {
        "count": x.numel(),
        "nan": int(torch.isnan(x).sum()),
        "nonfinite": int((~torch.isfinite(x)).sum()),
        "fp16_overflow": int((finite.abs() > 65504).sum()),
        "min": float(finite.min()),
        "max": float(finite.max()),
        "mean": float(finite.mean()),
        "std": float(finite.std()) if finite.numel() > 1 else float("nan"),
    }


@pytest.mark.parametrize("name", ["rows4", "rows2", "grid4"])
def test_the_full_read_lists_one_entry_per_tensor_as_quick_does(saves, name):
    full, quick = read_dcp(saves[name]), read_dcp(saves[name], trust_layout=True)
    assert full.findings == quick.findings == []
    entries = [(t.name, t.dtype, t.shape) for t in full.tensors]
    assert entries == [(t.name, t.dtype, t.shape) for t in quick.tensors]
    state = _state()
    assert sorted(n for n, _, _ in entries) == sorted(state)
    for t in full.tensors:
        assert t.shape == tuple(state[t.name].shape)
        ext = full.storages[t.storage_key].extents
        if t.numel > 1 and t.name != "optim.state.model.wq.step":
            assert ext is not None and ext.whole and sum(ext.length) == t.nbytes


def test_the_json_report_lists_the_same_tensors_with_or_without_quick(saves, capsys):
    from ckinspect.cli import main

    reports = []
    for extra in ([], ["--quick"]):
        main(["--report", str(saves["rows4"]), "--format", "json", "--fail-on", "never", *extra])
        reports.append(json.loads(capsys.readouterr().out)["files"][0])
    full, quick = reports
    assert full["tensors"] == quick["tensors"] and full["tensor_count"] == quick["tensor_count"] == len(_state())
    assert full["tensor_bytes"] == quick["tensor_bytes"]


@pytest.mark.parametrize("name", ["rows4", "rows2", "grid4"])
def test_the_scan_merges_the_chunks_as_if_each_tensor_were_read_whole(saves, name):
    state = _state()
    whole = loaded(saves[name], state)
    result = scan_values(read_dcp(saves[name]))
    for fqn, t in whole.items():
        if not t.is_floating_point():
            assert fqn not in result.stats
            continue
        want, got = _torch_stats(t), result.stats[fqn]
        assert (got.count, got.nan, got.nonfinite, got.fp16_overflow) == (
            want["count"], want["nan"], want["nonfinite"], want["fp16_overflow"])  # fmt: skip
        assert (got.min, got.max) == (want["min"], want["max"])
        assert got.mean == pytest.approx(want["mean"], rel=1e-12, abs=1e-12)
        if want["count"] - want["nonfinite"] > 1:
            assert got.std == pytest.approx(want["std"], rel=1e-9)


def test_a_nan_names_the_chunk_and_the_rank_file_that_hold_it(saves):
    ckpt = read_dcp(saves["rows4"])
    findings = [f for f in scan_values(ckpt).findings if f.tensor == "model.wq"]
    assert [f.code for f in findings] == ["NONFINITE"]
    # rows of 13 over 4 ranks: 4, 4, 4, 1; the NaN in row 11 is rank 2's chunk [8:12], the -Inf in rank 0's
    assert findings[0].message.startswith("model.wq: 1 NaN and 1 Inf among 130 values, in chunks [0:4,0:10] "
                                          "(__0_0.distcp at byte ")  # fmt: skip
    assert "[8:12,0:10] (__2_0.distcp at byte " in findings[0].message


def test_the_parallel_scan_finds_what_one_process_finds(saves):
    one, two = read_dcp(saves["grid4"]), read_dcp(saves["grid4"])
    scan_checkpoints([one], jobs=1)
    scan_checkpoints([two], jobs=2)
    assert one.findings == two.findings
    by_tensor = {f.tensor: f.message for f in one.findings}
    assert set(by_tensor) == {"model.wq", "model.norm", "model.emb"}
    assert "1 NaN and 1 Inf among 130 values" in by_tensor["model.wq"]  # counts merged over the 4 files
    assert "1 NaN and 0 Inf" not in by_tensor["model.emb"] and "0 NaN and 1 Inf among 144" in by_tensor["model.emb"]


@pytest.mark.parametrize("name", ["rows4", "grid4"])
def test_values_in_c_order_are_torchs_full_tensors(saves, name):
    whole = loaded(saves[name], _state())
    ckpt = read_dcp(saves[name])
    with Blobs() as blobs:
        for t in ckpt.tensors:
            for elements in (7, 1 << 20):  # slabs of a row, and the whole tensor at once
                blocks = list(raw_blocks(blobs, ckpt.storages[t.storage_key], t, elements))
                got = np.concatenate([decode(b, t.dtype) for b in blocks]) if blocks else np.empty(0)
                assert np.array_equal(got, whole[t.name].double().reshape(-1).numpy(), equal_nan=True), t.name


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("rows4", "rows4"),
        ("rows4", "rows2"),
        ("rows4", "grid4"),
        ("rows4", "changed4"),
        ("rows2", "changed4"),
        ("grid4", "changed_grid4"),
        ("grid4", "changed4"),
        ("rows2", "changed_grid4"),
    ],  # fmt: skip
)
def test_the_diff_compares_every_tensor_whatever_the_chunks(saves, a, b):
    state = _state()
    xa, xb = loaded(saves[a], state), loaded(saves[b], state)
    result = diff_checkpoints(read_dcp(saves[a]), read_dcp(saves[b]))
    assert result.unreadable == [] and result.only_a == result.only_b == []
    changed = {c.name: c for c in result.changed}
    verdicts = []
    for fqn in state:
        equal = torch.equal(xa[fqn], xb[fqn]) or bool(
            torch.isnan(xa[fqn]).eq(torch.isnan(xb[fqn])).all()
            and torch.equal(xa[fqn].nan_to_num(0.0), xb[fqn].nan_to_num(0.0))
        )  # NaN where both have NaN counts as equal, as the diff counts it
        assert (fqn in result.same) == equal and (fqn in changed) == (not equal), fqn
        verdicts.append(equal)
        if not equal:
            da, db = xa[fqn].double(), xb[fqn].double()
            differs = ~((da == db) | (da.isnan() & db.isnan()))
            assert changed[fqn].n_diff == int(differs.sum())
            first = np.unravel_index(int(differs.reshape(-1).nonzero()[0]), tuple(da.shape))
            assert changed[fqn].first_index == [int(i) for i in first]
            assert changed[fqn].max_abs_diff == float((da - db).abs()[differs].max())
    assert result.identical == all(verdicts) == ({a, b} <= {"rows4", "rows2", "grid4"})


def test_a_changed_byte_in_one_chunk_is_a_crc_mismatch_naming_it(saves, tmp_path):
    folder = tmp_path / "flipped"
    shutil.copytree(saves["rows4"], folder)
    ckpt = read_dcp(folder)
    t = ckpt.tensor("model.wq")
    assert t is not None
    ext = ckpt.storages[t.storage_key].extents
    assert ext is not None
    i = next(i for i in range(len(ext)) if ext.files[ext.file[i]].name == "__1_0.distcp")
    with open(ext.files[ext.file[i]], "r+b") as f:
        f.seek(ext.offset[i] + 5)
        byte = f.read(1)
        f.seek(ext.offset[i] + 5)
        f.write(bytes([byte[0] ^ 0x40]))
    crc = [f for f in scan_values(read_dcp(folder)).findings if f.code == "CORRUPT"]
    assert len(crc) == 1 and crc[0].tensor == "model.wq"
    assert crc[0].message.startswith(f"CRC mismatch in model.wq{ext.box_of(i)} (__1_0.distcp at byte {ext.offset[i]})")


def test_a_missing_rank_file_leaves_one_entry_whose_values_are_not_called_identical(saves, tmp_path):
    folder = tmp_path / "missing"
    shutil.copytree(saves["rows4"], folder)
    (folder / "__3_0.distcp").unlink()
    ckpt = read_dcp(folder)
    assert [t.name for t in ckpt.tensors] == [t.name for t in read_dcp(saves["rows4"]).tensors]
    assert {f.code for f in ckpt.findings} == {"MISSING_PARTS"}
    result = diff_checkpoints(read_dcp(saves["rows4"]), ckpt)
    assert not result.identical
    unreadable = dict(result.unreadable)
    assert "model.wq" in unreadable and "not read in order" in unreadable["model.wq"]


def test_chunks_held_as_views_are_each_listed_once(tmp_path):
    """An item holding its chunk as a view into a larger storage cannot be one extent: each chunk is then an
    entry of its own, `name[start:stop,...]`, once (it was listed twice: by the sharded read, then again)."""
    state = {"model.w": torch.arange(24.0).reshape(8, 3)}
    sharded_save(tmp_path / "views", state, 2, views=True)
    ckpt = read_dcp(tmp_path / "views")
    assert [(t.name, t.shape) for t in ckpt.tensors] == [("model.w[0:4,0:3]", (4, 3)), ("model.w[4:8,0:3]", (4, 3))]
    assert ckpt.findings == []
    assert list(ckpt.tree["model.w"]) == ["model.w[0:4,0:3]", "model.w[4:8,0:3]"]  # the planner's path: one key


def test_convert_writes_the_full_tensors(saves, tmp_path):
    from ckinspect.ops.convert import convert

    out = tmp_path / "one.pt"
    convert(saves["grid4"], out)
    state, written = _state(), torch.load(out, weights_only=True)
    flat = {}

    def walk(node, prefix):
        for k, v in node.items():
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}.")
            else:
                flat[f"{prefix}{k}"] = v

    walk(written, "")
    for fqn, t in state.items():
        assert torch.equal(flat[fqn].nan_to_num(0.0), t.nan_to_num(0.0)) and flat[fqn].dtype == t.dtype, fqn


def test_the_tuis_details_pane_shows_the_whole_tensors_numbers(saves):
    """tensor_value_stats (the details pane's numbers and histogram) over a tensor cut on two dimensions."""
    from ckinspect.analysis.value_stats import tensor_value_stats

    ckpt = read_dcp(saves["grid4"])
    whole = loaded(saves["grid4"], _state())
    for name in ("model.wq", "model.emb", "optim.state.model.wq.exp_avg"):
        t = ckpt.tensor(name)
        assert t is not None
        got, want = tensor_value_stats(ckpt, t), _torch_stats(whole[name])
        assert (got.count, got.nonfinite, got.fp16_overflow) == (want["count"], want["nonfinite"],
                                                                 want["fp16_overflow"])  # fmt: skip
        assert (got.minimum, got.maximum) == (want["min"], want["max"])
        assert got.mean == pytest.approx(want["mean"], rel=1e-12)
        finite = whole[name].double()[whole[name].double().isfinite()]
        counts = torch.histogram(finite, bins=24, range=(want["min"], want["max"])).hist
        assert got.histogram == [int(c) for c in counts]
