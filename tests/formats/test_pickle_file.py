"""read_pickle: plain pickles of any size are scanned, and decoded only when small and safe."""

from __future__ import annotations

import pickle

from tests.formats.pickle_bytes import sunicode


def test_large_plain_pickles_are_scanned_in_place_not_decoded(tmp_path, monkeypatch):
    from ckinspect.formats import pickle_file

    monkeypatch.setattr(pickle_file, "MAX_DECODE_BYTES", 16)
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(b"\x80\x04" + sunicode("posix") + sunicode("system") + b"\x93" + sunicode("x") + b"\x85R.")
    ckpt = pickle_file.read_pickle(evil)
    assert [f.code for f in ckpt.findings] == ["UNSAFE_PICKLE"] and "posix.system" in ckpt.findings[0].message
    fine = tmp_path / "fine.pkl"
    fine.write_bytes(pickle.dumps({"a": list(range(100))}, protocol=4))
    ckpt = pickle_file.read_pickle(fine)
    assert ckpt.findings == [] and ckpt.tree is None and ckpt.metadata["pickles"] == 1
