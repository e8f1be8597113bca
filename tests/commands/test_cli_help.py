"""`--help` a new user can act on: the commands, examples, what A and B are; every line fits 80 columns.
A folder report starts with its summary; --verbose has every detail."""

from __future__ import annotations

from tests.conftest import run_cli


def test_help_lists_the_commands_and_examples_within_80_columns():
    out = run_cli("--help", env={"COLUMNS": "80"}).stdout
    for command in ("diff A B", "repair PATH", "drift PATH", "salvage BROKEN OUT", "convert IN OUT"):
        assert f"ckinspect {command}" in out
    assert "examples:" in out and "Report Options:" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "\x1b[" not in out  # piped: no colour


def test_help_is_coloured_on_a_terminal():
    out = run_cli("diff", "--help", env={"COLUMNS": "80", "FORCE_COLOR": "1"}).stdout
    assert "\x1b[36m--only\x1b[0m" in out


def test_diff_help_says_what_a_and_b_are():
    out = run_cli("diff", "--help", env={"COLUMNS": "80"}).stdout
    assert "A                     the first checkpoint" in out
    assert "B                     the second checkpoint" in out
    assert "examples:" in out and max(len(line) for line in out.splitlines()) <= 80


def test_a_folder_report_is_summary_first(samples):
    short = run_cli("--report", samples, env={"COLUMNS": "80"}).stdout.splitlines()
    assert short[0].startswith("summary of 14 checkpoints")
    assert len(short) < 40 and not any(line.startswith("largest") or "tensors " in line[:9] for line in short)
    assert any("LEFTOVER_TMP" in line for line in short)  # what needs a look is still there
    full = run_cli("--report", samples, "--verbose", env={"COLUMNS": "80"}).stdout.splitlines()
    assert len(full) > 300 and any(line.startswith("model.tok_embeddings.weight") for line in full)


def test_every_command_has_examples_and_says_what_each_argument_is():
    from ckinspect.cli import _SUBCOMMANDS, build_parser

    for command in _SUBCOMMANDS:
        out = run_cli(command, "--help", env={"COLUMNS": "80"}).stdout
        assert "examples:" in out and f"ckinspect {command} " in out.split("examples:", 1)[1], command
        assert max(len(line) for line in out.splitlines()) <= 80, command
        positionals = [a for a in build_parser(command)._actions if not a.option_strings]
        assert positionals and all(a.help for a in positionals), command
