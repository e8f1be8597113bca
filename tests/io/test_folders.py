"""io.folders on disk (what the runs code and folder search saw from os.scandir before) and RemotePath's
joins, which keep the URL (pathlib's own would fold `s3://` into `s3:/`). The remote side is tested against
real servers in test_remote_folders.py."""

from __future__ import annotations

import os

from ckinspect.io import folders
from ckinspect.io.remote import RemotePath


def test_a_child_or_parent_of_a_url_is_a_url():
    run = RemotePath("s3://bucket/runs/exp1/")
    part = run / "global_step10" / "mp_rank_00_model_states.pt"
    assert str(part) == "s3://bucket/runs/exp1/global_step10/mp_rank_00_model_states.pt"
    assert part.name == "mp_rank_00_model_states.pt" and part.suffix == ".pt"
    assert str(part.parent) == "s3://bucket/runs/exp1/global_step10"
    assert str(part.parent.parent.parent.parent) == "s3://bucket" == str(RemotePath("s3://bucket").parent)
    assert str(part.relative_to(RemotePath("s3://bucket/runs/exp1"))) == "global_step10/mp_rank_00_model_states.pt"
    assert str(run.joinpath("a", "b.pt")) == "s3://bucket/runs/exp1/a/b.pt"
    assert run.is_folder_url() and not part.is_folder_url() and str(part.folder()).endswith("states.pt/")
    # a presigned URL's query names one object: a sibling does not inherit it
    assert str(RemotePath("https://h/run/a.pt?X-Amz-Signature=s").parent / "b.pt") == "https://h/run/b.pt"


def test_a_local_folder_is_listed_as_os_scandir_sees_it(tmp_path):
    (tmp_path / "b.pt").write_bytes(b"x" * 5)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "c.pt.tmp").write_bytes(b"")
    os.symlink(tmp_path / "gone", tmp_path / "broken")  # neither file nor folder: left out, as before
    os.symlink(tmp_path, tmp_path / "a" / "loop")  # a symlinked folder: walk does not follow it (no loop)
    assert [(e.name, e.is_dir) for e in folders.entries(tmp_path)] == [("a", True), ("b.pt", False)]
    assert folders.walk(tmp_path) == [(tmp_path, ["b.pt", "broken"]), (tmp_path / "a", ["c.pt.tmp"])]
    assert folders.size(tmp_path / "b.pt") == 5 and folders.tree_size(tmp_path) == 5
    assert folders.read_bytes(tmp_path / "b.pt", 2) == b"xx" and folders.read_bytes(tmp_path / "b.pt") == b"x" * 5
    assert folders.is_file(tmp_path / "b.pt") and folders.is_dir(tmp_path / "a")
    assert folders.exists(tmp_path / "broken") and not folders.is_file(tmp_path / "broken")


def test_a_url_under_no_listing_is_no_folder_and_costs_no_request():
    url = RemotePath("s3://bucket-never-listed/run/x.pt")
    assert not folders.is_dir(url) and not folders.is_file(url)


def _listed(folder, suffix=".tmp"):
    return [p.name for p in folders.files_ending(folder, suffix)]


def test_a_settled_folder_listed_again_sees_every_name_added_removed_or_renamed(tmp_path, monkeypatch):
    """files_ending keeps a settled folder's matching names while the folder's stamp holds (a 2,048-file tag
    judged file by file lists it once): every change to the folder is still seen at the next call."""
    monkeypatch.setattr(folders, "_SETTLED_NS", 0)  # every folder counts as settled here (no test waits 5 s)
    monkeypatch.setattr(folders, "_ENDINGS", {})
    ticks = iter(range(10**18, 10**18 + 100))

    def tick():  # two changes within one tick of the kernel's clock leave equal times: why only settled folders
        now = next(ticks)  # are kept; here each change gets a tick of its own, as changes seconds apart do
        os.utime(tmp_path, ns=(now, now))

    (tmp_path / "a.pt").write_bytes(b"")
    (tmp_path / "a.pt.tmp").write_bytes(b"")
    tick()
    assert _listed(tmp_path) == ["a.pt.tmp"] and _listed(tmp_path, ".pt") == ["a.pt"]
    assert (str(tmp_path), ".tmp") in folders._ENDINGS  # kept
    assert _listed(tmp_path) == ["a.pt.tmp"]
    (tmp_path / "b.pt.tmp").write_bytes(b"")
    tick()
    assert _listed(tmp_path) == ["a.pt.tmp", "b.pt.tmp"]
    os.rename(tmp_path / "a.pt.tmp", tmp_path / "c.pt.tmp")
    tick()
    assert _listed(tmp_path) == ["b.pt.tmp", "c.pt.tmp"]
    os.unlink(tmp_path / "b.pt.tmp")
    tick()
    assert _listed(tmp_path) == ["c.pt.tmp"]
    # a kept name that stops being a file (its link's target, elsewhere, gone: the folder unchanged) is left out
    os.unlink(tmp_path / "c.pt.tmp")
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    elsewhere.mkdir()
    (elsewhere / "target").write_bytes(b"")
    os.symlink(elsewhere / "target", tmp_path / "d.pt.tmp")
    tick()
    assert _listed(tmp_path) == ["d.pt.tmp"]
    os.unlink(elsewhere / "target")
    assert _listed(tmp_path) == []


def test_a_folder_changed_lately_is_listed_afresh_and_not_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(folders, "_ENDINGS", {})
    (tmp_path / "a.pt.tmp").write_bytes(b"")
    assert _listed(tmp_path) == ["a.pt.tmp"]
    assert not folders._ENDINGS  # changed within the last seconds: its times may not show the next change
    monkeypatch.setattr(folders, "_SETTLED_NS", 0)
    for i in range(folders._ENDINGS_KEEP + 3):  # the kept listings stay few
        (tmp_path / f"f{i}").mkdir()
        assert _listed(tmp_path / f"f{i}") == []
    assert len(folders._ENDINGS) == folders._ENDINGS_KEEP
