"""`repair` never reads or writes outside the folder it is given, whatever the folder's files say."""

from __future__ import annotations

import errno
import json
import os
import stat

import pytest
import torch

from ckinspect.cli import main
from ckinspect.ops.repair import apply_plan, plan_repairs
from tests.helpers.torch_files import cut, save_resume, sha


class _Payload:
    """Pickles as a call of os.system: what a hostile tmp would run under torch.load(weights_only=False)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _apply(path, capsys) -> tuple[int, str, str]:
    code = main(["repair", str(path), "--apply"])
    out, err = capsys.readouterr()
    return code, out, err


def _undo(path, capsys) -> tuple[int, str, str]:
    code = main(["repair", str(path), "--undo"])
    out, err = capsys.readouterr()
    return code, out, err


def _hostile_manifest(folder, moves) -> None:
    run = folder / ".ckinspect-quarantine" / "20990101T000000_000000Z"
    run.mkdir(parents=True)
    doc = {"schema": 1, "status": "applied", "entries": [{"action": "promote", "moves": moves}]}
    (run / "manifest.json").write_text(json.dumps(doc))


@pytest.mark.parametrize(
    "escape",
    ["../victim.txt", "/tmp/ckinspect-victim-abs.txt", "sub/../../victim.txt", "..\\victim.txt"],
)
def test_undo_refuses_a_manifest_whose_paths_leave_the_folder(tmp_path, capsys, escape):
    folder = tmp_path / "run"
    folder.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"keep me")
    (folder / "a.pth").write_bytes(b"planted")
    _hostile_manifest(folder, [{"op": "rename", "from": escape, "to": "a.pth", "size": 7, "mtime_ns": None}])
    code, out, err = _undo(folder, capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "leaves its folder" in err
    assert victim.read_bytes() == b"keep me" and (folder / "a.pth").read_bytes() == b"planted"


def test_undo_refuses_a_path_through_a_symlink(tmp_path, capsys):
    folder, outside = tmp_path / "run", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    (folder / "link").symlink_to(outside)
    (folder / "a.pth").write_bytes(b"planted")
    _hostile_manifest(folder, [{"op": "rename", "from": "link/victim", "to": "a.pth", "size": 7, "mtime_ns": None}])
    code, _out, err = _undo(folder, capsys)
    assert code == 2 and "is a symlink; not followed" in err
    assert list(outside.iterdir()) == [] and (folder / "a.pth").read_bytes() == b"planted"


@pytest.mark.parametrize(
    "doc",
    [
        b"{not json",
        b"[]",
        b'{"status": "applied", "entries": {"a": 1}}',
        b'{"status": "applied", "entries": [{"moves": [{"op": "unlink", "from": "a", "to": "b"}]}]}',
        b'{"status": "applied", "entries": [{"moves": [{"op": "rename", "from": 3, "to": "b"}]}]}',
        b'{"status": "applied", "entries": [{"moves": [{"op": "rename", "from": "a", "to": "b", "size": "7"}]}]}',
        b"\xff\xfe",
    ],
)
def test_a_malformed_manifest_is_one_line_and_exit_2(tmp_path, capsys, doc):
    run = tmp_path / ".ckinspect-quarantine" / "20990101T000000_000000Z"
    run.mkdir(parents=True)
    (run / "manifest.json").write_bytes(doc)
    code, out, err = _undo(tmp_path, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "not a repair manifest" in err or "leaves its folder" in err or "not a file name" in err


def test_apply_refuses_a_quarantine_that_is_a_symlink(tmp_path, capsys):
    folder, outside = tmp_path / "run", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    save_resume(folder / "r.pth", step=30)
    cut(save_resume(folder / "r.pth.tmp", step=60, seed=3), 0.4)
    (folder / ".ckinspect-quarantine").symlink_to(outside)
    before = {p.name: sha(p) for p in folder.iterdir() if p.is_file() and not p.is_symlink()}
    code, out, err = _apply(folder, capsys)
    assert code == 2 and out == "" and "is a symlink; not followed" in err and err.count("\n") == 1
    assert list(outside.iterdir()) == []
    assert {p.name: sha(p) for p in folder.iterdir() if p.is_file() and not p.is_symlink()} == before


def test_undo_refuses_a_quarantine_that_is_a_symlink(tmp_path, capsys):
    folder, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    folder.mkdir()
    _hostile_manifest(elsewhere, [{"op": "rename", "from": "x", "to": "y", "size": None, "mtime_ns": None}])
    (folder / ".ckinspect-quarantine").symlink_to(elsewhere / ".ckinspect-quarantine")
    code, _out, err = _undo(folder, capsys)
    assert code == 2 and "is a symlink; not followed" in err


def test_apply_in_a_read_only_folder_is_one_line_and_exit_2(tmp_path, capsys):
    if os.geteuid() == 0:
        pytest.skip("root writes through read-only modes")
    save_resume(tmp_path / "r.pth", step=30)
    cut(save_resume(tmp_path / "r.pth.tmp", step=60, seed=3), 0.4)
    before = {p.name: sha(p) for p in tmp_path.iterdir()}
    tmp_path.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        code, out, err = _apply(tmp_path, capsys)
    finally:
        tmp_path.chmod(stat.S_IRWXU)
    assert code == 2 and out == "" and err.count("\n") == 1 and "not writable" in err
    assert {p.name: sha(p) for p in tmp_path.iterdir()} == before


def test_a_whole_tmp_that_runs_code_is_never_promoted(tmp_path, capsys):
    marker = tmp_path / "MARKER"
    torch.save({"step": 60, "w": torch.ones(3), "x": _Payload(str(marker))}, tmp_path / "r.pth.tmp")
    before = sha(tmp_path / "r.pth.tmp")
    code, out, _err = _apply(tmp_path, capsys)
    assert code == 1
    assert "not promoted: the tmp is UNSAFE_PICKLE" in out and "posix.system" in out
    assert not (tmp_path / "r.pth").exists() and sha(tmp_path / "r.pth.tmp") == before
    assert not marker.exists()


def test_apply_refuses_a_tmp_whose_bytes_changed_after_the_plan(tmp_path):
    save_resume(tmp_path / "r.pth", step=30)
    cut(tmp_path / "r.pth", 0.5)
    tmp = save_resume(tmp_path / "r.pth.tmp", step=60, seed=2)
    plan = plan_repairs(tmp_path)
    assert [a.action for a in plan.actions] == ["promote"]
    st = tmp.stat()
    data = bytearray(tmp.read_bytes())
    data[100] ^= 0xFF  # same size, same mtime: only the content tells
    tmp.write_bytes(bytes(data))
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    main_before = sha(tmp_path / "r.pth")
    result = apply_plan(plan)
    assert [a.state for a in plan.actions] == ["skipped"]
    assert "bytes are not those the plan checked" in plan.actions[0].note
    assert sha(tmp_path / "r.pth") == main_before and tmp.exists() and result.done == []


def test_apply_on_a_read_only_file_system_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    save_resume(tmp_path / "r.pth", step=30)
    cut(save_resume(tmp_path / "r.pth.tmp", step=60, seed=3), 0.4)
    before = {p.name: sha(p) for p in tmp_path.iterdir()}

    def read_only(*_args, **_kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr("ckinspect.ops.repair.os.mkdir", read_only)
    code, out, err = _apply(tmp_path, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Read-only file system" in err
    assert {p.name: sha(p) for p in tmp_path.iterdir()} == before
