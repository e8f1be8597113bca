"""The TUI's export: report.tensor_table renders the tensors shown as CSV or JSON, ops.export writes it
atomically to a new file, never over one."""

from __future__ import annotations

import csv
import json

import pytest

from ckinspect.formats import open_checkpoint
from ckinspect.report.tensor_table import EXPORT_FIELDS
from ckinspect.tui.core import export_tensors

torch = pytest.importorskip("torch")


def _saved(tmp_path):
    state = {"w": torch.zeros(3, 4), "b": torch.ones(4, dtype=torch.float16)}
    path = tmp_path / "m.pth"
    torch.save(state, path)
    return open_checkpoint(path), state


def test_json_and_csv_hold_the_tensors_shown_in_order(tmp_path):
    ckpt, state = _saved(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    written = export_tensors(ckpt, ["w", "b"], "json", out)
    doc = json.loads(written.read_text())
    assert written.name == "m.pth-tensors.json" and doc["path"] == str(ckpt.path)
    assert [(e["name"], e["shape"], e["bytes"]) for e in doc["tensors"]] == [
        (n, list(state[n].shape), state[n].numel() * state[n].element_size()) for n in ("w", "b")
    ]
    rows = list(csv.DictReader(export_tensors(ckpt, ["b"], "csv", out).open()))
    assert list(rows[0]) == list(EXPORT_FIELDS) and [(r["name"], r["shape"]) for r in rows] == [("b", "4")]


def test_a_second_export_takes_a_new_name_and_leaves_the_first(tmp_path):
    ckpt, _ = _saved(tmp_path)
    first = export_tensors(ckpt, ["w"], "csv", tmp_path)
    before = first.read_bytes()
    second = export_tensors(ckpt, ["b"], "csv", tmp_path)
    assert second.name == "m.pth-tensors-1.csv" and first.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pth", "m.pth-tensors-1.csv", "m.pth-tensors.csv"]
