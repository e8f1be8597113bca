"""The compiled pickle pass (ckinspect/_native/pickle_walk.c): built where CI builds it, the same answers as the
pure path on torch's own files, and bounded (it declines, never crashes or grows) on hostile ones.

The differential oracle (test_pickle_differential.py) holds it against CPython on random streams; the hostile,
torch_zip, unpickler and parity tests run on both paths (the `pickle_paths` fixture).
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import subprocess
import sys
import zipfile
from collections import OrderedDict

import pytest
import torch

from ckinspect._native import load
from ckinspect.formats import pickle_scan
from ckinspect.formats.pickle_findings import StorageCollector
from ckinspect.formats.pickle_scan import NOT_DECODED, native_decoding, scan_decoding
from ckinspect.formats.torch_zip import read_torch_zip
from ckinspect.formats.unpickler import native_scan_and_load, scan_and_load
from ckinspect.settings import PURE as PURE_ENV
from tests.conftest import cli_env

pytestmark = pytest.mark.core
BUILT = load("pickle_walk") is not None


def test_the_compiled_pass_is_built_where_ci_builds_it():
    # .ci/run installs with `pip install -e .`, which compiles it (gcc): there it must load. A worktree that never
    # ran build_ext takes the pure path, which gives the same answers (every test below runs there too).
    if os.environ.get("CKINSPECT_EXPECT_NATIVE") and not os.environ.get(PURE_ENV):
        assert BUILT, "ckinspect._native.pickle_walk was not built: `pip install -e .` needs a C compiler"


def test_ckinspect_pure_forces_the_pure_path(monkeypatch):
    monkeypatch.setenv(PURE_ENV, "1")
    assert load("pickle_walk") is None
    assert native_decoding(b"\x80\x02N.", lambda m, n: None, lambda pid: None) is None


def _data_pkl(path) -> bytes:
    with zipfile.ZipFile(path) as z:
        return z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))


def _listing(ckpt) -> tuple:
    return (ckpt.format, [t._values() for t in ckpt.tensors], sorted((k, repr(s)) for k, s in ckpt.storages.items()),
            [(f.code, f.message) for f in ckpt.findings], repr(ckpt.metadata))  # fmt: skip


def _torch_files(folder):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    states = {
        "plain": {"w": torch.ones(3, 4), "b": torch.zeros(4, dtype=torch.bfloat16), "step": 7},
        "views": {"a": base, "t": base.t(), "row": base[1], "strided": base[:, ::2], "empty": base[:0]},
        "module": torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.LayerNorm(2)).state_dict(),
        "resume": {"model": OrderedDict(w=torch.nn.Parameter(torch.ones(2))), "optimizer": {"state": {}, "lr": 0.1},
                   "rng": torch.get_rng_state(), "ints": torch.arange(5), "nested": [1, (2.5, "x"), {"k": None}]},
    }  # fmt: skip
    for name, state in states.items():
        for protocol in (2, 4, 5):
            path = folder / f"{name}_p{protocol}.pt"
            torch.save(state, path, pickle_protocol=protocol)
            yield path


def test_the_compiled_pass_lists_torch_files_as_the_pure_path_does(tmp_path, monkeypatch):
    taken = []
    real = pickle_scan.native_decoding

    def counting(*args, **kwargs):
        got = real(*args, **kwargs)
        if not os.environ.get(PURE_ENV):
            taken.append(got is not None)
        return got

    for path in _torch_files(tmp_path):
        monkeypatch.setattr("ckinspect.formats.unpickler.native_decoding", counting)
        native = _listing(read_torch_zip(path))
        monkeypatch.setenv(PURE_ENV, "1")
        pure = _listing(read_torch_zip(path))
        monkeypatch.delenv(PURE_ENV)
        assert native == pure, path.name
        assert native[1], path.name
    assert taken and all(taken) == BUILT  # every one of torch's own files decoded by the compiled pass, where built


def test_the_compiled_pass_gives_scan_and_load_s_exact_scan_and_tree(tmp_path):
    if not BUILT:
        pytest.skip("the compiled pass is not built here")
    for path in _torch_files(tmp_path):
        data = _data_pkl(path)
        native_collector, pure_collector = StorageCollector(), StorageCollector()
        got = native_scan_and_load(data, native_collector, storages=native_collector.native_storages())
        assert got is not None, path.name
        scan, tree = got
        pure_scan, pure_tree = scan_and_load(data, pure_collector)
        assert pure_tree is not NOT_DECODED
        assert repr(scan) == repr(pure_scan), path.name
        assert repr(tree) == repr(pure_tree), path.name
        assert {k: repr(v) for k, v in native_collector.storages.items()} == {
            k: repr(v) for k, v in pure_collector.storages.items()
        }


class _Accepting(pickle.Unpickler):
    def __init__(self, file) -> None:
        super().__init__(file)
        self.asked: list[tuple[str, str]] = []

    def find_class(self, module, name):
        self.asked.append((module, name))
        return list

    def persistent_load(self, pid):
        return pid


_HOSTILE = {
    # a list appended to itself through the memo, 100,000 times: shared, never copied
    "billion laughs": b"\x80\x02]q\x00(" + b"h\x00" * 100_000 + b"e.",
    "huge declared string": b"\x80\x02X\xff\xff\xff\xff" + b"a" * 64 + b".",
    "huge declared bytes8": b"\x80\x04\x8e" + struct.pack("<Q", 1 << 62) + b"ab.",
    "huge frame": b"\x80\x04\x95" + struct.pack("<Q", 1 << 60) + b"N.",
    "sparse memo index": b"\x80\x02Nr\xff\xff\xff\x7f.",
    "memo get of nothing": b"\x80\x02j\x00\x00\x00\x10.",
    "deep marks": b"\x80\x02" + b"(" * 1_000_000 + b"N.",
    "deep lists": b"\x80\x02" + b"]" * 300_000 + b"a" * 299_999 + b".",
    "ten million dicts": b"\x80\x04" + b"}" * 10_000_000 + b"\x8c\x02os\x8c\x06system\x93.",
    "truncated": b"\x80\x02]q\x00(K\x01K\x02",
    "no stop": b"\x80\x02N",
    "stack underflow": b"\x80\x02R.",
    "pop under the mark": b"\x80\x02N(\x85.",
    "stack global of no strings": b"\x80\x04K\x01K\x02\x93.",
    "line without newline": b"\x80\x02cos\nsystem",
    "protocol 6": b"\x80\x06N.",
}


def _outline(value) -> list:
    """Type and length at each level down the first items (iteratively: a 300,000-deep list has no repr)."""
    seen, out = set(), []
    while isinstance(value, list) and id(value) not in seen and len(out) < 1_000_000:
        seen.add(id(value))
        out.append(len(value))
        value = value[0] if value else None
    return [*out, repr(value) if not isinstance(value, list) else "shared"]


_ANSWERED = {"billion laughs", "deep marks", "deep lists"}  # well-formed, and small per byte: decoded as CPython does


@pytest.mark.parametrize("name", sorted(_HOSTILE))
def test_the_compiled_pass_declines_or_answers_as_cpython_on_hostile_pickles(name):
    if not BUILT:
        pytest.skip("the compiled pass is not built here")
    data = _HOSTILE[name]
    finder = _Accepting(io.BytesIO(b""))
    got = native_decoding(data, finder.find_class, finder.persistent_load)
    # declined: the pure path decides (the differential test holds it against CPython); answered: as it answers
    assert (got is not None) == (name in _ANSWERED), name
    if got is None:
        return
    scan, value = got
    pure_scan, pure_value = scan_decoding(data, _Accepting)
    assert pure_value is not NOT_DECODED and repr(scan) == repr(pure_scan)
    assert _outline(value) == _outline(pure_value)
    if name == "billion laughs":
        assert len(value) == 100_000 and value[0] is value


def test_ten_million_dicts_are_declined_in_bounded_memory(tmp_path):
    # 10 MB of EMPTY_DICT: the compiled pass stops building past one object per 3 bytes (beyond a floor), as
    # BoundedInput stops CPython's unpickler; measured in a fresh process (peak RSS)
    child = r"""
