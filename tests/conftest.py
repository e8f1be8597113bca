"""Shared test helpers and fixtures. Folder-specific fixtures live in that folder's conftest.

`run_cli` runs `ckinspect ARGS` in this process through `ckinspect.cli.main`, exactly as
`python -m ckinspect` would (same argv handling, same environment rules, same exit status), only
without paying a fresh interpreter for each call. `run_cli_process` starts a real child process:
use it only where the process itself is the point (what gets imported, a signal, a launcher).
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "samples"

# ---- the suite's own speed (none of this changes what a test checks)

# Bytecode cached, as on a developer's machine or in CI: with PYTHONDONTWRITEBYTECODE set (this project's
# shared machine sets it), pytest rewrote every test module's asserts again in every xdist worker (about
# 4 s of CPU each) and every child process compiled ckinspect again (about 0.2 s a launch). The cache
# goes to __pycache__ folders, which git ignores.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Under `-n N` each core already runs a worker: torch's and OpenBLAS' own thread pools only
    # oversubscribe the cores, and their spinning threads cost CPU seconds (the logit drift test: 5 s of
    # CPU with two threads, 3 s with one). Set before anything imports torch; a value the user set wins.
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a child process that must import this checkout's code, not an installed copy."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("COLUMNS", "120")
    env.pop("CKINSPECT_DEBUG", None)
    env.update(extra or {})
    return env


class CliResult(NamedTuple):
    """What a user sees of one command: its exit status and everything it printed."""

    returncode: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def _as_a_fresh_process(env: dict[str, str], cwd: Path) -> Iterator[None]:
    """The environment and working folder a child started by `run_cli_process` would have, restored after."""
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


def run_cli(*args: str | os.PathLike[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> CliResult:
    """`ckinspect ARGS` in-process; stdout and stderr are pipes, not terminals, as under CI (`env`: extra variables)."""
    from ckinspect.cli import main

    out, err = io.StringIO(), io.StringIO()
    with (
        _as_a_fresh_process(cli_env(env), cwd or REPO),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            status = main([str(a) for a in args])
        except SystemExit as exc:  # argparse: --help, --version and usage errors
            if exc.code is None or isinstance(exc.code, int):
                status = exc.code or 0
            else:  # what the interpreter does with sys.exit("message")
                print(exc.code, file=sys.stderr)
                status = 1
    return CliResult(status, out.getvalue(), err.getvalue())


@pytest.fixture(name="run_cli")
def run_cli_fixture():
    return run_cli


def run_cli_process(
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


# ---- the trainer's samples committed in samples/, and the real readers over them


def open_analyzed(path):
    """open_checkpoint + analyze, as `diff` and `drift` see a file before comparing it."""
    from ckinspect.analysis.anatomy import analyze
    from ckinspect.formats import open_checkpoint

    return analyze(open_checkpoint(Path(path)))


@pytest.fixture(params=["native", "pure"])
def pickle_paths(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test once on the compiled pickle pass (ckinspect/_native/pickle_walk.c, where built) and once on
    the pure-Python path it falls back to (CKINSPECT_PURE=1; child processes inherit it): both must hold."""
    if request.param == "pure":
        monkeypatch.setenv("CKINSPECT_PURE", "1")
    else:
        monkeypatch.delenv("CKINSPECT_PURE", raising=False)
    return request.param


@pytest.fixture
def open_ckpt():
    return open_analyzed


@pytest.fixture
def samples():
    assert (SAMPLES / "straight-60").is_dir(), "samples/ is missing: regenerate it with python -m trainer samples"
    return SAMPLES


# ---- real checkpoint files written once per session by torch itself, each made to raise one finding


def _tiny_training_state():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 8), torch.nn.LayerNorm(8))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.arange(4)).pow(2).mean().backward()
        optimizer.step()
    return model, optimizer


def _resume(net, opt, **overrides):
    import torch

    state = {
        "format": "ckinspect-trainer/1",
        "model": net.state_dict(),
        "optimizer": opt.state_dict(),
        "step": 2,
        "epoch": 0,
        "world_size": 1,
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
        "config": {"vocab_size": 16, "dim": 8},
    }
    state.update(overrides)
    return {k: v for k, v in state.items() if v is not None}


