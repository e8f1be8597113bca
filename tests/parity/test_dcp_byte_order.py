"""torch.distributed.checkpoint's default writer (SerializationFormat.TORCH_SAVE) stores every item as its own
torch.save archive inside a `.distcp` file, and torch.save writes a `byteorder` record into each (filesystem.py's
_write_item; `.metadata` records no byte order). A save from a big-endian host therefore says `big` item by
item, and `dcp.load` (FileSystemReader.read_data: torch.load of each item) swaps each item's storages. The
same save made here as that host makes it: each item rewritten with tests/parity's big-endian archive writer,
the data files re-laid and `.metadata`'s offsets and lengths moved to match, then loaded by torch's own
dcp.load as the oracle. Before, ckinspect read such items little-endian: their NaN went uncounted, and a
diff against the little-endian save called every float tensor changed."""

from __future__ import annotations

import io
import pickle
import shutil
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from ckinspect.analysis.diff import diff_checkpoints
from ckinspect.analysis.scan import scan_values
from ckinspect.formats import open_checkpoint
from ckinspect.ops.convert import convert
from tests.parity.test_torch_parity import ckinspect_bytes
from tests.parity.torch_cases import _swapped_archive


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(25)
    w = torch.randn(6, 5, generator=g)
    w[1, 2], w[3, 0], w[4, 4] = float("nan"), float("inf"), float("-inf")
    z = torch.randn(4, generator=g, dtype=torch.complex64)
    z[2] = complex(float("nan"), 1.0)
    return {
        "w": w,
        "h": w.to(torch.float16),
        "b": w.to(torch.bfloat16),
        "z": z,
        "i": torch.arange(10, dtype=torch.int64) * 1_000_003,
        "e": torch.arange(8, dtype=torch.float32).to(torch.float8_e5m2),
    }


def _save(folder: Path, state: dict[str, torch.Tensor]) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled ... single process"
        dcp.save(state, checkpoint_id=str(folder))
    return folder


def _as_big_endian_host_saves_it(little: Path, big: Path) -> None:
    """Every item of `little` rewritten as torch.save writes it on a big-endian host; files and .metadata re-laid."""
    shutil.copytree(little, big)
    meta = pickle.loads((little / ".metadata").read_bytes())  # noqa: S301 - the test's own save
    by_file: dict[str, list] = {}
    for index, info in meta.storage_data.items():
        by_file.setdefault(info.relative_path, []).append((info.offset, index, info))
    for relative, items in by_file.items():
        data = (little / relative).read_bytes()
        out = io.BytesIO()
        for offset, index, info in sorted(items, key=lambda x: x[0]):
            item = data[offset : offset + info.length]
            buffer = io.BytesIO()
            writer = torch._C.PyTorchFileWriter(buffer)
            for name, record in _swapped_archive(item):
                writer.write_record(name, record, len(record))
            writer.write_end_of_file()
            swapped = buffer.getvalue()
            info.offset, info.length = out.tell(), len(swapped)
            meta.storage_data[index] = info
            out.write(swapped)
        (big / relative).write_bytes(out.getvalue())
    (big / ".metadata").write_bytes(pickle.dumps(meta))


@pytest.fixture(scope="module")
def saves(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dcp_byte_order")
    little = _save(root / "little", _state())
    _as_big_endian_host_saves_it(little, root / "big")
    changed = _state()
    changed["w"][0, 0] += 1
    _save(root / "changed_little", changed)
    _as_big_endian_host_saves_it(root / "changed_little", root / "changed_big")
    return {"little": little, "big": root / "big", "changed_big": root / "changed_big"}


def _dcp_load(folder: Path) -> dict[str, torch.Tensor]:
    target = {k: torch.empty_like(v) for k, v in _state().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(target, checkpoint_id=str(folder))
    return target


def test_torch_swaps_the_items_back(saves: dict[str, Path]) -> None:
    """The oracle: torch's dcp.load reads the big-endian save as the values saved (so the rewrite is faithful)."""
    loaded = _dcp_load(saves["big"])
    for name, value in _state().items():
        assert torch.equal(loaded[name].view(torch.uint8), value.view(torch.uint8)), name
    raw = (saves["big"] / "__0_0.distcp").read_bytes()
    assert raw.count(b"big") == len(_state())  # one byteorder record per item


def test_values_scan_and_diff_read_each_item_in_its_own_byte_order(saves: dict[str, Path]) -> None:
    loaded = _dcp_load(saves["big"])
    ckpt = open_checkpoint(saves["big"])
    stats = scan_values(ckpt).stats
    for t in ckpt.tensors:
        expected = loaded[t.name.split(".")[-1]]
        assert ckinspect_bytes(ckpt, t) == expected.contiguous().view(torch.uint8).numpy().tobytes(), t.name
        if expected.is_floating_point() or expected.is_complex():
            wide = expected.to(torch.complex128 if expected.is_complex() else torch.float64)
            nan, nonfinite = int(torch.isnan(wide).sum()), int((~torch.isfinite(wide)).sum())
            assert (stats[t.name].nan, stats[t.name].nonfinite) == (nan, nonfinite), t.name
    same = diff_checkpoints(open_checkpoint(saves["little"]), ckpt)
    assert same.identical, (same.changed, same.unreadable)
    other = diff_checkpoints(open_checkpoint(saves["little"]), open_checkpoint(saves["changed_big"]))
    assert [(c.name.split(".")[-1], c.n_diff) for c in other.changed] == [("w", 1)]


def test_convert_writes_the_items_values(saves: dict[str, Path], tmp_path: Path) -> None:
    from safetensors.torch import load_file

    convert(saves["big"], tmp_path / "out.safetensors", announce=lambda _: None)
    written = load_file(tmp_path / "out.safetensors")
    loaded = _dcp_load(saves["big"])
    assert sorted(k.split(".")[-1] for k in written) == sorted(loaded)
    for key, value in written.items():
        assert torch.equal(value.view(torch.uint8), loaded[key.split(".")[-1]].view(torch.uint8)), key
