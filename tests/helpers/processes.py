"""Child processes a test starts end with the test, whatever its outcome: each runs in its own process
group (its own children too), and `ended` kills the group and waits for it, in a `finally`."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def ended(*args: Any, **kwargs: Any) -> Iterator[subprocess.Popen]:
    """`subprocess.Popen(*args, **kwargs)` in a new session; on leaving, whatever happened, the whole
    group is killed (SIGKILL) and reaped, so no process outlives the test (none is left parented to init)."""
    proc = subprocess.Popen(*args, start_new_session=True, **kwargs)
    try:
        yield proc
    finally:
        kill_group(proc)


def kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=60)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def as_a_background_job() -> None:
    """preexec_fn: SIGINT and SIGTERM ignored, as a shell's background job, nohup or a CI runner leave them
    (ignored dispositions survive exec)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def alive_in_group(pgid: int) -> list[int]:
    """Pids still alive in a process group (from /proc), zombies excluded."""
    alive = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, group = fields[0], int(fields[2])
        if group == pgid and state != "Z":
            alive.append(int(entry))
    return alive