import resource, sys
from ckinspect.formats.pickle_scan import native_decoding
data = b"\x80\x04" + b"}" * 10_000_000 + b"N."
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
got = native_decoding(data, lambda m, n: None, lambda pid: None)
print(got is None, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""
    if not BUILT:
        pytest.skip("the compiled pass is not built here")
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, env=cli_env(), timeout=300)
    declined, grown_mb = out.stdout.split()
    assert declined == "True" and int(grown_mb) < 160, out.stdout + out.stderr


def test_a_refused_global_declines_and_the_pure_path_reports_it(tmp_path):
    class Payload:
        def __reduce__(self):
            return (os.system, ("true",))

    path = tmp_path / "payload.pt"
    torch.save({"w": torch.ones(2), "x": Payload()}, path)
    data = _data_pkl(path)
    collector = StorageCollector()
    assert native_scan_and_load(data, collector, storages=collector.native_storages()) is None
    ckpt = read_torch_zip(path)
    assert [f.code for f in ckpt.findings if f.code == "UNSAFE_PICKLE"] == ["UNSAFE_PICKLE"]
    assert [t.name for t in ckpt.tensors] == []


_SIZES = {  # torch.Size as pickles spell it: on one tuple the compiled pass answers itself, anything else calls it
    "a tuple, and the tuple again from the memo": b"\x80\x02]q\x00(ctorch\nSize\nq\x01K\x03K\x04\x86q\x02\x85Rh\x02e.",
    "a list": b"\x80\x02ctorch\nSize\n]q\x00(K\x01K\x02e\x85R.",
    "no argument": b"\x80\x02ctorch\nSize\n)R.",
    "two arguments": b"\x80\x02ctorch\nSize\nK\x01K\x02\x86R.",
    "a tuple holding a tuple": b"\x80\x02ctorch\nSize\nK\x01\x85\x85\x85R.",
}


