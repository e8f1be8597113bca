"""Fixtures for the scan/diff/drift tests: the readers when they exist, the trainer's samples when present."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"


def open_or_skip(path):
    """open_checkpoint + analyze (the real readers); skip where this checkout has no readers yet."""
    try:
        from ckinspect.formats import open_checkpoint
    except ImportError:
        pytest.skip("checkpoint readers not on this branch yet")
    ckpt = open_checkpoint(Path(path))
    if any("reader unavailable" in f.message for f in ckpt.findings):
        pytest.skip(f"no {ckpt.format} reader on this branch yet")
    try:
        from ckinspect.anatomy import analyze
    except ImportError:
        return ckpt
    return analyze(ckpt) or ckpt


@pytest.fixture
def open_ckpt():
    return open_or_skip


@pytest.fixture
def samples():
    if not (SAMPLES / "straight-60").is_dir():
        pytest.skip("samples/ not generated (python -m trainer samples)")
    return SAMPLES
