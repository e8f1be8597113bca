"""`ckinspect --report --checkpoints-only FILE...` (what the pre-commit hook runs): files that are not
checkpoints by suffix or content are skipped silently; everything else is judged as usual."""

from __future__ import annotations

import pytest

from ckinspect.cli import main
from ckinspect.vocab import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK
from tests.report.ci_files import SYSTEM_PICKLE, clean_weights

pytestmark = pytest.mark.torchfree


def test_no_checkpoint_among_the_files_is_a_silent_pass(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "figure.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    (tmp_path / "README.md").write_text("# Some text that is not a pickle\n")
    (tmp_path / "archive.tar").write_bytes(b"\0" * 1024)
    assert main(["--report", "--checkpoints-only", "figure.png", "README.md", "archive.tar"]) == EXIT_OK
    assert capsys.readouterr() == ("", "")
    # without the switch, a file named on the command line is always judged
    assert main(["--report", "figure.png"]) == EXIT_FINDINGS
    assert "CORRUPT" in capsys.readouterr().out


def test_checkpoint_suffix_or_content_is_judged(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "figure.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    (tmp_path / "cut.pt").write_bytes(b"garbage, not a torch file")
    (tmp_path / "notes.txt").write_bytes(SYSTEM_PICKLE)  # a protocol-0 pickle is text, under any name
    clean_weights(tmp_path / "w.safetensors")
    status = main(["--report", "--checkpoints-only", "--format", "json", "figure.png", "cut.pt", "notes.txt",
                   "w.safetensors"])  # fmt: skip
    import json

    files = {f["path"]: [x["code"] for x in f["findings"]] for f in json.loads(capsys.readouterr().out)["files"]}
    assert status == EXIT_FINDINGS
    assert files == {"cut.pt": ["CORRUPT"], "notes.txt": ["UNSAFE_PICKLE"], "w.safetensors": []}


def test_a_missing_file_is_still_an_error(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["--report", "--checkpoints-only", "gone.pt"]) == EXIT_ERROR
    assert "gone.pt: no such file or folder" in capsys.readouterr().err
