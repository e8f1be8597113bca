"""The TUI `ckinspect watch RUN_DIR` (no --report) ends cleanly on SIGTERM though its parent ignored it (a
background job, nohup, a CI runner): a real process on a real pseudo-terminal, which exits 0, leaves the
alternate screen (the terminal is restored) and leaves no process behind. The waits are generous limits
for a live process on a loaded machine, not timings; every process started is ended whatever happens."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.analysis.runs.saves import save
from tests.conftest import REPO, cli_env
from tests.helpers.processes import alive_in_group, as_a_background_job, ended

pytestmark = pytest.mark.slow

LIMIT = 120.0  # seconds for the first screen of a live TUI on a loaded machine (a limit, not a timing)
LEAVE_ALTERNATE_SCREEN = b"\x1b[?1049l"


class Drained:
    """Everything the child writes to the terminal, read as it comes (a full pty would block the child)."""

    def __init__(self, master: int) -> None:
        self.master, self.data, self.lock = master, bytearray(), threading.Lock()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # the child closed its side
                return
            if not chunk:
                return
            with self.lock:
                self.data += chunk

    def has(self, needle: bytes) -> bool:
        with self.lock:
            return needle in self.data

    def wait_for(self, needle: bytes, limit: float) -> None:
        deadline = time.monotonic() + limit
        while not self.has(needle):
            assert time.monotonic() < deadline, f"{needle!r} never drawn; got {bytes(self.data[-400:])!r}"
            time.sleep(0.1)


def test_the_watch_tui_ends_cleanly_on_sigterm_though_its_parent_ignored_it(tmp_path):
    save(tmp_path / "run" / "ckpt-0010.pt", 10)
    master, slave = pty.openpty()
    env = {**cli_env(), "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "35", "HOME": str(tmp_path)}
    env.pop("TEXTUAL", None)
    command = [sys.executable, "-m", "ckinspect", "watch", str(tmp_path / "run"), "--poll", "--interval", "0.2"]
    try:
        with ended(command, stdin=slave, stdout=slave, stderr=slave, cwd=REPO, env=env,
                   preexec_fn=as_a_background_job) as proc:  # fmt: skip
            os.close(slave)
            slave = -1
            screen = Drained(master)
            screen.wait_for(b"ckpt-0010.pt", LIMIT)  # the timeline shows the save: the app is up
            proc.send_signal(signal.SIGTERM)
            try:
                status = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pytest.fail("the watch TUI ignored SIGTERM: it inherited an ignored handler and kept running")
            screen.thread.join(timeout=10)
            assert status == 0, bytes(screen.data[-600:])
            assert screen.has(LEAVE_ALTERNATE_SCREEN)  # Textual restored the terminal on the way out
            assert b"Traceback" not in screen.data
            deadline = time.monotonic() + 30
            while alive_in_group(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert alive_in_group(proc.pid) == []
    finally:
        if slave != -1:
            os.close(slave)
        os.close(master)
