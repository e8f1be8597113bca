"""Text output never breaks a name inside a word: it wraps at dots (and spaces, slashes), or shortens the middle."""

from __future__ import annotations

import re

import torch

from ckinspect.cli import main
from ckinspect.report.console import shorten_middle, wrap_at_breaks

LONG = "model.encoder.layers.11.self_attention.linear_qkv.layer_norm_weight"


def test_wrap_at_dots_and_shorten_what_no_line_holds():
    assert wrap_at_breaks(LONG, 30) == ["model.encoder.layers.11.", "self_attention.linear_qkv.", "layer_norm_weight"]
    assert wrap_at_breaks("a.averyveryverylongpartofaname.b", 12) == ["a.", "averyv…name.", "b"]
    assert shorten_middle("abcdefghij", 7) == "abc…hij" and len(shorten_middle("abcdefghij", 6)) == 6


def test_piped_report_keeps_every_name_part_whole(tmp_path, capsys):
    parts = LONG.split(".")
    torch.save({LONG: torch.zeros(2), "decoder.forward_basis_buffer": torch.ones(3) * 1e6}, tmp_path / "w.pt")
    main(["--report", str(tmp_path / "w.pt")])
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    words = set(re.findall(r"[A-Za-z0-9_]+", out))
    for part in [*parts, "forward_basis_buffer"]:
        assert part in words, f"{part} was broken across lines"
