"""A copy of this checkout's package sources, as a fresh clone of it would have them.

The tests that pip-install ckinspect the way its users do (the GitHub Action, the pre-commit hook) build
from such a copy, never from the working tree: a non-editable `pip install <checkout>` builds in the tree
(`build/`, and it rewrites `ckinspect.egg-info`, which the working tree's own editable install reads), and
two such builds at once, say from two xdist workers, break each other."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# what `pip install .` needs (pyproject.toml names README.md as the readme), and the files that describe
# the action and the hook
PACKAGE_SOURCES = ("pyproject.toml", "README.md", "ckinspect", "trainer")


def tracked_sources(names: tuple[str, ...]) -> list[str]:
    """This working tree's files under `names` (committed or not, never ignored ones), sorted."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *names],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    return sorted(p for p in out if p and (REPO / p).is_file())


def copy_sources(dest: Path, files: list[str]) -> None:
    """Copy `files` (paths relative to the checkout, as tracked_sources gives them) into `dest`, paths kept."""
    for name in files:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, dest / name)
