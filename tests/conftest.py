"""Shared test helpers. Area-specific fixtures live in each area's own test folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a child process that must import this checkout's code, not an installed copy."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("COLUMNS", "120")
    env.pop("CKINSPECT_DEBUG", None)
    env.update(extra or {})
    return env


def run_cli(
    *args: str | os.PathLike[str], cwd: Path | None = None, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python -m ckinspect ARGS` in a fresh process, as a user or CI would (`env`: extra variables)."""
    return subprocess.run(
        [sys.executable, "-m", "ckinspect", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        env=cli_env(env),
        timeout=timeout,
    )


@pytest.fixture
def cli():
    return run_cli
