"""Accelerate's helpers in real Accelerate runs (CPU): save_state folders judged after each save, NaN
weights refused, and a save torn by a crash passed over by last_good, the run resumed from the one
before ending bit for bit where the straight run ends."""

from __future__ import annotations

import pytest

import ckinspect

pytest.importorskip("accelerate")

import torch  # noqa: E402

from ckinspect.integrations.accelerate import StateVerifier, verify_state  # noqa: E402
from tests.helpers.torch_files import cut  # noqa: E402
from tests.integrations.runs import accelerate_run  # noqa: E402

pytestmark = pytest.mark.frameworks


def _verdicts():
    seen = []

    def after_save(accelerator, location):
        seen.append(verify_state(accelerator, location, fail_on="error"))

    return seen, after_save


def test_each_save_is_judged_and_a_good_run_left_as_it_was(tmp_path):
    plain = accelerate_run(tmp_path / "plain", lambda accelerator, location: None)
    seen, after_save = _verdicts()
    judged = accelerate_run(tmp_path / "judged", after_save)
    assert all(torch.equal(judged[k], plain[k]) for k in plain)
    assert [(c.path.name, c.framework, c.verdict) for c in seen] == [
        (f"step_{s}", "accelerate", "good") for s in (2, 4, 6)
    ]
    for step in (2, 4, 6):
        a, b = tmp_path / "plain" / f"step_{step}", tmp_path / "judged" / f"step_{step}"
        assert sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir())


def test_nan_weights_are_refused_at_the_save(tmp_path):
    seen, after_save = _verdicts()
    with pytest.raises(ckinspect.CheckpointRejected) as raised:
        accelerate_run(tmp_path, after_save, nan_after=3)
    assert raised.value.candidate.path == tmp_path / "step_4"
    assert raised.value.findings[0].code == "NONFINITE"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_2", "step_4"]


def test_in_the_background_the_verdict_comes_at_check(tmp_path):
    checkers = []

    def after_save(accelerator, location):
        if not checkers:
            checkers.append(StateVerifier(accelerator, fail_on="error"))
        checkers[0].check()
        checkers[0].after_save(location)

    with pytest.raises(ckinspect.CheckpointRejected, match="step_4: damaged: NONFINITE"):
        accelerate_run(tmp_path, after_save, nan_after=3)  # raised by the next save's check (step 6)
        checkers[0].wait()


def test_a_save_torn_by_a_crash_is_passed_over_and_the_run_resumes_bit_for_bit(tmp_path):
    straight = accelerate_run(tmp_path / "straight", lambda accelerator, location: None)
    run = tmp_path / "run"
    accelerate_run(run, lambda accelerator, location: None)
    # save_state writes into its folder in place: killed while writing the optimizer, the save has the
    # weights, half the optimizer and none of what comes after it
    torn = run / "step_6"
    cut(torn / "optimizer.bin", 0.5)
    for later in ("scheduler.bin", "random_states_0.pkl"):
        (torn / later).unlink()
    verdict = ckinspect.judge_checkpoint(torn)
    assert verdict.verdict == "damaged"
    assert sorted(reason.split(":")[0] for reason in verdict.reasons) == ["CORRUPT", "RESUME_INCOMPLETE"]
    resume = ckinspect.last_good(run)
    assert resume == run / "step_4"
    seen, after_save = _verdicts()
    resumed = accelerate_run(run, after_save, start_from=resume)
    assert [(c.path.name, c.verdict) for c in seen] == [("step_6", "good")]
    assert all(torch.equal(resumed[k], straight[k]) for k in straight)  # as if it had never stopped
