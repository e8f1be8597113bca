"""Shared fixtures: the resume experiment's runs, trained once per session, in-process."""

from __future__ import annotations

import pytest

from trainer.experiment import run_experiment


@pytest.fixture(scope="session")
def experiment(tmp_path_factory):
    """`python -m trainer verify`'s result and its work folder (kept for the tests to inspect)."""
    work = tmp_path_factory.mktemp("experiment")
    return run_experiment(work), work


@pytest.fixture(scope="session")
def runs(experiment):
    """Folders by role: per batch order straight 60 / stopped at 30 / resumed to 60, and each ablation."""
    _, work = experiment
    out = {"random": work, "epoch": work / "epoch"}
    for name in ("fresh-optimizer", "rewound-data", "from-fp16"):
        out[name] = work / name
    return out
