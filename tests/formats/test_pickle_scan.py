"""The static pickle scan: every global a pickle names, found without running anything. No torch needed."""

from __future__ import annotations

import contextlib
import io
import pickle
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckinspect.formats.errors import CorruptPickle, UnsafePickle
from ckinspect.formats.pickle_scan import classify_global, is_dangerous, scan_globals, scan_pickle, scan_stream
from ckinspect.formats.unpickler import restricted_load
from tests.formats.pickle_bytes import run_lengths, sunicode


def names(data: bytes) -> list[str]:
    return [g.qualname for g in scan_globals(data)]


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


def _protocol_4_calling(module: str, name: str, arg: str) -> bytes:
    """module.name(arg) as protocol 4 writes it: STACK_GLOBAL over two memoized strings."""
    return b"\x80\x04" + sunicode(module) + b"\x94" + sunicode(name) + b"\x94\x93\x94" + sunicode(arg) + b"\x85R."


def test_stack_globals_of_a_pickle_in_memory_are_resolved_by_cpythons_unpickler(monkeypatch):
    import ckinspect.formats.pickle_scan as pickle_scan

    def no_stack_walk(*args):
        raise AssertionError("the scan's own stack walk ran on a pickle CPython's unpickler reads to STOP")

    monkeypatch.setattr(pickle_scan, "_stack_walk", no_stack_walk)
    data = pickle.dumps({"a": [1, 2.5, "x"], "b": struct.Struct}, protocol=4)  # struct.Struct: a STACK_GLOBAL
    assert names(data) == ["_struct.Struct"]
    assert names(_protocol_4_calling("posix", "system", "true")) == ["posix.system"]


def test_cpythons_walk_neither_imports_nor_calls_what_the_pickle_names(tmp_path):
    import sys

    marker = tmp_path / "ran"
    module = "ckinspect_scan_never_imports_this"
    data = _protocol_4_calling("posix", "system", f"touch {marker}")
    data += _protocol_4_calling(module, "anything", "x")
    scans = scan_stream(data)
    assert [g.qualname for s in scans for g in s.globals] == ["posix.system", f"{module}.anything"]
    assert not marker.exists() and module not in sys.modules


def test_a_pickle_cpythons_unpickler_stops_on_is_walked_by_the_scans_own_stack_walk():
    # the C unpickler refuses an empty module line (pickle.py reads it): the stack walk names the rest
    data = b"\x80\x04c\nx\n" + sunicode("posix") + sunicode("system") + b"\x93."
    assert names(data) == [".x", "posix.system"]


class _Built:
    """What _Watched hands back for every global: takes any arguments and items."""

    def __init__(self, *args) -> None:
        pass

    def __setitem__(self, key, value) -> None:
        pass


class _Watched(pickle.Unpickler):
    """A decoder for scan_decoding that records whether it was ever built, and asks like CPython."""

    built = 0

    def __init__(self, file) -> None:
        type(self).built += 1
        super().__init__(file)
        self.asked: list[tuple[str, str]] = []

    def find_class(self, module, name):
        self.asked.append((module, name))
        return _Built


_BOMBS = {  # what would make CPython's C unpickler allocate far beyond the bytes given it
    "LONG_BINPUT 2**30": b"\x80\x02N" + b"r" + struct.pack("<I", 1 << 30) + b".",
    "PUT 10**10": b"Np10000000000\n.",
    "BINBYTES 4 GiB": b"\x80\x03B" + struct.pack("<I", 0xFFFFFFFF) + b"x.",
    "BINBYTES8 2**40": b"\x80\x04\x8e" + struct.pack("<Q", 1 << 40) + b"x.",
    "BYTEARRAY8 2**40": b"\x80\x05\x96" + struct.pack("<Q", 1 << 40) + b"x.",
    "BINUNICODE8 2**40": b"\x80\x04\x8d" + struct.pack("<Q", 1 << 40) + b"x.",
    # a global named through copyreg's registry: resolved by a process-wide cache, not always by find_class
    "EXT1": b"\x80\x02\x82\x01.",
}


@pytest.mark.parametrize("name", list(_BOMBS))
def test_scan_decoding_never_hands_a_bomb_to_the_c_unpickler(name):
    from ckinspect.formats.pickle_scan import NOT_DECODED, scan_decoding

    _Watched.built = 0
    scan, value = scan_decoding(_BOMBS[name] + b"cos\nsystem\n.", _Watched)
    assert value is NOT_DECODED and _Watched.built == 0
    assert scan.error is not None or [g.qualname for g in scan.globals] == ["copyreg.<extension code 1>"]


def test_scan_decoding_names_every_global_the_decoder_was_asked_for():
    from ckinspect.formats.pickle_scan import NOT_DECODED, scan_decoding

    data = pickle.dumps({"a": collections_ordered_dict(), "b": struct.Struct}, protocol=4)
    data = data[:-1] + b"0" + _protocol_4_calling("posix", "system", "true")[2:]  # a second global, by the stack
    scan, value = scan_decoding(data, _Watched)
    assert value is not NOT_DECODED and scan.error is None
    assert [g.qualname for g in scan.globals] == ["collections.OrderedDict", "_struct.Struct", "posix.system"]
    assert [g.kind for g in scan.globals] == ["allowed", "unsafe", "unsafe"]


def test_scan_decoding_takes_the_general_way_when_the_decoder_refuses(monkeypatch):
    from ckinspect.formats.pickle_scan import NOT_DECODED, scan_decoding

    class Refusing(_Watched):
        def find_class(self, module, name):
            super().find_class(module, name)
            raise pickle.UnpicklingError("declined")

    data = _protocol_4_calling("posix", "system", "true")
    scan, value = scan_decoding(data, Refusing)
    assert value is NOT_DECODED and [g.qualname for g in scan.globals] == ["posix.system"]


def collections_ordered_dict():
    import collections

    return collections.OrderedDict(x=1)


_strings = st.text(max_size=300) | st.binary(max_size=300)  # across 48 and 256, the lengths a run may hold


@settings(max_examples=150, deadline=None)
@given(st.lists(_strings | st.integers() | st.none(), max_size=12), st.integers(min_value=0, max_value=5))
def test_the_strings_a_run_steps_over_change_no_answer(items, protocol):
    # the run pattern's length alternatives are a speed choice by pickle size: every choice, same scan
    data = pickle.dumps([items, {"k" * 70: items}, struct.Struct, items], protocol=protocol) + b"cos\nsystem\n."
    answers = []
    for short in (0, 48, 256):
        with run_lengths(short):
            answers.append((scan_pickle(data), scan_stream(data), scan_stream(data[:-3])))
    assert answers[0] == answers[1] == answers[2]
    assert [g.qualname for g in answers[0][1][1].globals] == ["os.system"]
