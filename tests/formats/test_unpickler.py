"""The restricted unpickler: unsafe names refused (every one named), benign globals kept as data."""

from __future__ import annotations

import pickle

import pytest

from ckinspect.formats.errors import CorruptPickle, UnsafePickle
from ckinspect.formats.pickle_scan import scan_globals
from ckinspect.formats.unpickler import ArrayInfo, Opaque, restricted_load

pytestmark = pytest.mark.usefixtures("pickle_paths")  # on the compiled pickle pass and the pure path


def test_restricted_load_refuses_unsafe_names_every_one():
    data = b"\x80\x02cos\nsystem\nX\x01\x00\x00\x00x\x85Rcbuiltins\neval\nX\x01\x00\x00\x00y\x85R\x86."
    with pytest.raises(UnsafePickle) as info:
        restricted_load(data)
    assert info.value.names == ["os.system", "builtins.eval"]


def test_numpy_rng_state_decodes_to_array_info_without_numpy():
    import numpy as np

    state = np.random.RandomState(7).get_state()
    data = pickle.dumps({"np": state, "f": np.float64(1.5), "i": np.int64(3)}, protocol=2)
    kinds = {g.qualname: g.kind for g in scan_globals(data)}
    assert "benign" in kinds.values() and "unsafe" not in kinds.values()
    out = restricted_load(data)
    name, array, pos, _has_gauss, _cached = out["np"]
    assert name == "MT19937" and isinstance(array, ArrayInfo)
    assert array.shape == (624,) and array.dtype == "<u4" and array.nbytes == 624 * 4
    assert array.data == state[1].tobytes()
    assert pos == state[2]
    assert out["f"] == 1.5 and out["i"] == 3


def test_benign_records_keep_their_fields():
    import argparse
    import collections
    import pathlib

    data = pickle.dumps(
        {"args": argparse.Namespace(lr=0.1, name="x"), "dd": collections.defaultdict(list, a=[1]),
         "p": pathlib.PurePosixPath("/a/b"), "od": collections.OrderedDict(b=2)},
        protocol=2,
    )  # fmt: skip
    out = restricted_load(data)
    assert isinstance(out["args"], Opaque) and out["args"].qualname == "argparse.Namespace"
    assert out["args"].fields == {"lr": 0.1, "name": "x"}
    assert out["dd"] == {"a": [1]}
    assert out["p"] == "/a/b"
    assert out["od"] == {"b": 2} and isinstance(out["od"], dict)


def test_codecs_encode_only_for_byte_literals():
    ok = b"\x80\x02c_codecs\nencode\nX\x02\x00\x00\x00abX\x06\x00\x00\x00latin1\x86R."
    assert restricted_load(ok) == b"ab"
    bad = b"\x80\x02c_codecs\nencode\nX\x02\x00\x00\x00abX\x0b\x00\x00\x00rot13_codec\x86R."
    with pytest.raises(CorruptPickle):
        restricted_load(bad)
