"""The static pickle scan, the restricted unpickler's stand-ins, and tree naming. No torch needed."""

from __future__ import annotations

import contextlib
import io
import pickle
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckinspect.formats.errors import CorruptPickle, UnsafePickle
from ckinspect.formats.pickle_scan import classify_global, is_dangerous, scan_globals, scan_pickle, scan_stream
from ckinspect.formats.tree import flatten, walk
from ckinspect.formats.unpickler import ArrayInfo, Opaque, restricted_load
from ckinspect.model import TensorInfo


def names(data: bytes) -> list[str]:
    return [g.qualname for g in scan_globals(data)]


def sunicode(s: str) -> bytes:
    raw = s.encode()
    return b"\x8c" + bytes([len(raw)]) + raw


def test_global_opcode_protocol_0_and_2():
    class_ref = b"cos\nsystem\n(S'echo'\ntR."
    assert names(class_ref) == ["os.system"]
    assert scan_globals(class_ref)[0].kind == "unsafe"
    assert scan_globals(class_ref)[0].dangerous


def test_inst_opcode():
    data = b"(S'x'\nisubprocess\nPopen\n."
    assert names(data) == ["subprocess.Popen"]
    assert scan_globals(data)[0].opcode == "INST"


def test_stack_global_resolved_through_memo():
    # module and name pushed once, memoized, then fetched again with BINGET / LONG_BINGET
    data = (
        b"\x80\x04" + sunicode("builtins") + b"\x94" + sunicode("eval") + b"\x94" + b"\x93\x94"
        + b"0"  # POP the global
        + b"h\x00" + b"j\x01\x00\x00\x00" + b"\x93" + b"N\x85R."
    )  # fmt: skip
    refs = scan_globals(data)
    assert [g.qualname for g in refs] == ["builtins.eval"]
    assert refs[0].opcode == "STACK_GLOBAL" and refs[0].kind == "unsafe"


def test_stack_global_with_put_and_get_text_opcodes():
    data = b"\x80\x04Vposix\np0\nVsystem\np1\ng0\ng1\n\x93N\x85R."
    assert "posix.system" in names(data)


def test_unresolvable_stack_global_counts_as_unsafe():
    data = b"\x80\x04K\x01K\x02\x93."  # names made of integers: nothing a scan can trust
    refs = scan_globals(data)
    assert refs and refs[0].kind == "unsafe" and refs[0].module == "<unresolved>"


def test_ext_opcode_is_unsafe():
    refs = scan_globals(b"\x80\x02\x82\x05.")
    assert refs and refs[0].kind == "unsafe" and refs[0].opcode == "EXT"


def test_python2_names_are_normalized_like_pickle_does():
    assert classify_global("__builtin__", "set") == "allowed"
    assert classify_global("__builtin__", "eval") == "unsafe"
    assert is_dangerous("__builtin__", "eval")
    assert is_dangerous("copy_reg", "_reconstructor") is False


@pytest.mark.parametrize(
    "module,name,kind",
    [
        ("torch._utils", "_rebuild_tensor_v2", "allowed"),
        ("torch._utils", "_rebuild_parameter", "allowed"),
        ("torch", "BFloat16Storage", "allowed"),
        ("torch", "bfloat16", "allowed"),
        ("torch.storage", "UntypedStorage", "allowed"),
        ("collections", "OrderedDict", "allowed"),
        ("_codecs", "encode", "allowed"),
        ("torch", "Size", "allowed"),
        ("torch", "device", "allowed"),
        ("torch.nn.parameter", "Parameter", "allowed"),
        ("numpy.core.multiarray", "_reconstruct", "benign"),
        ("numpy._core.multiarray", "_reconstruct", "benign"),
        ("numpy", "dtype", "benign"),
        ("numpy.dtypes", "UInt32DType", "benign"),
        ("argparse", "Namespace", "benign"),
        ("collections", "defaultdict", "benign"),
        ("pathlib", "PosixPath", "benign"),
        ("torch.distributed.checkpoint.metadata", "Metadata", "benign"),
        ("os", "system", "unsafe"),
        ("posix", "system", "unsafe"),
        ("nt", "system", "unsafe"),
        ("subprocess", "Popen", "unsafe"),
        ("builtins", "exec", "unsafe"),
        ("builtins", "getattr", "unsafe"),
        ("runpy", "run_path", "unsafe"),
        ("importlib", "import_module", "unsafe"),
        ("__main__", "MyConfig", "unsafe"),
        ("torch.nn.modules.linear", "Linear", "unsafe"),
    ],
)
def test_classification(module, name, kind):
    assert classify_global(module, name) == kind


