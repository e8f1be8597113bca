"""The shared pieces every command stands on: the data model, atomic writes, the CLI's error contract."""

import os

import pytest

from ckinspect.io.atomic import atomic_write, atomic_write_bytes
from ckinspect.model import Finding, TensorInfo, fails
from tests.conftest import run_cli


def test_tensor_nbytes_and_span_follow_shape_and_stride():
    t = TensorInfo("w", "bfloat16", (4, 3), (3, 1), "0", storage_offset=2)
    assert (t.numel, t.nbytes, t.byte_offset, t.span_bytes) == (12, 24, 4, 24)
    assert t.is_contiguous
    transposed = TensorInfo("wt", "float32", (3, 4), (1, 3), "0")
    assert not transposed.is_contiguous and transposed.span_bytes == 48


def test_finding_severity_comes_from_its_code_and_gates_fail_on():
    unsafe, tmp = Finding("UNSAFE_PICKLE", "x"), Finding("LEFTOVER_TMP", "y")
    assert (unsafe.severity, tmp.severity) == ("error", "warning")
    assert fails([tmp], "warning") and not fails([tmp], "error") and not fails([unsafe], "never")


def test_atomic_write_leaves_old_file_untouched_when_the_writer_fails(tmp_path):
    target = tmp_path / "ckpt.pth"
    atomic_write_bytes(target, b"old")
    with pytest.raises(RuntimeError), atomic_write(target) as handle:
        handle.write(b"half of the new")
        raise RuntimeError("killed mid-save")
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["ckpt.pth"]


def test_usage_error_is_one_line_and_exit_2():
    proc = run_cli("--format", "yaml", "x")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "invalid choice" in proc.stderr


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
