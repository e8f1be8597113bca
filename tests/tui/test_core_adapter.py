"""The TUI's plain-Python half: value statistics, name filters, diff alignment.
(That nothing outside the TUI imports textual: tests/test_import_hygiene.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ckinspect.analysis.value_stats import tensor_value_stats
from ckinspect.fmt import human_bytes
from ckinspect.model import Checkpoint, StorageInfo, TensorInfo
from ckinspect.tui.core import name_matcher
from ckinspect.tui.screens.diff import align


def _one_tensor(tmp_path: Path, raw: bytes, tensor: TensorInfo) -> Checkpoint:
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"\0" * 16 + raw)
    storage = StorageInfo(tensor.storage_key, tensor.dtype, len(raw), blob, 16)
    return Checkpoint(Path("x.pth"), "torch-zip", len(raw), [tensor], {tensor.storage_key: storage})


def test_bfloat16_statistics_without_torch(tmp_path):
    values = np.array([1.0, -2.0, 3.0, np.inf, 1e5], dtype=np.float32)
    bf16 = (values.view(np.uint32) >> 16).astype("<u2").tobytes()  # exact for these values
    t = TensorInfo("w", "bfloat16", (5,), (1,), "0")
    stats = tensor_value_stats(_one_tensor(tmp_path, bf16, t), t)
    assert (stats.minimum, stats.nonfinite, stats.fp16_overflow) == (-2.0, 1, 1)
    assert abs(stats.maximum - 99840.0) < 1  # 1e5 rounded to bf16
    assert sum(stats.histogram) == 4


def test_statistics_of_a_transposed_view_read_its_own_elements(tmp_path):
    base = np.arange(12, dtype=np.float32)  # a 3x4 storage; the view is its transpose, offset by 0
    t = TensorInfo("wt", "float32", (4, 3), (1, 4), "0")
    stats = tensor_value_stats(_one_tensor(tmp_path, base.tobytes(), t), t)
    assert (stats.count, stats.minimum, stats.maximum, stats.mean) == (12, 0.0, 11.0, 5.5)


def test_filter_is_a_substring_or_a_glob():
    assert name_matcher("attn")("model.layers.0.attn.wq.weight")
    assert not name_matcher("model.*.wq")("model.layers.0.attn.wk.weight")
    assert name_matcher("model.*.w?.weight")("model.layers.0.attn.wq.weight")
    assert name_matcher("EXP_AVG")("optimizer.state.0.exp_avg")


def test_the_tui_writes_sizes_as_the_reports_do_in_binary_units():
    sizes = (12, 1536, 64 * 1024, int(1.25 * 1024**2), 3 * 1024**3)
    assert [human_bytes(n) for n in sizes] == ["12 B", "1.5 KiB", "64.0 KiB", "1.2 MiB", "3.0 GiB"]


def test_alignment_keeps_a_order_and_slots_b_only_tensors_after_their_neighbour():
    def ckpt(*names: str, shape=(2,)) -> Checkpoint:
        return Checkpoint(Path("c"), "torch-zip", 0, [TensorInfo(n, "float32", shape, (1,), n) for n in names])

    a, b = ckpt("x", "y", "z"), ckpt("x", "new", "z", "tail")
    b.tensors[0] = TensorInfo("x", "float32", (3,), (1,), "x")
    pairs = align(a, b)
    assert [(p.name, p.status) for p in pairs] == [
        ("x", "shape changed"),
        ("new", "only in B"),
        ("y", "only in A"),
        ("z", "comparing"),
        ("tail", "only in B"),
    ]


def test_rows_align_the_way_the_diff_matches_renamed_names():
    from ckinspect.analysis.diff import match_names

    def ckpt(*names: str) -> Checkpoint:
        return Checkpoint(Path("c"), "torch-zip", 0, [TensorInfo(n, "float32", (2,), (1,), n) for n in names])

    a = ckpt("model.emb", "model.w", "model.norm", "optimizer.state.0.exp_avg")
    b = ckpt("emb", "w", "norm")
    matched = {x: y for x, y in match_names(a, b) if x and y}
    assert matched == {"model.w": "w", "model.emb": "emb", "model.norm": "norm"}
    assert [(p.name, p.b.name if p.b else None, p.status) for p in align(a, b, matched)] == [
        ("model.emb", "emb", "comparing"),
        ("model.w", "w", "comparing"),
        ("model.norm", "norm", "comparing"),
        ("optimizer.state.0.exp_avg", None, "only in A"),
    ]
