"""Planning a repair, reading leftovers and the commands' modules never pull in torch."""

import subprocess
import sys

from tests.conftest import cli_env


def test_repair_side_imports_no_torch():
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
