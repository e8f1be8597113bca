"""open_checkpoint: one call for any path; bad content is a finding, a missing path a one-line error."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file

from ckinspect.formats import open_checkpoint
from ckinspect.vocab import CkinspectError
from tests.conftest import REPO, cli_env


def test_missing_path_is_a_one_line_error(tmp_path):
    with pytest.raises(CkinspectError) as caught:
        open_checkpoint(tmp_path / "nope.pt")
    assert str(caught.value) == f"{tmp_path / 'nope.pt'}: no such file or folder"


def test_unreadable_path_is_a_one_line_error(tmp_path, monkeypatch):
    import ckinspect.io.folders as formats  # where the readable check opens the file

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    path = tmp_path / "locked.pt"
    path.write_bytes(b"x")
    monkeypatch.setattr(formats, "open", denied, raising=False)  # root could read a chmod 0 file
    with pytest.raises(CkinspectError) as caught:
        open_checkpoint(path)
    assert str(caught.value) == f"{path}: cannot read (Permission denied)"


def test_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "pipe.pt"
    os.mkfifo(fifo)
    with pytest.raises(CkinspectError, match="pipe.pt: not a regular file or folder$"):
        open_checkpoint(fifo)


def test_safetensors_dispatch(tmp_path):
    path = tmp_path / "m.safetensors"
    save_file({"w": torch.zeros(2, 2)}, path)
    ckpt = open_checkpoint(path)
    assert ckpt.format == "safetensors" and ckpt.findings == [] and ckpt.tensor("w").shape == (2, 2)


def test_sharded_dispatch(tmp_path):
    save_file({"w": torch.zeros(2)}, tmp_path / "a.safetensors")
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"w": "a.safetensors"}}))
    ckpt = open_checkpoint(index)
    assert ckpt.format == "sharded" and ckpt.findings == [] and [t.name for t in ckpt.tensors] == ["w"]


@pytest.mark.parametrize(
    "data, looks_like",
    [
        (b"", "empty"),
        (b"hello\n", "text"),
        (
            b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 10\n",
            "a git-lfs pointer (run `git lfs pull`)",
        ),
        (random.Random(4096).randbytes(4096), "random bytes"),  # fixed: some draws start like a header
        (b"<html><body>Sign in</body></html>", "an HTML page"),
    ],
    ids=["empty", "text", "lfs", "random", "html"],
)
def test_non_checkpoint_is_corrupt_with_what_it_looks_like(tmp_path, data, looks_like):
    path = tmp_path / "model.pt"
    path.write_bytes(data)
    ckpt = open_checkpoint(path)
    assert ckpt.format == "unknown"
    assert ckpt.file_bytes == len(data) and ckpt.files == [path]
    assert [(f.code, f.message) for f in ckpt.findings] == [("CORRUPT", f"not a checkpoint: looks like {looks_like}")]


def test_plain_folder_and_trainer_folder(tmp_path):
    ckpt = open_checkpoint(tmp_path)
    assert ckpt.format == "unknown"
    assert ckpt.findings[0].message == "not a checkpoint: looks like a folder without .metadata or *.distcp"
    (tmp_path / "trainer_state.json").write_text("{}")
    assert "Hugging Face Trainer checkpoint folder" in open_checkpoint(tmp_path).findings[0].message


def test_reader_exception_becomes_a_finding(tmp_path, monkeypatch):
    import ckinspect.formats.safetensors as st

    def broken(path, member=None, reader=None):
        raise RecursionError("maximum recursion depth exceeded\nwhile decoding")

    monkeypatch.setattr(st, "read_safetensors", broken)
    path = tmp_path / "m.safetensors"
    save_file({"w": torch.zeros(2)}, path)
    ckpt = open_checkpoint(path)
    assert ckpt.format == "safetensors"
    assert [(f.code, f.message) for f in ckpt.findings] == [
        ("CORRUPT", "unreadable safetensors file: RecursionError: maximum recursion depth exceeded")
    ]


def test_opening_never_imports_torch_or_safetensors(tmp_path):
    path = tmp_path / "m.safetensors"
    save_file({"w": torch.zeros(2)}, path)
    (tmp_path / "notes.txt").write_text("hi")
    code = (
        "import sys\n"
        "from ckinspect.formats import open_checkpoint\n"
        "from ckinspect.formats.discover import find_checkpoints\n"
        f"for t in find_checkpoints([{str(tmp_path)!r}]): open_checkpoint(t.path)\n"
        f"open_checkpoint({str(tmp_path / 'notes.txt')!r})\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'safetensors', 'numpy', 'textual'))\n"
        "print(bad)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=cli_env(), timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_sniff_failure_becomes_a_finding(tmp_path, monkeypatch):
    import ckinspect.formats.sniff as sniff_module

    def broken(path, reader=None):
        raise ValueError("boom")

    monkeypatch.setattr(sniff_module, "sniff", broken)
    path = tmp_path / "m.pt"
    path.write_bytes(b"x")
    ckpt = open_checkpoint(path)
    assert ckpt.format == "unknown"
    assert [(f.code, f.message) for f in ckpt.findings] == [("CORRUPT", "cannot tell what this is: ValueError: boom")]