@pytest.mark.parametrize(
    "module,name",
    [("os", "system"), ("posix", "system"), ("subprocess", "Popen"), ("builtins", "eval"), ("builtins", "exec"),
     ("builtins", "compile"), ("builtins", "open"), ("builtins", "__import__"), ("builtins", "getattr"),
     ("runpy", "_run_code"), ("importlib", "import_module"), ("pty", "spawn"), ("socket", "socket"),
     ("shutil", "rmtree")],
)  # fmt: skip
def test_dangerous_globals_are_named_as_such(module, name):
    assert is_dangerous(module, name)


def test_every_consecutive_pickle_is_scanned():
    first = pickle.dumps({"a": 1}, protocol=2)
    second = b"cos\nsystem\n(S'x'\ntR."
    assert names(first + second) == ["os.system"]
    scans = scan_stream(first + second)
    assert len(scans) == 2 and scans[0].end == len(first)


def test_memo_index_far_beyond_the_pickle_is_refused_before_loading():
    # the C unpickler would size its memo to ~4 billion slots for this 12-byte pickle
    data = b"\x80\x02N" + b"r" + struct.pack("<I", 0xFFFFFFF0) + b"."
    scan = scan_pickle(data)
    assert scan.error and "memo index" in scan.error
    with pytest.raises(CorruptPickle):
        restricted_load(data)
    text = b"Np99999999999999\n."
    assert scan_pickle(text).error


def test_ordinary_pickles_scan_clean():
    data = pickle.dumps({"x": [1, 2.5, "s", b"b", (1, 2)], "y": {1, 2}, "z": None}, protocol=4)
    scan = scan_pickle(data)
    assert scan.error is None and scan.end == len(data) and scan.globals == []
    assert restricted_load(data) == {"x": [1, 2.5, "s", b"b", (1, 2)], "y": {1, 2}, "z": None}


def test_large_memo_pickle_scans_clean():
    # more than 256 memoized objects: LONG_BINPUT / LONG_BINGET paths
    obj = {f"k{i}": [i, f"v{i}"] for i in range(2000)}
    data = pickle.dumps(obj, protocol=2)
    assert scan_pickle(data).error is None
    assert restricted_load(data) == obj


