"""`last-good --verify --jobs N`: a checkpoint's rank files scanned side by side on worker processes, with the
verdicts, reasons and findings one process gives."""

from __future__ import annotations

import torch

from ckinspect.analysis.runs.judge import Reader
from ckinspect.jobs.parallel import scanner
from tests.analysis.runs.test_runs import ds_tag


def _run_with_a_nan_in_the_newest(tmp_path):
    run = tmp_path / "ds"
    for step in (10, 20, 30):
        ds_tag(run, step)
    rank1 = run / "global_step30" / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    state = torch.load(rank1, weights_only=True)
    state["optimizer_state_dict"]["single_partition_of_fp32_groups"][0][3] = float("nan")
    torch.save(state, rank1)
    return run


def test_verify_with_two_processes_gives_the_same_verdicts(run_cli, tmp_path):
    run = _run_with_a_nan_in_the_newest(tmp_path)
    one = run_cli("last-good", run, "--verify", "--format", "json", "--jobs", "1")
    two = run_cli("last-good", run, "--verify", "--format", "json", "--jobs", "2")
    assert (one.returncode, one.stdout, one.stderr) == (two.returncode, two.stdout, two.stderr)
    assert '"verdict": "damaged"' in one.stdout and "NONFINITE" in one.stdout
    text = run_cli("last-good", run, "--verify", "--jobs", "2")
    assert (text.returncode, text.stdout) == (0, f"{run / 'global_step20'}\n")


def test_prefetch_reads_the_parts_as_inspect_does(tmp_path):
    run = _run_with_a_nan_in_the_newest(tmp_path)
    parts = sorted((run / "global_step30").glob("*.pt"))
    pooled, alone = Reader(verify=True, scan_many=scanner(2)), Reader(verify=True, scan_many=scanner(1))
    pooled.prefetch(parts)
    alone.prefetch(parts)  # jobs=1: nothing read ahead, inspect() reads each when asked
    assert sorted(pooled.cache) == parts and alone.cache == {}
    for part in parts:
        assert pooled.cache[part].findings == alone.inspect(part).findings
    # rank 1's flat partition, with its NaN, is also its exp_avg and exp_avg_sq (one storage, three names)
    assert [f.code for f in pooled.cache[parts[-1]].findings] == ["RESUME_INCOMPLETE"] + ["NONFINITE"] * 3
