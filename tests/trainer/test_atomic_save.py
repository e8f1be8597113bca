"""A save that dies midway leaves the previous checkpoint loadable and byte-identical."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from tests.conftest import cli_env
from trainer import checkpoint


class FailAfter:
    """A file that takes `limit` bytes and then fails, as a full disk or a dying NFS mount would."""

    def __init__(self, handle, limit: int):
        self.handle, self.limit, self.written = handle, limit, 0

    def write(self, data) -> int:
        room = self.limit - self.written
        if len(data) > room:
            self.handle.write(bytes(data[:room]))
            self.written = self.limit
            raise OSError(28, "No space left on device (simulated)")
        self.written += len(data)
        return self.handle.write(data)

    def flush(self) -> None:
        self.handle.flush()


def _state(value: float) -> dict:
    return {"model": {"w": torch.full((256, 64), value)}, "step": int(value)}


def test_a_writer_that_fails_after_n_bytes_leaves_the_old_file_whole(tmp_path):
    path = tmp_path / "tiny_resume.pth"
    checkpoint.save(_state(1.0), path)
    before = path.read_bytes()
    with pytest.raises((OSError, RuntimeError)):  # torch re-raises it as RuntimeError while closing the zip
        checkpoint.save(_state(2.0), path, wrap=lambda h: FailAfter(h, 20_000))
    assert path.read_bytes() == before
    assert checkpoint.load(path)["step"] == 1
    assert sorted(os.listdir(tmp_path)) == ["tiny_resume.pth"]  # the failed temporary is cleaned up


def test_the_temporary_is_the_file_name_plus_tmp_in_the_same_folder(tmp_path):
    path = tmp_path / "tiny_resume.pth"
    seen = []

    def spy(handle):
        seen.append(sorted(os.listdir(tmp_path)))
        return handle

    checkpoint.save(_state(1.0), path, wrap=spy)
    assert seen == [["tiny_resume.pth.tmp"]]
    assert sorted(os.listdir(tmp_path)) == ["tiny_resume.pth"]


CHILD = textwrap.dedent(
    """
    import os, sys, time, torch
    from trainer import checkpoint

    path, marker, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])

    class StallAfter:
        def __init__(self, handle):
            self.handle, self.written = handle, 0
        def write(self, data):
            if self.written + len(data) > limit:
                self.handle.write(bytes(data[: limit - self.written]))
                self.handle.flush()
                os.fsync(self.handle.fileno())
                open(marker, "w").close()
                time.sleep(120)  # the parent SIGKILLs us here, mid-save
            self.written += len(data)
            return self.handle.write(data)
        def flush(self):
            self.handle.flush()

    checkpoint.save({"model": {"w": torch.full((256, 64), 2.0)}, "step": 2}, path, wrap=StallAfter)
    """
)


@pytest.mark.slow  # a real training process, killed mid-save
@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_process_killed_during_the_save_leaves_the_old_file_and_a_partial_tmp(tmp_path):
    path, marker = tmp_path / "tiny_resume.pth", tmp_path / "stalled"
    checkpoint.save(_state(1.0), path)
    before = path.read_bytes()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(marker), "30000"], env=cli_env())
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert child.poll() is None, "the child exited before reaching the stall"
            assert time.monotonic() < deadline, "the child never reached the stall"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    assert path.read_bytes() == before
    assert checkpoint.load(path)["step"] == 1
    leftover = tmp_path / "tiny_resume.pth.tmp"
    assert leftover.stat().st_size == 30000  # exactly what was written before the kill
    with pytest.raises(OSError):  # torch seeks to a central directory the cut file does not have
        torch.load(leftover, weights_only=True)
