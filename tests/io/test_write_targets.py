"""`-o PATH` respects what PATH is (issue 27): a regular file is replaced atomically; a FIFO, a character
device or a symlink is never renamed over (written to, or followed); every ordinary write failure is
one line, exit 2, naming the user's path and never a temporary file's.

The real /dev/null is never a target here: a character device made under tmp (os.mknod, as root) stands
in for it, and /dev/null itself is only compared before and after."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ckinspect.cli import main

REPO = Path(__file__).resolve().parents[2]
RESUME = REPO / "samples" / "resumed-60" / "tiny_resume.pth"


def report_to(target: Path | str, capsys) -> tuple[int, str]:
    status = main(["--report", str(RESUME), "--quick", "-o", str(target)])
    return status, capsys.readouterr().err


def test_a_regular_file_is_replaced_atomically(tmp_path, capsys):
    target = tmp_path / "report.txt"
    target.write_text("old")
    inode = target.stat().st_ino
    assert report_to(target, capsys) == (0, "")
    assert "tiny_resume.pth" in target.read_text() and target.stat().st_ino != inode  # a new file, renamed in
    assert sorted(os.listdir(tmp_path)) == ["report.txt"]


def test_a_fifo_is_written_to_not_replaced(tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    read_end = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # opened first: the writer's open never blocks
    try:
        status = report_to(fifo, capsys)
        chunks = []
        while chunk := _read_some(read_end):
            chunks.append(chunk)
    finally:
        os.close(read_end)
    assert status == (0, "")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert b"tiny_resume.pth" in b"".join(chunks)
    assert sorted(os.listdir(tmp_path)) == ["pipe"]


def _read_some(fd: int) -> bytes:
    try:
        return os.read(fd, 1 << 16)
    except BlockingIOError:
        return b""


@pytest.mark.skipif(os.geteuid() != 0, reason="os.mknod of a character device needs root")
def test_a_character_device_is_written_to_not_replaced(tmp_path, capsys):
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # the same device as /dev/null, under tmp
    before = os.stat("/dev/null")
    assert report_to(null, capsys) == (0, "")
    after = null.lstat()
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == os.makedev(1, 3)
    assert sorted(os.listdir(tmp_path)) == ["null"]
    now = os.stat("/dev/null")  # only compared: the real one is never a target of this test
    assert (stat.S_ISCHR(now.st_mode), now.st_ino, now.st_rdev) == (True, before.st_ino, before.st_rdev)


def test_a_symlink_is_followed_never_renamed_over(tmp_path, capsys):
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    assert report_to(link, capsys) == (0, "")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert "tiny_resume.pth" in real.read_text()
    assert sorted(os.listdir(tmp_path)) == ["link.txt", "real.txt"]


def test_a_symlink_to_nothing_is_refused(tmp_path, capsys):
    link = tmp_path / "link.txt"
    link.symlink_to(tmp_path / "gone.txt")
    status, err = report_to(link, capsys)
    assert status == 2
    assert err.count("\n") == 1 and str(link) in err and "does not exist" in err
    assert sorted(os.listdir(tmp_path)) == ["link.txt"]


@pytest.mark.parametrize("where", ["missing folder", "under a file", "a folder"])
def test_write_failures_are_one_line_naming_the_users_path(tmp_path, capsys, where):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    out = {"missing folder": tmp_path / "nope" / "o.safetensors", "under a file": tmp_path / "afile" / "o.safetensors",
           "a folder": tmp_path / "adir"}[where]  # fmt: skip
    status = main(["convert", str(RESUME), str(out)])
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and err.startswith("ckinspect: ") and str(out) in err
    assert "internal error" not in err and ".tmp" not in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["adir", "afile"]
    status, err = report_to(tmp_path / "adir", capsys)
    assert (status, err) == (2, f"ckinspect: cannot write {tmp_path / 'adir'}: it is a folder\n")


def test_salvage_of_a_folder_or_a_missing_file_is_one_line(tmp_path, capsys):
    (tmp_path / "adir.pth").mkdir()
    assert main(["salvage", str(tmp_path / "adir.pth"), str(tmp_path / "out.pth")]) == 2
    assert capsys.readouterr().err == f"ckinspect: {tmp_path / 'adir.pth'}: not a file\n"
    assert main(["salvage", str(tmp_path / "gone.pth"), str(tmp_path / "out.pth")]) == 2
    assert capsys.readouterr().err == f"ckinspect: {tmp_path / 'gone.pth'}: no such file\n"
