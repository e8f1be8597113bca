"""The fast paths are regular dependencies wherever wheels exist, and without them ckinspect still works:
`watch` polls (and says why), the CRC falls back to zlib (tests/io/test_crc.py)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement

from ckinspect.io import changes

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
REPO = Path(__file__).resolve().parents[2]


def test_the_fast_crc_and_file_events_are_regular_dependencies_where_wheels_exist():
    deps = [Requirement(d) for d in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]]
    fast = {r.name: r for r in deps if r.name in ("isal", "zlib-ng", "watchfiles")}
    assert set(fast) == {"isal", "zlib-ng", "watchfiles"}
    for r in fast.values():
        assert r.marker is not None  # only where wheels exist: elsewhere pip skips them, never builds them
        assert r.marker.evaluate({"platform_machine": "x86_64", "platform_python_implementation": "CPython"})
        assert r.marker.evaluate({"platform_machine": "arm64", "platform_python_implementation": "CPython"})
        assert not r.marker.evaluate({"platform_machine": "riscv64", "platform_python_implementation": "CPython"})
        assert not r.marker.evaluate({"platform_machine": "x86_64", "platform_python_implementation": "PyPy"})
    assert Marker("platform_machine == 'x86_64'").evaluate() == fast["isal"].marker.evaluate()


def test_without_watchfiles_watch_polls_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "watchfiles", None)  # an import now fails, as when it is not installed
    follow = changes.Changes(tmp_path, interval=0.05)
    assert follow.mode == changes.POLLING and "watchfiles is not installed" in follow.why
    stop = threading.Event()
    wakeups = follow.wakeups(stop)
    assert next(wakeups) == changes.POLLING
    stop.set()
    assert list(wakeups) == []


def test_with_watchfiles_installed_watch_follows_events(tmp_path):
    if changes.filesystem_type(tmp_path).startswith(("fuse", *changes.NO_EVENTS_FS)):
        return  # such filesystems poll by design (test_without_watchfiles_... covers polling)
    assert changes.Changes(tmp_path).mode == changes.EVENTS
