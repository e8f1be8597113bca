"""A share of the kill-injection proof (bench/kill_injection.py runs 50 and more by hand): the trainer killed
with SIGKILL at random moments of its saves, then `ckinspect last-good` must name exactly the newest
checkpoint torch loads whole, or exit 1 when there is none. KILL_INJECTIONS sets how many per mode."""

from __future__ import annotations

import os

import pytest

from bench.kill_injection import run

pytestmark = [pytest.mark.kill, pytest.mark.torchrun, pytest.mark.slow]

TRIALS = int(os.environ.get("KILL_INJECTIONS", "3"))


@pytest.mark.parametrize("mode", ["dcp", "file"])
def test_last_good_after_random_kills(mode):
    said: list[str] = []
    counts = run(mode, TRIALS, seed=13, log=said.append)
    assert counts["trials"] == TRIALS
    assert counts["wrong"] == 0, "\n".join(said)
