"""Fixtures for the scan/diff/drift tests: the real readers, and the trainer's samples committed in samples/."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckinspect.analysis.anatomy import analyze
from ckinspect.formats import open_checkpoint

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"


def open_analyzed(path):
    """open_checkpoint + analyze, as `diff` and `drift` see a file before comparing it."""
    return analyze(open_checkpoint(Path(path)))


@pytest.fixture
def open_ckpt():
    return open_analyzed


@pytest.fixture
def samples():
    assert (SAMPLES / "straight-60").is_dir(), "samples/ is missing: regenerate it with python -m trainer samples"
    return SAMPLES
