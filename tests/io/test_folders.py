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
    assert not folders.is_dir(url) and not folders.is_file(url) and folders.listed_size(url) is None
