"""The CLI's contract as a whole: usage errors are one line and exit 2, a bad path never starts the TUI,
and `python -m ckinspect` is wired to the same `main` (the only tests here that need a real process)."""

from tests.conftest import run_cli, run_cli_process


def test_usage_error_is_one_line_and_exit_2():
    proc = run_cli("--format", "yaml", "x")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "invalid choice" in proc.stderr


def test_a_missing_path_is_a_one_line_error_not_a_tui():
    proc = run_cli("no/such/checkpoint.pth")
    assert proc.returncode == 2 and "no such file" in proc.stderr and "Traceback" not in proc.stderr


def test_python_dash_m_ckinspect_help_and_usage_error_in_a_real_process():
    helped = run_cli_process("--help")
    assert helped.returncode == 0 and helped.stderr == ""
    assert helped.stdout.startswith("Usage: ckinspect") and "--report" in helped.stdout
    assert "ckinspect diff A B " in helped.stdout and "ckinspect salvage BROKEN OUT " in helped.stdout
    wrong = run_cli_process("--format", "yaml", "x")
    assert wrong.returncode == 2 and wrong.stdout == ""
    assert "Traceback" not in wrong.stderr and "invalid choice" in wrong.stderr
