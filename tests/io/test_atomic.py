"""Atomic writes: a failed writer leaves the old file as it was; new and replaced files get the usual modes."""

import os

import pytest

from ckinspect.io.atomic import atomic_write, atomic_write_bytes


def test_atomic_write_leaves_old_file_untouched_when_the_writer_fails(tmp_path):
    target = tmp_path / "ckpt.pth"
    atomic_write_bytes(target, b"old")
    with pytest.raises(RuntimeError), atomic_write(target) as handle:
        handle.write(b"half of the new")
        raise RuntimeError("killed mid-save")
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["ckpt.pth"]


def test_atomic_write_gives_new_files_the_usual_mode_and_keeps_a_replaced_files_mode(tmp_path):
    umask = os.umask(0o022)
    try:
        fresh = tmp_path / "fresh.json"
        atomic_write_bytes(fresh, b"{}")
        assert fresh.stat().st_mode & 0o777 == 0o644
        kept = tmp_path / "kept.pth"
        kept.write_bytes(b"old")
        kept.chmod(0o640)
        atomic_write_bytes(kept, b"new")
        assert kept.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(umask)