@pytest.mark.parametrize(
    "data",
    [b"", b"\x80", b"\x80\x02", b"\x80\x02X\xff\xff\xff\x7fabc", b"\x80\x09N.", b"\xff\xfe", b"hello world\n",
     b"cos\nsys", b"\x80\x02(((((", b"\x80\x02N\x93.", b"\x80\x02\x95\x10\x00\x00\x00\x00\x00\x00\x00N."],
)  # fmt: skip
def test_malformed_pickles_give_errors_not_exceptions(data):
    scan = scan_pickle(data)
    assert scan.error is not None or scan.end <= len(data)
    scan_globals(data)
    with pytest.raises((CorruptPickle, UnsafePickle)):
        restricted_load(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_random_bytes_never_raise_from_scan_or_escape_as_other_errors(data):
    scan_globals(data)
    with contextlib.suppress(CorruptPickle, UnsafePickle):
        restricted_load(data)


@settings(max_examples=150, deadline=None)
@given(st.binary(min_size=1, max_size=40), st.integers(min_value=0, max_value=300))
def test_mutated_real_pickles_never_escape(noise, where):
    base = bytearray(pickle.dumps({"model": {"w": [1.0, 2.0]}, "step": 3, "names": ["a", "b"]}, protocol=2))
    where = min(where, len(base))
    data = bytes(base[:where] + noise + base[where + len(noise) :])
    scan_globals(data)
    with contextlib.suppress(CorruptPickle, UnsafePickle):
        restricted_load(data)


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


def _ti(key="0"):
    return TensorInfo("", "float32", (2,), (1,), key, 0)


def test_flatten_names_by_dotted_path_and_list_index():
    t1, t2, t3 = _ti("0"), _ti("1"), _ti("2")
    tree = {"model": {"layers": [{"w": t1}, {"w": t2}]}, "optimizer": {"state": {3: {"exp_avg": t3}}}, "step": 4}
    assert [t.name for t in flatten(tree)] == ["model.layers.0.w", "model.layers.1.w", "optimizer.state.3.exp_avg"]
    assert [t.storage_key for t in flatten(tree)] == ["0", "1", "2"]
    assert t1.name == "model.layers.0.w" and flatten(tree)[0] is t1  # named in place: tree and list share it
    assert [t.name for t in flatten(tree, prefix="ckpt")][0] == "ckpt.model.layers.0.w"
    assert t1.name == "model.layers.0.w"  # a differently named flatten gets copies
    assert flatten(_ti())[0].name == "tensor"


def test_flatten_names_a_tensor_saved_twice_at_both_paths():
    t = _ti()
    names = [x.name for x in flatten({"embed": t, "head": t})]
    assert names == ["embed", "head"] and t.name == "embed"


def test_walk_survives_cycles_and_shared_subtrees():
    shared = {"w": _ti()}
    loop: list = []
    loop.append(loop)
    tree = {"a": shared, "b": shared, "loop": loop}
    paths = [p for p, _ in walk(tree)]
    assert paths[0] == "" and "a.w" in paths and "loop" in paths
    assert len(paths) < 10
    # an exponential DAG built through the memo stays linear
    node: list = [_ti()]
    for _ in range(60):
        node = [node, node]
    start = time.perf_counter()
    assert len(flatten(node)) == 1
    assert time.perf_counter() - start < 1


def test_scan_of_real_pickle_stream_positions():
    buf = io.BytesIO()
    for obj in (1, "two", [3]):
        pickle.dump(obj, buf, protocol=2)
    scans = scan_stream(buf.getvalue())
    assert [s.error for s in scans] == [None, None, None]
    assert scans[-1].end == len(buf.getvalue())


def _reference_globals(data: bytes) -> set[str]:
    """pickletools' own reading of the same opcodes, as an independent check of the lean walk."""
    import pickletools

    from ckinspect.formats.pickle_scan import normalize

    found, strings, memo = set(), [], {}
    for op, arg, _pos in pickletools.genops(data):
        if op.name in ("GLOBAL", "INST"):
            module, name = arg.split(" ", 1)
            found.add(".".join(normalize(module, name)))
        elif op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8"):
            strings.append(arg)
        elif op.name == "MEMOIZE":
            memo[len(memo)] = strings[-1] if strings else None
        elif op.name == "STACK_GLOBAL":
            found.add(".".join(normalize(strings[-2], strings[-1])))
    return found


_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=4), children, max_size=4)
        | st.tuples(children, children)
        | st.builds(
            lambda d: __import__("collections").OrderedDict(d),
            st.dictionaries(st.text(max_size=3), children, max_size=3),
        )
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(_values, st.integers(min_value=0, max_value=5))
def test_lean_walk_agrees_with_pickletools(value, protocol):
    import datetime

    data = pickle.dumps([value, datetime.date(2020, 1, 2), {1, 2}], protocol=protocol)
    scan = scan_pickle(data)
    assert scan.error is None and scan.end == len(data)
    assert {g.qualname for g in scan.globals} == _reference_globals(data)
    assert restricted_load(data)[2] == {1, 2}


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


def test_legacy_prefix_read_does_not_chase_garbage_lengths(tmp_path, monkeypatch):
    from ckinspect.formats import torch_legacy
    from ckinspect.io.zipdir import FileReader

    # a BINUNICODE claiming 3 GB inside a 2 MB file: nothing more than the file is ever requested
    path = tmp_path / "g.pt"
    path.write_bytes(b"\x80\x02X" + struct.pack("<I", 3 << 30) + b"\x00" * (2 << 20))
    asked = []
    real = FileReader.read_at
    monkeypatch.setattr(FileReader, "read_at", lambda self, o, n: asked.append(n) or real(self, o, n))
    ckpt = torch_legacy.read_torch_legacy(path)
    assert [f.code for f in ckpt.findings] == ["CORRUPT"]
    assert max(asked) <= 1 << 20
