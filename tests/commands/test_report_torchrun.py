"""`torchrun --nproc_per_node 2 -m ckinspect --report ...`: two gloo ranks on 127.0.0.1 each scan their share
of a 4-shard set; rank 0 writes the report one process writes, byte for byte; a rank that fails or stalls
ends the job with one line and exit 2, never a hang."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO, cli_env
from tests.helpers.shards import write_set

pytestmark = [pytest.mark.torchrun, pytest.mark.slow]

# Test-only fault injection: a sitecustomize that replaces rank 1's part scan (nothing in ckinspect reads it).
FAULTS = textwrap.dedent(
    """
    import os, time
    if os.environ.get("RANK") == "1" and os.environ.get("CKINSPECT_TEST_FAULT"):
        import ckinspect.jobs.parallel as parallel

        def scan_unit(unit, progress=None):
            if os.environ["CKINSPECT_TEST_FAULT"] == "stall":
                time.sleep(600)
            raise OSError("injected: the disk went away")

        parallel.scan_unit = scan_unit
    """
)


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("torchrun")
    (root / "faults").mkdir()
    (root / "faults" / "sitecustomize.py").write_text(FAULTS)
    return {"clean": write_set(root / "clean"), "damaged": write_set(root / "damaged", damaged=True), "root": root}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(*args, env=None, timeout=240):
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2"]
    launcher += ["--master_addr", "127.0.0.1", "--master_port", str(_free_port())]
    extra = {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", **(env or {})}
    return subprocess.run(
        [*launcher, "-m", "ckinspect", "--report", *map(str, args)],
        capture_output=True,
        text=True,
        env=cli_env(extra),
        timeout=timeout,
    )


def _ours(stderr: str) -> list[str]:
    """The lines ckinspect printed (torchrun's own failure summary aside)."""
    return [line for line in stderr.splitlines() if line.startswith("ckinspect: ")]


def test_two_ranks_write_the_one_process_report(run_cli, sets, tmp_path):
    single = run_cli("--report", sets["damaged"], "--format", "json", "--jobs", "1")
    assert single.returncode == 1
    proc = _torchrun(sets["damaged"], "--format", "json")
    assert proc.stdout == single.stdout  # rank 0 alone prints, the whole report, the same bytes
    assert _ours(proc.stderr) == []
    # every rank exits with the report's status (1: findings); torchrun then exits 1 and names it
    assert proc.returncode == 1
    assert len(re.findall(r"exitcode\s*:\s*1 ", proc.stderr)) >= 1
    assert "exitcode  : 2" not in proc.stderr

    clean = run_cli("--report", sets["clean"], "--format", "json", "--jobs", "1")
    out = tmp_path / "report.json"
    proc = _torchrun(sets["clean"], "--format", "json", "--output", out)
    assert (proc.returncode, proc.stdout, _ours(proc.stderr)) == (0, "", [])
    assert out.read_text() + "\n" == clean.stdout or out.read_text() == clean.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # one writer, no temporaries left


def test_a_rank_that_fails_ends_the_job_with_one_line(sets):
    env = {"CKINSPECT_TEST_FAULT": "raise", "PYTHONPATH": os.pathsep.join((str(sets["root"] / "faults"), str(REPO)))}
    proc = _torchrun(sets["clean"], "--format", "json", env=env)
    assert _ours(proc.stderr) == ["ckinspect: rank 1 failed while scanning: injected: the disk went away"]
    assert proc.stdout == ""
    assert proc.returncode != 0
    assert re.search(r"exitcode\s*:\s*2 ", proc.stderr)
    assert not re.search(r'File ".*/ckinspect/', proc.stderr)  # torchrun prints its own traceback; none of ours


def test_a_rank_that_stalls_times_out_instead_of_hanging(sets):
    env = {
        "CKINSPECT_TEST_FAULT": "stall",
        "PYTHONPATH": os.pathsep.join((str(sets["root"] / "faults"), str(REPO))),
        "CKINSPECT_RANK_TIMEOUT": "5",
    }
    proc = _torchrun(sets["clean"], "--format", "json", env=env, timeout=180)
    ours = _ours(proc.stderr)
    assert len(ours) == 1 and ours[0].startswith("ckinspect: torchrun: rank 0 lost the other ranks: "), proc.stderr
    assert proc.stdout == ""
    assert proc.returncode != 0
    assert re.search(r"exitcode\s*:\s*2 ", proc.stderr)