@pytest.fixture(scope="session")
def ckpts(tmp_path_factory):
    """name -> path of small files, each made to raise (or not raise) one finding."""
    import torch
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("report_ckpts")
    model, optimizer = _tiny_training_state()
    paths = {}

    def save(name, obj, folder=root):
        path = folder / name
        torch.save(obj, path)
        paths[name] = path
        return path

    save("good_resume.pth", _resume(model, optimizer))
    save("no_rng_resume.pth", _resume(model, optimizer, rng=None))
    half = {k: v.half() for k, v in model.state_dict().items()}
    save("fp16_resume.pth", _resume(model, optimizer, model=half))
    other = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 4), torch.nn.LayerNorm(8))
    save("mismatch_resume.pth", _resume(other, optimizer))
    save("weights.pth", {k: v.half() for k, v in model.state_dict().items()})
    big = torch.zeros(1024, 1024)
    save("bloat.pth", {"rows": big[:8]})  # a view: the whole 4 MiB storage goes to disk
    nan = model.state_dict()
    nan["1.weight"] = nan["1.weight"].clone()
    nan["1.weight"][0, 0] = float("nan")
    save("nan_weights.pth", nan)

    folder = root / "run" / "checkpoint-2"
    folder.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, folder / "model.safetensors")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 2, "epoch": 0.5}))
    save("optimizer.pt", optimizer.state_dict(), folder)
    paths["hf_folder"] = folder
    paths["root"] = root

    dcp_root = tmp_path_factory.mktemp("report_dcp")
    paths["dcp"] = _save_dcp(dcp_root / "step-2", model, optimizer, rng=True)
    paths["dcp_no_rng"] = _save_dcp(dcp_root / "step-2-no-rng", model, optimizer, rng=False)
    return paths


def _save_dcp(folder, model, optimizer, rng):
    """A torch.distributed.checkpoint folder as a single process saves it (fqn-keyed optimizer state)."""
    import warnings

    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd, "step": 2, "epoch": 0}
    if rng:
        state["rng"] = {"torch": torch.get_rng_state()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled ... single process"
        dcp.save(state, checkpoint_id=str(folder))
    return folder


# The marked groups: tests that start real work (frameworks, servers, torchrun, training runs, kills,
# downloads). Every other test is `core`: `pytest -n 2 -m core` is the quick suite to run while working.
GROUPS = ("slow", "torchrun", "training", "corpus", "integration", "frameworks", "kill", "live", "remote")


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (torch, textual, the test modules: about 330,000 objects) lives until
    the end: frozen, it is no longer walked by each of the collector's full passes, which otherwise took
    about 15 s of CPU per worker."""
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`-n`, README's test command, `--dist loadgroup`), tests that share something
    built once per session go to one worker: the trainer's experiment (a 60-step training run) is made once,
    not once per worker, the corpus cache is filled by one process, never by two at once, and the tiny
    Hugging Face models are written once.

    Tests that need the experiment are also marked `training`: it trains the bundled model eleven times
    (about 22 s of CPU), so they sit outside the core suite, like the other groups that start real work."""
    for item in items:
        if "experiment" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.training)
            item.add_marker(pytest.mark.xdist_group("trainer-experiment"))
        elif item.get_closest_marker("corpus"):
            item.add_marker(pytest.mark.xdist_group("corpus"))
        elif item.get_closest_marker("frameworks"):  # transformers imported and the tiny models built once
            item.add_marker(pytest.mark.xdist_group("frameworks"))
        if not any(item.get_closest_marker(group) for group in GROUPS):
            item.add_marker(pytest.mark.core)


@pytest.fixture
def samples_server() -> Iterator:
    """The HTTP range server (tests/helpers/remote_servers.py) over the bundled samples/, on 127.0.0.1."""
    from tests.helpers.remote_servers import range_server

    if not (REPO / "samples" / "stopped-30").is_dir():
        pytest.skip("samples/ missing (python -m trainer samples)")
    with range_server(REPO / "samples") as srv:
        yield srv
