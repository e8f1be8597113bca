"""Names from a file never reach a terminal as control sequences, nor break out of Markdown."""

from __future__ import annotations

import torch
from safetensors.torch import save_file

from ckinspect.cli import main
from ckinspect.fmt import md_code, md_text, terminal_safe

HOSTILE = [
    "evil\x1b]0;pwned\x07title",  # OSC: window title
    "clip\x1b]52;c;ZWNobyBodW50ZXIy\x07",  # OSC 52: clipboard write
    "move\x1b[2J\x1b[H",  # CSI: clear screen, cursor home
    "c1\x9b31m",  # 8-bit CSI
    "bidi\u202etxt.exe",
    "tick`</details><img src=x onerror=alert(1)>`|cell|",
    "link[click](javascript:alert(1))",
]


def test_terminal_safe_makes_every_control_visible():
    for name in HOSTILE:
        shown = terminal_safe(name)
        assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c == "\u202e" for c in shown)
    assert terminal_safe("a\x1bb") == "a\\x1bb" and terminal_safe("x\u202ey") == "x\\u202ey"


def test_markdown_code_spans_and_text_cannot_be_broken_out_of():
    span = md_code("a``b`")
    fence = span[: len(span) - len(span.lstrip("`"))]
    assert fence == "```" and span.endswith("```") and "``b`" in span
    assert md_code("x|y") == "`x\\|y`"
    text = md_text("</details><b>|[a](b)`")
    assert "<" not in text and ">" not in text and "\\|" in text and "\\[" in text and "\\`" in text


def _hostile_file(tmp_path):
    path = tmp_path / "names\x1b[31m.safetensors"
    save_file({name: torch.ones(2) for name in HOSTILE}, path)
    return path


def test_text_reports_print_no_control_characters(tmp_path, capsys):
    path = _hostile_file(tmp_path)
    other = tmp_path / "other.safetensors"
    save_file({"w": torch.ones(2)}, other)
    for argv in (["--report", str(path)], ["diff", str(path), str(other), "--report"], ["repair", str(tmp_path)]):
        main(argv)
        out, err = capsys.readouterr()
        text = out + err
        assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text and "\u202e" not in text, argv
    main(["--report", str(path)])
    assert "evil\\x1b]0;pwned\\x07title" in capsys.readouterr().out.replace("\n", "").replace(" ", "")


def test_markdown_report_keeps_every_name_inside_its_code_span(tmp_path, capsys):
    path = _hostile_file(tmp_path)
    main(["--report", str(path), "--format", "markdown"])
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    # the backtick-laden name sits in one double-backtick span, so its </details> and <img> stay text
    assert "| `` tick`</details><img src=x onerror=alert(1)>`\\|cell\\| `` |" in out
    assert out.count("<img") == 1 and "`link[click](javascript:alert(1))`" in out
