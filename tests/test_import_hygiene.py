"""Listing and reporting never import torch or textual (import torch alone costs ~3 s and ~200 MB).
The JSON and Markdown paths do not even load rich, dataclasses or typing: together with rich's own
imports those are most of what `ckinspect --report --quick` costs on a big file (ckinspect/record.py).

Each test starts a fresh interpreter: what a process imports can only be seen from a process that has
imported nothing else (this one has torch and textual loaded)."""

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, cli_env

PROBE = r"""
import json, runpy, sys
sys.argv = ["ckinspect"] + json.loads(sys.argv[1])
try:
    runpy.run_module("ckinspect", run_name="__main__", alter_sys=True)
    code = 0
except SystemExit as exc:
    code = exc.code
loaded = {m: m in sys.modules for m in ("torch", "textual", "rich", "dataclasses", "typing")}
sys.stderr.write("\nPROBE " + json.dumps({"code": code, **loaded}) + "\n")
"""


def probe(*args):
    argv = json.dumps([str(a) for a in args])
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, argv], capture_output=True, text=True, env=cli_env(), cwd=REPO, timeout=120
    )
    line = [text for text in proc.stderr.splitlines() if text.startswith("PROBE ")]
    assert line, proc.stderr
    return json.loads(line[-1][len("PROBE ") :])


@pytest.mark.parametrize(
    "options",
    [["--quick"], ["--quick", "--format", "json"], ["--quick", "--format", "markdown"], [], ["--format", "json"]],
    ids=["text-quick", "json-quick", "markdown-quick", "text-scan", "json-scan"],
)
def test_report_never_imports_torch_or_textual(ckpts, options):
    result = probe("--report", *options, ckpts["root"])
    assert result["code"] in (0, 1)
    assert not result["torch"] and not result["textual"]
    if options in (["--quick", "--format", "json"], ["--quick", "--format", "markdown"]):
        assert not result["rich"] and not result["dataclasses"] and not result["typing"]


def test_core_modules_import_alone_without_torch_textual_or_rich():
    modules = [
        "ckinspect.cli",
        "ckinspect.formats",
        "ckinspect.analysis.anatomy",
        "ckinspect.analysis.checks",
        "ckinspect.analysis.layouts",
        "ckinspect.report.json_report",
        "ckinspect.report.markdown",
        "ckinspect.report.schema",
    ]
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        "print(json.dumps({m: m in sys.modules for m in ('torch', 'textual', 'rich', 'numpy')}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), cwd=REPO, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout)
    assert loaded == {"torch": False, "textual": False, "rich": False, "numpy": False}


def test_scan_diff_and_weight_drift_import_no_torch_or_textual():
    """scan, diff and the weight half of drift run in a process that never imports torch (or textual)."""
    code = r"""
import sys, tempfile, pathlib
import numpy as np
from tests.helpers.raw_zip import simple_checkpoint
from ckinspect.analysis.scan import scan_values
from ckinspect.analysis.diff import diff_checkpoints
from ckinspect.analysis.drift import weight_drift
from ckinspect.report import diff_report, drift_report
import ckinspect.commands.diff, ckinspect.commands.drift
d = pathlib.Path(tempfile.mkdtemp())
a = simple_checkpoint(d / "a.pt", {"w": np.ones(10, np.float32)})
b = simple_checkpoint(d / "b.pt", {"w": np.zeros(10, np.float32)})
scan_values(a); weight_drift(a)
diff_report.render_text(diff_checkpoints(a, b).to_json())
print(sorted(m for m in ("torch", "textual") if m in sys.modules))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), timeout=120, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_repair_side_imports_no_torch():
    """Planning a repair, reading leftovers and the commands' modules never pull in torch."""
    code = (
        "import sys\n"
        "import ckinspect.analysis.leftovers, ckinspect.ops.repair, ckinspect.ops.salvage, ckinspect.ops.convert\n"
        "import ckinspect.io.zipwalk\n"
        "import ckinspect.commands.repair, ckinspect.commands.salvage, ckinspect.commands.convert\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'textual')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_nothing_outside_the_tui_imports_textual():
    code = (
        "import sys, ckinspect, ckinspect.cli, ckinspect.model, ckinspect.tui, ckinspect.tui.core\n"
        "assert 'textual' not in sys.modules, 'textual imported'\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=cli_env(), timeout=60
    )
    assert proc.returncode == 0, proc.stderr
