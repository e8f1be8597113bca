"""README's launch script, run as it stands on a run that diverged (issue 27): the bundled trainer under
torchrun saves a DCP folder every 2 steps and a NaN enters its weights after step 5, so its newest save
(step 6) is structurally whole but diverged. The script must hand torchrun step 4's folder, never step 6's;
with nothing to resume from it starts fresh; when ckinspect cannot judge it stops."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, cli_env

pytestmark = [pytest.mark.torchrun, pytest.mark.slow]


def _launch_script() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n### Runs: which checkpoint to resume from\n", 1)[1].split("\n### ", 1)[0]
    (script,) = [b for b in re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL) if "last-good runs/" in b]
    return script


def _tool(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/usr/bin/env bash\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture(scope="module")
def diverged(tmp_path_factory) -> Path:
    """A real diverged run: runs/tiny_step00000{2,4,6}, a NaN in the first weight from step 5 on."""
    work = tmp_path_factory.mktemp("launch")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    args = ["--out", "runs", "--steps", "6", "--save-every", "2", "--save-format", "dcp", "--nan-at", "5"]
    proc = subprocess.run([*launcher, "-m", "trainer", "train", *args], capture_output=True, text=True, cwd=work,
                          env=cli_env({"OMP_NUM_THREADS": "1"}), timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    saves = sorted(p.name for p in (work / "runs").iterdir())
    assert saves == ["tiny_step000002", "tiny_step000004", "tiny_step000006"]
    return work


def _launch(work: Path) -> subprocess.CompletedProcess[str]:
    """The script with `ckinspect` this checkout and `torchrun` a stand-in that writes down its arguments."""
    tools = work / "bin"
    tools.mkdir(exist_ok=True)
    _tool(tools, "ckinspect", f'exec "{sys.executable}" -m ckinspect "$@"')
    _tool(tools, "torchrun", 'printf "%s\\n" "$@" > launched.txt')
    (work / "launch.sh").write_text(_launch_script())
    env = cli_env({"PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"})
    return subprocess.run(["bash", "launch.sh"], capture_output=True, text=True, cwd=work, env=env, timeout=300)


def test_the_launch_line_resumes_from_before_the_divergence(diverged):
    # the newest save is whole: only its values say it diverged (structure alone would name it)
    quick = subprocess.run([sys.executable, "-m", "ckinspect", "last-good", "runs/", "--quick"], capture_output=True,
                           text=True, cwd=diverged, env=cli_env(), timeout=300)  # fmt: skip
    assert quick.stdout.strip() == "runs/tiny_step000006"
    proc = _launch(diverged)
    assert proc.returncode == 0, proc.stderr
    launched = (diverged / "launched.txt").read_text().splitlines()
    assert launched[launched.index("--resume") + 1] == "runs/tiny_step000004"


def test_the_launch_line_starts_fresh_with_nothing_good_and_stops_when_it_cannot_judge(diverged, tmp_path):
    empty = tmp_path / "fresh"
    (empty / "runs").mkdir(parents=True)
    (empty / "runs" / "notes.txt").write_text("no checkpoint yet")
    assert _launch(empty).returncode == 0
    assert "--resume" not in (empty / "launched.txt").read_text().splitlines()
    unreadable = tmp_path / "unjudged"
    unreadable.mkdir()  # no runs/ at all: ckinspect exits 2, and the script must not launch
    proc = _launch(unreadable)
    assert proc.returncode == 2 and not (unreadable / "launched.txt").exists()


def test_every_consumer_names_the_save_before_the_divergence(diverged, capsys):
    """last-good, --verify, the TUI's run view, --report's run view and watch: one answer for the DCP run."""
    from tests.analysis.runs.test_verdicts import answers

    run = diverged / "runs"
    assert answers(run, capsys) == dict.fromkeys(
        ("last-good", "--verify", "run view", "--report", "watch"), str(run / "tiny_step000004")
    )
