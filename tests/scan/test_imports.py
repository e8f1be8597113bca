"""scan, diff and the weight half of drift run in a process that never imports torch (or textual)."""

import subprocess
import sys

from tests.conftest import cli_env

CODE = r"""
import sys, tempfile, pathlib
import numpy as np
from tests.scan.helpers import simple_checkpoint
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


def test_no_torch_or_textual_import():
    proc = subprocess.run(
        [sys.executable, "-c", CODE],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
        cwd=str(__import__("tests.conftest").conftest.REPO),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
