"""Text output never breaks a name inside a word and never drops characters from it: in the text report a
name too wide for its column takes a line of its own (overflowing the width when it must); messages wrap
at spaces only. The width of piped output is set here (COLUMNS), never inherited from the terminal the
suite runs in."""

from __future__ import annotations

import re

import pytest
import torch

from ckinspect.cli import main
from ckinspect.report.console import wrap_at_breaks, wrap_words

LONG = "model.encoder.layers.11.self_attention.linear_qkv.layer_norm_weight"


def test_wrap_at_dots_and_keep_whole_what_no_line_holds():
    assert wrap_at_breaks(LONG, 30) == ["model.encoder.layers.11.", "self_attention.linear_qkv.", "layer_norm_weight"]
    assert wrap_at_breaks("a.averyveryverylongpartofaname.b", 12) == ["a.", "averyveryverylongpartofaname.", "b"]
    assert wrap_words(f"NaN in {LONG} (3 values)", 30) == ["NaN in", LONG, "(3 values)"]


NAMES = [
    "optimizer.state.10.exp_avg_sq",
    "model.transformer.h.11.attn.c_attn.weight_with_a_rather_long_suffix_that_goes_on_and_on.bias",  # 92
    LONG,
]


@pytest.mark.parametrize("columns", ["80", "200"])
def test_piped_report_prints_every_tensor_name_whole_on_one_line(tmp_path, capsys, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)
    state = {name: torch.full((3, 5), float("nan")) if "10" in name else torch.zeros(3, 5) for name in NAMES}
    torch.save(state, tmp_path / "w.pt")
    main(["--report", str(tmp_path / "w.pt")])
    lines = capsys.readouterr().out.splitlines()
    for name in NAMES:
        assert any(name in line for line in lines), f"{name} was split or shortened"
    assert not any("…" in line for line in lines)
    header = next(line for line in lines if line.startswith("tensor"))
    assert len(header) <= int(columns)  # only a name wider than the line may overflow it


def test_piped_report_keeps_every_name_part_whole(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    parts = LONG.split(".")
    torch.save({LONG: torch.zeros(2), "decoder.forward_basis_buffer": torch.ones(3) * 1e6}, tmp_path / "w.pt")
    main(["--report", str(tmp_path / "w.pt")])
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    words = set(re.findall(r"[A-Za-z0-9_]+", out))
    for part in [*parts, "forward_basis_buffer"]:
        assert part in words, f"{part} was broken across lines"


def test_on_an_80_column_terminal_every_name_part_stays_whole(tmp_path):
    """On a real terminal (a pty 80 columns wide, no COLUMNS), with colour: the same rule as in a pipe."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    from tests.conftest import cli_env

    torch.save({LONG: torch.zeros(2), "decoder.forward_basis_buffer": torch.ones(3) * 1e6}, tmp_path / "w.pt")
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = cli_env()
    env.pop("COLUMNS")
    env.pop("NO_COLOR", None)
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ckinspect", "--report", str(tmp_path / "w.pt")],
        stdin=follower,
        stdout=follower,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=120) in (0, 1), proc.stderr.read() if proc.stderr else ""
    raw = b"".join(chunks).decode()
    assert "\x1b[" in raw  # a terminal: coloured
    out = re.sub(r"\x1b\[[0-9;]*m", "", raw).replace("\r\n", "\n")
    assert max(len(line) for line in out.splitlines()) <= 80
    words = set(re.findall(r"[A-Za-z0-9_]+", out))
    for part in [*LONG.split("."), "forward_basis_buffer"]:
        assert part in words, f"{part} was broken across lines"
    assert any(line.startswith("model.encoder.layers.11.") for line in out.splitlines())
