"""`diff --report` uses the width it has (issue 30, point 6): at 80 columns the changed-tensor table drops
columns in the documented order (DROP_ORDER), at 120 fewer, at 200 none; a header never passes the width,
and every tensor name is printed whole on one line (a long one on a line of its own), never split or cut."""

from __future__ import annotations

import pytest
import torch

from ckinspect.cli import main
from ckinspect.report.diff_report import DROP_ORDER

ALL = ["tensor", "change", "dtype", "shape", "max |Δ|", "max rel", "differing", "first at"]
NAMES = (
    "model.encoder.layers.0.self_attention.query_key_value.weight",
    "model.encoder.layers.0.self_attention.dense.bias",
    "model.encoder.layers.0.mlp.dense_h_to_4h.weight",
    "optimizer.state.10.exp_avg_sq",
)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Four kinds of change, so that no column goes to the title: values, dtype, shape, one value."""
    folder = tmp_path_factory.mktemp("diff-widths")
    g = torch.Generator().manual_seed(0)
    a = {
        NAMES[0]: torch.randn(3, 5, 7, 11, 13, generator=g),
        NAMES[1]: torch.randn(64, generator=g),
        NAMES[2]: torch.randn(16, 8, generator=g),
        NAMES[3]: torch.rand(3, 5, generator=g),
    }
    b = {k: v.clone() for k, v in a.items()}
    b[NAMES[0]] += 1e-3
    b[NAMES[1]] = a[NAMES[1]].half()
    b[NAMES[2]] = torch.randn(8, 16, generator=g)
    b[NAMES[3]][1, 2] += 1
    torch.save(a, folder / "a.pt")
    torch.save(b, folder / "b.pt")
    return folder / "a.pt", folder / "b.pt"


def columns_at(pair, capsys, monkeypatch, width: int) -> tuple[list[str], list[str]]:
    monkeypatch.setenv("COLUMNS", str(width))
    assert main(["diff", str(pair[0]), str(pair[1]), "--report"]) == 1  # they differ
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("tensor "))
    assert len(header) <= width
    return [c for c in ALL if f" {c}" in f" {header}"], lines


@pytest.mark.parametrize("width", [80, 120, 200])
def test_diff_table_columns_follow_the_width_and_drop_in_the_documented_order(pair, capsys, monkeypatch, width):
    shown, lines = columns_at(pair, capsys, monkeypatch, width)
    dropped = [c for c in ALL if c not in shown]
    assert set(dropped) == set(DROP_ORDER[: len(dropped)]), dropped  # the first ones of the order
    assert {"tensor", "max |Δ|", "differing"} <= set(shown)
    for name in NAMES:  # whole, on one line, at every width
        assert any(line.split()[:1] == [name] for line in lines), name
    for line in lines:
        if not line.startswith(NAMES):
            assert len(line) <= width, line
    if width == 200:
        assert shown == ALL
        row = next(line for line in lines if line.startswith(NAMES[0]))
        assert "3x5x7x11x13" in row and "[0,0,0,0,0]" in row  # the shape whole, not 3x5x7x11…
    if width == 80:
        assert "dtype float32 -> float16" in "\n".join(lines)  # a dropped dtype that changed is still said


def test_wider_shows_at_least_the_columns_of_narrower(pair, capsys, monkeypatch):
    narrow, _ = columns_at(pair, capsys, monkeypatch, 80)
    middle, _ = columns_at(pair, capsys, monkeypatch, 120)
    wide, _ = columns_at(pair, capsys, monkeypatch, 200)
    assert set(narrow) < set(middle) < set(wide)
