"""`pip install ckinspect` has no torch: every command that does not need it works without it, and the ones
that do say so in one line with the install command (exit 2).

Each test runs a fresh process in which torch cannot be imported: CI runs this file a second time in a
virtualenv built without torch (.ci/run, CKINSPECT_EXPECT_NO_TORCH=1); in the full one an import hook
hides it, so the same claims are checked on every run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ckinspect.optional import TORCH_INSTALL
from ckinspect.vocab import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK
from tests.report.ci_files import SAMPLES, hostile_pickle

pytestmark = pytest.mark.torchfree

HIDE_TORCH = """
import importlib.abc, sys
class _NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _NoTorch())
"""
CHECK_NOT_IMPORTED = (
    "\nassert not [m for m in sys.modules if m == 'torch' or m.startswith('torch.')], 'torch was imported'\n"
)


def python(code: str, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CKINSPECT_DEBUG"}
    env["COLUMNS"] = "120"
    return subprocess.run(
        [sys.executable, "-c", HIDE_TORCH + code, *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def ckinspect(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    code = "from ckinspect.cli import main\nstatus = main(sys.argv[1:])" + CHECK_NOT_IMPORTED + "sys.exit(status)"
    return python(code, *argv, cwd=cwd)


@pytest.fixture
def work(tmp_path):
    for name in ("interrupted", "straight-60", "stopped-30"):
        shutil.copytree(SAMPLES / name, tmp_path / name)
    return tmp_path


def test_this_environment_really_has_no_torch_when_ci_says_so():
    if os.environ.get("CKINSPECT_EXPECT_NO_TORCH") != "1":
        pytest.skip("the full virtualenv: torch is hidden per process instead")
    import importlib.util

    assert importlib.util.find_spec("torch") is None


def test_report_in_every_format(work):
    hostile_pickle(work / "evil.pkl")
    for fmt in ("text", "json", "markdown", "sarif", "junit"):
        proc = ckinspect("--report", "interrupted", "straight-60", "--format", fmt, "--fail-on", "warning", cwd=work)
        assert proc.returncode == EXIT_FINDINGS, proc.stderr  # LEFTOVER_TMP in interrupted/
        assert "tiny_resume.pth" in proc.stdout and proc.stderr == ""
    proc = ckinspect("--report", "straight-60", "--format", "json", cwd=work)
    doc = json.loads(proc.stdout)
    assert proc.returncode == EXIT_OK and [f["tensor_count"] > 0 for f in doc["files"]] == [True, True]
    proc = ckinspect("--report", "evil.pkl", cwd=work)
    assert proc.returncode == EXIT_FINDINGS and "UNSAFE_PICKLE" in proc.stdout


def test_diff(work):
    same = ckinspect("diff", "straight-60/tiny.pth", "straight-60/tiny.pth", "--report", cwd=work)
    assert same.returncode == EXIT_OK, same.stderr
    different = ckinspect(
        "diff", "straight-60/tiny.pth", "stopped-30/tiny.pth", "--report", "--format", "json", cwd=work
    )
    assert different.returncode == EXIT_FINDINGS, different.stderr
    assert "tok_embeddings.weight" in {c["name"] for c in json.loads(different.stdout)["diff"]["changed"]}


def test_repair_plan_apply_undo(work):
    tmp = work / "interrupted" / "tiny_resume.pth.tmp"
    before = tmp.read_bytes()
    assert ckinspect("repair", "interrupted", cwd=work).returncode == EXIT_FINDINGS
    applied = ckinspect("repair", "interrupted", "--apply", cwd=work)
    assert applied.returncode == EXIT_OK, applied.stderr
    assert not tmp.exists()
    undone = ckinspect("repair", "interrupted", "--undo", cwd=work)
    assert undone.returncode == EXIT_OK, undone.stderr
    assert tmp.read_bytes() == before


def _tensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file  # the safetensors package's numpy side: no torch either

    return load_file(str(path))


def test_convert_to_safetensors_and_its_values(work):
    out = work / "weights.safetensors"
    proc = ckinspect("convert", "straight-60/tiny_resume.pth", str(out), "--only", "model", cwd=work)
    assert proc.returncode == EXIT_OK, proc.stderr
    written = _tensors(out)
    # what ckinspect itself reads from the source, tensor by tensor (straight from the stored bytes)
    from ckinspect.analysis.diff import value_blocks
    from ckinspect.formats import open_checkpoint
    from ckinspect.io.blobs import Blobs

    source = open_checkpoint(work / "straight-60" / "tiny_resume.pth")
    model = [t for t in source.tensors if t.name.startswith("model.")]
    assert sorted(written) == sorted(t.name.removeprefix("model.") for t in model)
    with Blobs() as blobs:
        for t in model:
            raw = np.concatenate(list(value_blocks(blobs, source, t))).tobytes()
            assert written[t.name.removeprefix("model.")].tobytes() == raw, t.name
    # bf16, cast by numpy as torch rounds (nearest even): fp32 bits with the low half rounded off
    cast = ckinspect("convert", str(out), str(work / "w16.safetensors"), "--dtype", "fp16", cwd=work)
    assert cast.returncode == EXIT_OK, cast.stderr
    halves = _tensors(work / "w16.safetensors")
    assert all(
        halves[k].dtype == np.float16 and np.array_equal(halves[k], written[k].astype(np.float16)) for k in written
    )


def test_salvage_to_safetensors(work):
    source = work / "straight-60" / "tiny_resume.pth"
    broken = work / "broken.pth"
    broken.write_bytes(source.read_bytes()[: source.stat().st_size * 2 // 3])
    proc = ckinspect("salvage", str(broken), str(work / "saved.safetensors"), "--format", "json", cwd=work)
    assert proc.returncode == EXIT_FINDINGS, proc.stderr  # some tensors were cut off
    report = json.loads(proc.stdout)
    saved = _tensors(work / "saved.safetensors")
    assert sorted(saved) == sorted(report["recovered"]) and report["missing"]


def test_commands_that_need_torch_say_so_in_one_line(work):
    out = work / "w.pth"
    for argv in (
        ("convert", "straight-60/tiny_resume.pth", str(out)),
        ("salvage", "straight-60/tiny.pth", str(out)),
    ):
        proc = ckinspect(*argv, cwd=work)
        assert proc.returncode == EXIT_ERROR and proc.stdout == ""
        assert proc.stderr == f"ckinspect: writing a torch file needs torch, which is not installed: {TORCH_INSTALL}\n"
        assert not out.exists()
    trainer = python("from trainer.__main__ import main\nsys.exit(main(sys.argv[1:]))", "train", "--out", "x",
                     "--steps", "2", cwd=work)  # fmt: skip
    assert trainer.returncode == EXIT_ERROR and trainer.stdout == ""
    assert trainer.stderr == f"trainer: error: the trainer needs torch, which is not installed: {TORCH_INSTALL}\n"
    assert not (work / "x").exists()


def test_drift_measures_weights_and_says_why_not_logits(work):
    proc = ckinspect("drift", "straight-60/tiny_resume.pth", "--report", "--format", "json", cwd=work)
    assert proc.returncode == EXIT_OK, proc.stderr
    drift = json.loads(proc.stdout)["drift"]
    assert drift["logits"] is None
    assert drift["logits_skipped"] == f"logit drift needs torch, which is not installed: {TORCH_INSTALL}"
    assert len(drift["weights"]) > 0 and all(w.get("error") is None for w in drift["weights"])


def test_the_tui_opens_a_checkpoint_headless(work):
    code = (
        """
import asyncio
from pathlib import Path
from ckinspect.tui.app import create_app
from ckinspect.tui.widgets.tensor_table import TensorTable

async def main():
    app = create_app("main", [Path(sys.argv[1])], cursor_blink=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        table = app.screen.query_one(TensorTable)
        names = sorted(table.rows[i].cells[0] for i in table.view)
        await pilot.press("question_mark")
        await pilot.pause()
        print(names, type(app.screen).__name__)

asyncio.run(main())
"""
        + CHECK_NOT_IMPORTED
    )
    proc = python(code, str(work / "straight-60" / "tiny_resume.pth"), cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert "'model.tok_embeddings.weight'" in proc.stdout and proc.stdout.rstrip().endswith("HelpScreen")


def test_last_good_when_the_command_exists(work):
    from ckinspect.cli import _SUBCOMMANDS

    if "last-good" not in _SUBCOMMANDS:
        pytest.skip("no last-good command in this tree yet")
    proc = ckinspect("last-good", "straight-60", cwd=work)
    assert proc.returncode == EXIT_OK, proc.stderr
    assert Path(proc.stdout.strip()).name == "tiny_resume.pth"
