"""Shared fixtures: the runs several tests compare, trained once per session, in-process."""

from __future__ import annotations

import pytest

from trainer.train import train

STEPS, STOP = 60, 30


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    """For each batch order: straight 60, stopped at 30, resumed to 60 (plus the ablations for random)."""
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for order in ("random", "epoch"):
        base = root / order
        train(base / "straight", STEPS, order=order, log=None)
        train(base / "stopped", STEPS, stop_after=STOP, order=order, log=None)
        train(base / "resumed", STEPS, resume=base / "stopped" / "tiny_resume.pth", log=None)
        out[order] = base
    stopped = root / "random" / "stopped"
    for name, kw in (
        ("fresh-optimizer", {"fresh_optimizer": True}),
        ("rewound-data", {"rewind_data": True}),
        ("from-fp16", {"weights_from": stopped / "tiny.pth"}),
    ):
        train(root / name, STEPS, resume=stopped / "tiny_resume.pth", log=None, **kw)
        out[name] = root / name
    return out
