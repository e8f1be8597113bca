"""The CLI lets numpy take ordinary pages for its big arrays (cli.NUMPY_PAGES says why), unless the user chose."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ckinspect.cli import NUMPY_PAGES, main
from tests.conftest import REPO

pytestmark = pytest.mark.torchfree
VAR = NUMPY_PAGES[0]


@pytest.mark.parametrize("theirs", [None, "1", "0"])
def test_the_cli_sets_numpy_pages_unless_the_user_did(monkeypatch, theirs):
    if theirs is None:
        monkeypatch.delenv(VAR, raising=False)
    else:
        monkeypatch.setenv(VAR, theirs)
    with pytest.raises(SystemExit):
        main(["--version"])
    assert os.environ[VAR] == (theirs or "0")


def test_numpy_imported_by_a_command_reads_it():
    """Nothing the CLI imports before main() runs imports numpy (which reads the variable once, at import)."""
    code = "import sys, ckinspect.cli; print('numpy' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.strip() == "False", done.stderr
