"""lifetime: a command's results kept to the process's end only when the process ends with the command."""

from __future__ import annotations

import gc

import pytest

from ckinspect import lifetime
from tests.conftest import SAMPLES, run_cli, run_cli_process

pytestmark = pytest.mark.torchfree
REPORT = ("--report", SAMPLES / "resumed-60" / "tiny_resume.pth", "--quick", "--format", "json")


@pytest.fixture
def ending(monkeypatch):
    monkeypatch.setattr(lifetime, "_kept", [])
    monkeypatch.setattr(lifetime, "_ending", False)
    return lifetime


def test_a_process_that_goes_on_keeps_nothing(ending):
    """The API, the TUI and the in-process CLI: nothing is kept (each result is freed as usual)."""
    result = run_cli(*REPORT)
    assert result.returncode == 0
    ending.keep_to_the_end(object())
    assert ending._kept == []


def test_a_process_that_ends_with_the_command_keeps_its_results_in_a_cycle(ending):
    kept = {"a report": [1, 2, 3]}
    ending.ends_with_the_command()
    ending.keep_to_the_end(kept)
    ending.keep_to_the_end(None)
    assert ending._kept[0] is ending._kept and ending._kept[1:] == [kept, None]
    assert ending._kept in gc.get_referrers(kept)  # referenced while the process lasts


def test_the_console_script_reports_what_the_in_process_cli_reports():
    done = run_cli_process(*REPORT)
    assert (done.returncode, done.stdout, done.stderr) == tuple(run_cli(*REPORT))
