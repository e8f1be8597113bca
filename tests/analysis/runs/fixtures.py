"""Runs made by the real frameworks on CPU, cached outside the repo (slow to make, and not ours to commit).

    run = framework_run("hf-trainer", tmp_path)    # a fresh copy to damage

Each maker in `makers/` runs the framework itself (under torchrun where it saves per rank); the cache key
holds the versions that made it, so an upgrade makes it again. Megatron does not install on CPU: its
fixture follows its checkpointing code's names and records (makers/megatron_layout.py says so).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import cli_env

MAKERS = Path(__file__).parent / "makers"
CACHE = Path(os.environ.get("CKINSPECT_FIXTURE_CACHE", Path.home() / ".cache" / "ckinspect" / "fixtures"))
REPO = Path(__file__).resolve().parents[3]

# name -> (packages whose versions key the cache, ranks (0: plain python), how to make it)
RUNS: dict[str, tuple[tuple[str, ...], int, list[str]]] = {
    "deepspeed": (("deepspeed", "torch"), 2, [str(MAKERS / "deepspeed_run.py")]),
    "hf-trainer": (("transformers", "accelerate", "torch"), 2, [str(MAKERS / "hf_trainer_run.py")]),
    "accelerate": (("accelerate", "torch"), 2, [str(MAKERS / "accelerate_run.py")]),
    "lightning": (("lightning", "torch"), 0, [str(MAKERS / "lightning_run.py")]),
    # accumulation, validation saves, epoch-end saves; manual optimization with two optimizers
    "lightning-loops": (("lightning", "torch"), 0, [str(MAKERS / "lightning_loops_run.py")]),
    "megatron": (("torch",), 0, [str(MAKERS / "megatron_layout.py")]),
    # the bundled trainer's sharded save: 2 gloo ranks, a DCP folder every 2 steps
    "dcp": (
        ("torch",),
        2,
        ["-m", "trainer", "train", "--steps", "6", "--save-every", "2", "--save-format", "dcp", "--out"],
    ),  # fmt: skip
}


def versions(packages: tuple[str, ...]) -> str:
    out = []
    for package in packages:
        try:
            out.append(f"{package}{importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            pytest.skip(f"{package} is not installed (pip install -c constraints-cpu.txt -e '.[frameworks]')")
    return "-".join(out)


def maker_digest(name: str) -> str:
    """A short hash of the code that makes the run (the maker, or the trainer for `dcp`): edit it, remake it."""
    sources = sorted((REPO / "trainer").glob("*.py")) if name == "dcp" else [Path(RUNS[name][2][0])]
    digest = hashlib.sha256()
    for source in sources:
        digest.update(source.read_bytes())
    return digest.hexdigest()[:10]


def cached_run(name: str) -> Path:
    """The cached run, made once per set of versions."""
    packages = RUNS[name][0]
    key = f"{name}-{versions(packages)}-{maker_digest(name)}"
    done = CACHE / key
    if done.is_dir():
        return done
    CACHE.mkdir(parents=True, exist_ok=True)
    # one maker per fixture, even with several pytest-xdist workers: the others wait, then find it made
    with open(CACHE / f".{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_dir():
            _make(name, key, done)
    return done


def _make(name: str, key: str, done: Path) -> None:
    _packages, ranks, command = RUNS[name]
    building = CACHE / f".{key}.{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    if ranks:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks)]
    else:
        launcher = [sys.executable]
    args = [*launcher, *command, str(building / "run")]
    env = cli_env({"OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "TOKENIZERS_PARALLELISM": "false"})
    proc = subprocess.run(args, capture_output=True, text=True, cwd=REPO, timeout=900, env=env)
    if proc.returncode != 0:
        shutil.rmtree(building, ignore_errors=True)
        raise AssertionError(f"making the {name} fixture failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    try:
        os.replace(building, done)
    except OSError:  # another process made it first
        shutil.rmtree(building, ignore_errors=True)


def framework_run(name: str, tmp_path: Path) -> Path:
    """A fresh copy of the framework's run, to damage."""
    target = tmp_path / name
    shutil.copytree(cached_run(name) / "run", target, symlinks=True)
    return target
