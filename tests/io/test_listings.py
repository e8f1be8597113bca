"""The listings of URL prefixes live in a Listings object whose owner says how long they are trusted (the
CLI one per command, the API one per call, the TUI its own): inside its block every question about a listed
prefix is answered from the listing taken, `clear()` makes the next look list afresh, and when the block
ends nothing of it remains. Over the HTTP range server on 127.0.0.1 (index pages), as a user's server."""

from __future__ import annotations

import pytest

from ckinspect.io import folders
from ckinspect.io.folders import Listings
from tests.helpers.remote_servers import range_server

pytestmark = pytest.mark.remote


def _names(root) -> list[str]:
    return [e.name for e in folders.entries(root)]


def test_a_listing_is_kept_until_its_owner_clears_it(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "a.pt").write_bytes(b"x" * 10)
    with range_server(tmp_path) as server, Listings().in_use() as mine:
        url = f"{server.url}/run/"
        root = folders.open_folder(url)
        assert _names(root) == ["a.pt"]
        (tmp_path / "run" / "b.pt").write_bytes(b"y" * 20)
        assert _names(folders.listed_folder(url)) == ["a.pt"]  # answered from the listing taken
        mine.clear()  # what a long-running TUI does before it looks again
        assert mine.known(str(root)) is None
        assert _names(folders.listed_folder(url)) == ["a.pt", "b.pt"]  # listed afresh
        assert folders.size(root / "b.pt") == 20


def test_nothing_of_a_listing_outlives_its_block(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "a.pt").write_bytes(b"x" * 10)
    with range_server(tmp_path) as server:
        url = f"{server.url}/run/"
        with Listings().in_use() as outer:
            with Listings().in_use() as inner:
                root = folders.open_folder(url)
                assert folders.current() is inner and folders.is_dir(root)
            assert folders.current() is outer
            assert outer.known(str(root)) is None and not folders.is_dir(root)  # the inner one's is gone
        assert folders.current() is not outer and folders.current().known(str(root)) is None
        assert not folders.is_dir(root)  # a lone URL is an object until listed again
