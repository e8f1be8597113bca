"""ckinspect._native.load declines a module built before its .c last changed in a source checkout (one that pulled
new C and was not rebuilt): the pure path answers instead of an old build the Python beside it no longer matches."""

import os

from ckinspect import _native

SO = "zipdir.cpython-311-x86_64-linux-gnu.so"


def _tree(root, *, checkout):
    native = root / "ckinspect" / "_native"
    native.mkdir(parents=True)
    if checkout:
        (root / "setup.py").write_text("")
    (native / SO).write_bytes(b"\x7fELF")
    (native / "zipdir.c").write_text("/* C */\n")
    return native / SO, native / "zipdir.c"


def _times(path, seconds):
    os.utime(path, ns=(seconds * 10**9, seconds * 10**9))


def test_a_build_older_than_its_source_is_stale_and_a_fresh_one_is_not(tmp_path):
    built, source = _tree(tmp_path, checkout=True)
    _times(built, 2_000_000_000)
    _times(source, 1_000_000_000)
    assert not _native.built_before_source(str(built), str(source))
    assert not _native._stale.__wrapped__("zipdir", str(built))  # built after its source: used
    _times(source, 3_000_000_000)
    assert _native.built_before_source(str(built), str(source))
    assert _native._stale.__wrapped__("zipdir", str(built))  # the source changed since: declined
    source.unlink()
    assert not _native._stale.__wrapped__("zipdir", str(built))  # no source beside it: used


def test_an_installed_package_is_never_stale_whatever_times_pip_gave_its_files(tmp_path):
    built, source = _tree(tmp_path, checkout=False)
    _times(built, 1_000_000_000)
    _times(source, 3_000_000_000)
    assert not _native._stale.__wrapped__("zipdir", str(built))
