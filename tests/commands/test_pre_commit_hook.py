"""The `ckinspect` pre-commit hook (.pre-commit-hooks.yaml), run by the real pre-commit through `git commit`
in a temporary repository: a hostile pickle blocks the commit, clean files (checkpoints or not) pass.

pre-commit installs the hook the way a user's machine does: it clones the hook repository at a rev and
pip-installs it into a virtualenv of its own, from the package registry (no torch: the hook must not pull
it). Its home is cached under ~/.cache/ckinspect (or $CKINSPECT_CACHE), keyed by the hook's content, so
only the first run after a change pays for the install.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.source_tree import PACKAGE_SOURCES, REPO, copy_sources, tracked_sources
from tests.report.ci_files import SYSTEM_PICKLE, clean_weights

# one worker builds the hook's environment (a module fixture run by two workers at once would build it twice)
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("pre-commit-hook")]

HOOK_SOURCES = (*PACKAGE_SOURCES, ".pre-commit-hooks.yaml")  # what `pip install .` needs, and the hook
FIXED_DATE = "2026-01-01T00:00:00+00:00"


def cache_root() -> Path:
    return Path(os.environ.get("CKINSPECT_CACHE") or Path.home() / ".cache" / "ckinspect")


def git_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PRE_COMMIT"))}
    env.update(
        GIT_CONFIG_GLOBAL=str(home / "gitconfig"),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="ckinspect tests",
        GIT_AUTHOR_EMAIL="tests@ckinspect.invalid",
        GIT_COMMITTER_NAME="ckinspect tests",
        GIT_COMMITTER_EMAIL="tests@ckinspect.invalid",
        GIT_AUTHOR_DATE=FIXED_DATE,
        GIT_COMMITTER_DATE=FIXED_DATE,
        PRE_COMMIT_HOME=str(cache_root() / "pre-commit"),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    return env


def git(cwd: Path, env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def hook_repository(env: dict[str, str]) -> tuple[Path, str]:
    """A git repository of the hook as it is in this working tree, at a path and sha fixed by its content."""
    files = tracked_sources(HOOK_SOURCES)
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode() + b"\0" + (REPO / name).read_bytes() + b"\0")
    path = cache_root() / "pre-commit-hook-repos" / digest.hexdigest()[:16]
    if not (path / ".git").is_dir():
        building = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        shutil.rmtree(building, ignore_errors=True)
        copy_sources(building, files)  # the files the digest hashed, not a second listing
        git(building, env, "init", "-q", "-b", "main")
        git(building, env, "add", "-A")
        git(building, env, "commit", "-q", "-m", "hook under test")
        try:
            building.rename(path)
        except OSError:  # another run built the same content first
            shutil.rmtree(building, ignore_errors=True)
    sha = git(path, env, "rev-parse", "HEAD").stdout.strip()
    return path, sha


class _RunsSystem:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A user's repository with the hook installed (`pre-commit install`), and the env to commit in it."""
    home = tmp_path_factory.mktemp("git-home")
    env = git_env(home)
    hook_repo, sha = hook_repository(env)
    root = tmp_path_factory.mktemp("project")
    git(root, env, "init", "-q", "-b", "main")
    (root / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {hook_repo}\n    rev: {sha}\n    hooks:\n      - id: ckinspect\n"
    )
    git(root, env, "add", ".pre-commit-config.yaml")
    git(root, env, "commit", "-q", "-m", "pre-commit config")
    install = subprocess.run(
        [sys.executable, "-m", "pre_commit", "install"], cwd=root, env=env, capture_output=True, text=True
    )
    assert install.returncode == 0, install.stderr
    # install the hook's environment now, so each test below times only its commit
    warm = subprocess.run(
        [sys.executable, "-m", "pre_commit", "install-hooks"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert warm.returncode == 0, warm.stdout + warm.stderr
    return root, env


def hook_python(env: dict[str, str]) -> Path:
    """The python of the virtualenv pre-commit built for the hook."""
    store = Path(env["PRE_COMMIT_HOME"])
    found = sorted(store.glob("repo*/py_env-*/bin/python"), key=lambda p: p.stat().st_mtime)
    assert found, f"no hook environment under {store}"
    return found[-1]


def commit(root: Path, env: dict[str, str], files: dict[str, bytes], message: str) -> subprocess.CompletedProcess:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    git(root, env, "add", *files)
    return git(root, env, "commit", "-m", message, check=False)


def head(root: Path, env: dict[str, str]) -> str:
    return git(root, env, "rev-parse", "HEAD").stdout.strip()


def test_the_hook_manifest_is_valid():
    proc = subprocess.run(
        [sys.executable, "-m", "pre_commit", "validate-manifest", str(REPO / ".pre-commit-hooks.yaml")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_hostile_pickle_blocks_the_commit(project):
    root, env = project
    before = head(root, env)
    evil = pickle.dumps({"weights": [1.0, 2.0], "x": _RunsSystem()}, protocol=2)
    proc = commit(root, env, {"models/model.pt": evil, "notes.txt": SYSTEM_PICKLE}, "add a model")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert head(root, env) == before  # nothing was committed
    assert "ckinspect" in output and "Failed" in output
    # both: the binary pickle by its suffix, the text one (protocol 0, named .txt) by its content
    assert output.count("UNSAFE_PICKLE") == 2 and "system" in output
    assert "models/model.pt" in output and "notes.txt" in output
    assert not (root / "pwned").exists()
    git(root, env, "reset", "-q")  # unstage for the next test
    (root / "models" / "model.pt").unlink()
    (root / "notes.txt").unlink()


def test_clean_checkpoints_and_other_files_pass(project, tmp_path):
    root, env = project
    before = head(root, env)
    weights = clean_weights(tmp_path / "w.safetensors").read_bytes()
    picture = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    proc = commit(
        root,
        env,
        {"models/w.safetensors": weights, "docs/figure.png": picture, "README.md": b"# project\n"},
        "add clean files",
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert head(root, env) != before
    assert "ckinspect" in output and "Passed" in output
    committed = git(root, env, "show", "--name-only", "--format=", "HEAD").stdout.split()
    assert sorted(committed) == ["README.md", "docs/figure.png", "models/w.safetensors"]


def test_a_damaged_checkpoint_blocks_and_the_hook_env_has_no_torch(project):
    root, env = project
    before = head(root, env)
    proc = commit(root, env, {"models/cut.pt": b"PK\x03\x04" + b"\0" * 60}, "a cut file")
    assert proc.returncode != 0 and head(root, env) == before
    assert "CORRUPT" in proc.stdout + proc.stderr
    git(root, env, "reset", "-q")
    (root / "models" / "cut.pt").unlink()
    python = hook_python(env)
    probe = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('torch') is None)"],
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == "True", probe.stderr  # the install pulled no torch (let alone a CUDA one)
