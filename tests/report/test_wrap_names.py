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
