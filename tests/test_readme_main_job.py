"""README's main job is the smallest install that opens the TUI on the sample: the base install (no extra,
so no torch and no test tooling), and a sample file that is there. The test command is a separate block."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO

tomllib = pytest.importorskip("tomllib")  # Python 3.11+


def blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)\n```", (REPO / "README.md").read_text(), re.DOTALL)


def test_the_main_job_is_the_base_install_opening_the_sample():
    text = (REPO / "README.md").read_text()
    main_job = text.split("Main job", 1)[1].split("```sh\n", 1)[1].split("\n```", 1)[0]
    assert "pip install -q -e . &&" in main_job and "[" not in main_job  # no extra: not the ~320 packages of [test]
    sample = main_job.rsplit("ckinspect ", 1)[1].strip()
    assert (REPO / sample).is_file()
    base = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not any(name.startswith(("torch", "pytest")) for name in base)  # what the base install brings
    tests = [b for b in blocks() if "pytest" in b]
    assert tests and all(".[test" in b for b in tests)  # the test command installs the test extra, apart
