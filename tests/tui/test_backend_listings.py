"""The long-running TUI owns its listings of URL prefixes (io.folders.Listings): what it listed answers
until a screen reads again (`forget_listings`, called by a reload and a new search), then the prefix is
listed afresh, so an object rewritten since is read at its new size. Over a real S3 API server (moto),
whose listing gives each object's size."""

from __future__ import annotations

import pytest

from ckinspect.tui.core import Backend
from tests.helpers.remote_servers import moto_s3, put_objects

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.remote


def test_a_prefix_listed_by_the_backend_is_its_own_and_is_listed_afresh_after_forget(tmp_path, monkeypatch):
    small, large = tmp_path / "small.pth", tmp_path / "large.pth"
    torch.save({"w": torch.zeros(4)}, small)
    torch.save({"w": torch.zeros(4), "v": torch.ones(300)}, large)
    with moto_s3() as env:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        put_objects(env, "ckpts", {"run/a.pth": small})
        backend = Backend()
        prefix = "s3://ckpts/run/"
        found = backend.find([prefix])
        assert [p.name for p in found] == ["a.pth"]
        assert backend.listings.known(prefix.rstrip("/")) is not None  # kept by the app, not by a module
        first = backend.load(found[0])
        assert [t.name for t in first.tensors] == ["w"] and first.file_bytes == small.stat().st_size

        put_objects(env, "ckpts", {"run/a.pth": large})  # rewritten since the listing, larger
        backend.forget_listings()
        assert backend.listings.known(prefix.rstrip("/")) is None
        again = backend.load(found[0])  # no new search: what was listed is what was forgotten
        assert again.file_bytes == large.stat().st_size
        assert sorted(t.name for t in again.tensors) == ["v", "w"] and not again.findings
