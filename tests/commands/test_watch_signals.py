"""`ckinspect watch` stops on SIGINT and SIGTERM whatever its parent did with them: started as a background
job (both ignored, as nohup, `cmd &` in a script and many CI runners leave SIGINT), it still exits 0 at once,
its worker processes (--jobs 2) with it. The waits are generous limits for a real live process, not timings."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.analysis.runs.saves import save
from tests.conftest import REPO, cli_env
from tests.helpers.processes import alive_in_group, as_a_background_job, ended

pytestmark = pytest.mark.slow

STARTED_WITHIN = 120.0  # seconds: the first event of a live process on a loaded machine (a limit, not a timing)


def first_line(proc: subprocess.Popen) -> dict:
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until watch has judged the first save (after its handlers are set)
    assert line, proc.stderr.read() if proc.stderr else ""
    return json.loads(line)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_watch_stops_on_a_signal_though_its_parent_ignored_it(tmp_path, signum, jobs):
    save(tmp_path / "ckpt-0010.pt", 10)
    command = [sys.executable, "-m", "ckinspect", "watch", str(tmp_path), "--report", "--format", "json",
               "--poll", "--interval", "0.2", "--jobs", jobs]  # fmt: skip
    with ended(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=cli_env(),
               preexec_fn=as_a_background_job) as proc:  # fmt: skip
        assert first_line(proc)["step"] == 10
        proc.send_signal(signum)
        try:
            status = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"watch ignored {signum.name}: it inherited an ignored handler and kept running")
        assert status == 0, proc.stderr.read() if proc.stderr else ""
        deadline = time.monotonic() + 30
        while alive_in_group(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)  # its worker processes end as the follower closes
        assert alive_in_group(proc.pid) == []