@pytest.mark.parametrize("name", sorted(_SIZES))
def test_torch_size_decodes_as_its_stand_in_does(name):
    data = _SIZES[name]
    pure_scan, pure_tree = scan_and_load(data, StorageCollector())
    got = native_scan_and_load(data, StorageCollector())
    if not BUILT:
        assert got is None
        return
    if name == "two arguments":  # the stand-in raises: the compiled pass declines and the pure path reports it
        assert got is None and pure_tree is NOT_DECODED
        return
    assert got is not None
    scan, tree = got
    assert repr(scan) == repr(pure_scan) and repr(tree) == repr(pure_tree) and type(tree) is type(pure_tree)
    if name.startswith("a tuple, and"):
        assert tree == [(3, 4), (3, 4)] and tree[0] is tree[1] and pure_tree[0] is pure_tree[1]


def test_a_model_states_file_of_shapes_lists_as_the_pure_path_does(tmp_path, monkeypatch):
    shapes = OrderedDict((f"model.layers.{i}.w", torch.Size([i + 1, 8])) for i in range(40))
    path = tmp_path / "zero_pp_rank_0_mp_rank_00_model_states.pt"
    torch.save({"module": OrderedDict((k, torch.empty(0)) for k in shapes), "param_shapes": [shapes]}, path)
    native = read_torch_zip(path)
    monkeypatch.setenv(PURE_ENV, "1")
    pure = read_torch_zip(path)
    assert _listing(native) == _listing(pure) and repr(native.tree) == repr(pure.tree)
    assert native.tree["param_shapes"][0]["model.layers.3.w"] == (4, 8)
