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


def test_without_a_terminal_the_tui_commands_print_their_report_instead_of_hanging(samples):
    """`ckinspect PATH > out.txt`, `ckinspect diff A B | less` or a CI step without --report: the TUI has no
    terminal to draw on or read keys from (it used to write escape codes into the pipe and wait for a `q`
    that never comes). The report is printed, with one line on stderr saying why."""
    a, b = samples / "stopped-30" / "tiny_resume.pth", samples / "straight-60" / "tiny_resume.pth"
    shown = run_cli_process(a, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "\x1b[" not in shown.stdout and "optimizer share" in shown.stdout
    assert shown.stderr.count("\n") == 1 and "not a terminal" in shown.stderr and "--report" in shown.stderr
    compared = run_cli_process("diff", a, b, timeout=60)
    assert compared.returncode == 1, compared.stderr  # different, as `diff --report` says
    assert "\x1b[" not in compared.stdout and "model.tok_embeddings.weight" in compared.stdout
    assert "not a terminal" in compared.stderr


def test_in_process_without_a_terminal_the_report_is_the_same_as_with_report(samples):
    path = samples / "stopped-30" / "tiny_resume.pth"
    plain, report = run_cli(path, "--format", "json"), run_cli(path, "--report", "--format", "json")
    assert (plain.returncode, plain.stdout) == (report.returncode, report.stdout)
    assert report.stderr == "" and "not a terminal" in plain.stderr
