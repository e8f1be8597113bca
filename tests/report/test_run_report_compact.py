"""A run folder's text report puts the answer first: the run's timeline and last good checkpoint, one line
per file, then only the files with findings; `--verbose` adds every file's groups and tensors."""

from __future__ import annotations

from tests.analysis.runs.test_runs import ds_tag


def test_a_run_folders_report_is_summary_first_and_compact(run_cli, tmp_path):
    run = tmp_path / "ds"
    for step in range(10, 130, 10):
        ds_tag(run, step)
    (run / "global_step120" / "zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(b"")
    result = run_cli("--report", run, "--quick", env={"COLUMNS": "80"})
    assert result.returncode == 1, result.stderr  # the emptied rank file of the last save
    lines = result.stdout.splitlines()
    verdict = next(i for i, line in enumerate(lines) if "12 checkpoint(s); last good: global_step110" in line)
    assert verdict < 30  # the answer on the first screen (it was below every file's tensor table)
    assert len(lines) < 120  # 12 checkpoints of 3 files: the timeline, a line or two per file, findings once
    verbose = run_cli("--report", run, "--quick", "--verbose", env={"COLUMNS": "80"}).stdout.splitlines()
    assert len(verbose) > 3 * len(lines)  # every file's details are still there when asked for
