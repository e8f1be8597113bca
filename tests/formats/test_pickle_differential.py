"""The static scan against CPython's own unpickler, on generated opcode streams.

For every stream, pickle.py's `_Unpickler` runs with a `find_class` that records what it is asked
for and hands back an inert stand-in. The scan must name exactly those globals, in the same order
(each once), up to the point where CPython stops; when CPython reads the stream to its STOP, the
scan names nothing more. After a stop the scan may name more (it cannot know what a real global
would have returned there, so it keeps looking): reporting too much is allowed, too little never.

Each stream goes through both ways the scan resolves STACK_GLOBAL names: CPython's own unpickler with
inert stand-ins (a pickle held in memory) and the scan's own stack walk (a stream read a window at a
time); and through the compiled pass (ckinspect/_native/pickle_walk.c), which must give scan_decoding's
exact scan wherever it does not decline (run_by_hand under CKINSPECT_PURE=1 and without covers both
paths). Random streams are mostly broken (they test where CPython stops); well-formed pickles (every
opcode applies to what the stack holds, names hidden behind the memo, DUP and marks) test the exact
answer, and are the ones CPython's unpickler reads to STOP.

CI runs DIFFERENTIAL_EXAMPLES (2,000) streams of each kind; `CKINSPECT_DIFFERENTIAL_EXAMPLES=100000` runs
more by hand (see tests/formats/run_differential.sh).
"""

from __future__ import annotations

import copyreg
import io
import os
import pickle
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckinspect.formats.pickle_findings import torch_unreadable_opcodes
from ckinspect.formats.pickle_scan import (
    ALLOWED,
    NOT_DECODED,
    BufferSource,
    native_decoding,
    normalize,
    scan_decoding,
    scan_pickle,
    scan_source,
)
from tests.formats.pickle_bytes import run_lengths

DIFFERENTIAL_EXAMPLES = int(os.environ.get("CKINSPECT_DIFFERENTIAL_EXAMPLES", "2000"))

NAMES = ["os", "system", "posix", "collections", "OrderedDict", "builtins", "eval", "__builtin__", "copy_reg",
         "_reconstructor", "torch._utils", "_rebuild_tensor_v2", "subprocess", "Popen", "a.b", ""]  # fmt: skip
# extension codes registered for the run (EXT opcodes resolve through copyreg's registry)
EXTENSIONS = {0xF1: ("os", "system"), 0x1F2: ("collections", "OrderedDict"), 0x7FFF_0001: ("posix", "system")}
EXT_CODES = [*EXTENSIONS, 0xF3, 0]


class _Inert:
    """What the recording find_class hands back: accepts every call the opcodes can make on it."""

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __setstate__(self, state) -> None:
        pass

    def __setitem__(self, key, value) -> None:
        pass

    def append(self, value) -> None:
        pass

    def extend(self, values) -> None:
        pass

    def add(self, value) -> None:
        pass


class Recorder(pickle._Unpickler):  # type: ignore[name-defined]
    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.asked: list[tuple[str, str]] = []

    def find_class(self, module, name):
        self.asked.append((module, name))
        return type("Inert", (_Inert,), {})

    def persistent_load(self, pid):
        return _Inert()


def cpython_globals(data: bytes) -> tuple[list[tuple[str, str]], bool]:
    """(globals find_class was asked for, first appearance first, under Python 3 names; read to STOP?)"""
    copyreg._extension_cache.clear()  # type: ignore[attr-defined]  # so every run asks find_class afresh
    recorder = Recorder(data)
    try:
        recorder.load()
        complete = True
    except BaseException:  # noqa: BLE001 - whatever stops CPython stops the comparison there
        complete = False
    seen: list[tuple[str, str]] = []
    for module, name in recorder.asked:
        key = normalize(module, name)
        if key not in seen:
            seen.append(key)
    return seen, complete


def _line(text: str) -> bytes:
    return text.encode() + b"\n"


def _string(op: int, text: str) -> bytes:
    raw = text.encode()
    if op == 0:
        return b"\x8c" + bytes([len(raw)]) + raw  # SHORT_BINUNICODE
    if op == 1:
        return b"X" + struct.pack("<I", len(raw)) + raw  # BINUNICODE
    if op == 2:
        return b"\x8d" + struct.pack("<Q", len(raw)) + raw  # BINUNICODE8
    if op == 3:
        return b"V" + _line(text)  # UNICODE
    if op == 4:
        return b"S" + _line(repr(text))  # STRING
    if op == 5:
        return b"U" + bytes([len(raw)]) + raw  # SHORT_BINSTRING
    return b"T" + struct.pack("<i", len(raw)) + raw  # BINSTRING


_SIMPLE = [b"(", b"0", b"1", b"2", b"N", b"]", b"}", b")", b"\x8f", b"\x88", b"t", b"\x85", b"\x86", b"\x87",
           b"l", b"d", b"a", b"e", b"s", b"u", b"\x90", b"\x91", b"R", b"\x81", b"\x92", b"b", b"o", b"\x93",
           b"\x94", b"Q", b"K\x07", b"C\x02ab"]  # fmt: skip
_memo_index = st.integers(0, 6)
op = st.one_of(
    st.sampled_from(_SIMPLE),
    st.sampled_from(_SIMPLE[:4] + [b"\x93", b"\x94"]),  # the opcodes whose semantics matter most, more often
    st.builds(_string, st.integers(0, 6), st.sampled_from(NAMES)),
    st.builds(lambda m, n: b"c" + _line(m) + _line(n), st.sampled_from(NAMES), st.sampled_from(NAMES)),
    st.builds(lambda m, n: b"i" + _line(m) + _line(n), st.sampled_from(NAMES), st.sampled_from(NAMES)),
    st.builds(lambda i: b"q" + bytes([i]), _memo_index),
    st.builds(lambda i: b"r" + struct.pack("<I", i), _memo_index),
    st.builds(lambda i: b"p" + _line(str(i)), _memo_index),
    st.builds(lambda i: b"h" + bytes([i]), _memo_index),
    st.builds(lambda i: b"j" + struct.pack("<I", i), _memo_index),
    st.builds(lambda i: b"g" + _line(str(i)), _memo_index),
    st.builds(
        lambda c: (
            b"\x82" + bytes([c & 0xFF])
            if c < 256
            else b"\x83" + struct.pack("<H", c)
            if c < 65536
            else b"\x84" + struct.pack("<i", c)
        ),
        st.sampled_from(EXT_CODES),
    ),  # fmt: skip
    st.builds(lambda p: b"P" + _line(p), st.sampled_from(["x", "1"])),
)


@st.composite
def streams(draw) -> bytes:
    proto = draw(st.sampled_from([None, 0, 1, 2, 3, 4, 5]))
    body = b"".join(draw(st.lists(op, max_size=40)))
    head = b"" if proto is None else b"\x80" + bytes([proto])
    tail = draw(st.sampled_from([b".", b".", b".", b"", b".c\nos\nsystem\n"]))
    cut = draw(st.sampled_from([None, None, None, None, 1, 2, 5]))
    data = head + body + tail
    return data[:-cut] if cut else data


def setup_module() -> None:
    for code, (module, name) in EXTENSIONS.items():
        copyreg.add_extension(module, name, code)


def teardown_module() -> None:
    for code, (module, name) in EXTENSIONS.items():
        copyreg.remove_extension(module, name, code)


class AcceptingDecoder(pickle.Unpickler):
    """A decoder for scan_decoding that builds whatever the pickle asks for out of inert stand-ins."""

    def __init__(self, file) -> None:
        super().__init__(file, fix_imports=False, encoding="utf-8", errors="surrogateescape")
        self.asked: list[tuple[str, str]] = []

    def find_class(self, module, name):
        self.asked.append((module, name))
        return type("Inert", (_Inert,), {})

    def persistent_load(self, pid):
        return _Inert()


class AllowlistDecoder(AcceptingDecoder):
    """One that refuses every global outside torch's default set (as dcp_metadata's decoder refuses
    anything DCP's writer does not emit): the scan then takes its general way."""

    def find_class(self, module, name):
        found = super().find_class(module, name)
        if ".".join(normalize(module, name)) not in ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} declined")
        return found


def _decoded(data: bytes, decoder: type[pickle.Unpickler]) -> list[tuple[str, str]]:
    scan, value = scan_decoding(data, decoder)
    if value is not NOT_DECODED:  # decoded: read to its STOP, within bounds
        assert scan.error is None and scan.memo_error is None and 0 < scan.end <= len(data), data
    return [(g.module, g.name) for g in scan.globals]


def _facts(scan) -> tuple:
    names = [(g.module, g.name, g.kind, g.opcode) for g in scan.globals]
    return (names, scan.start, scan.end, scan.error, scan.protocol, scan.stack_globals, scan.truncated, scan.needed,
            scan.memo_error, scan.torch_opcodes)  # fmt: skip


def _native(data: bytes, decoder: type[pickle.Unpickler]) -> list[tuple[str, str]]:
    """The compiled pass (ckinspect/_native/pickle_walk.c) where it is built and does not decline: it must give
    exactly scan_decoding's scan, and decode only what scan_decoding decodes; where it declines (or under
    CKINSPECT_PURE=1), what its caller falls back to."""
    finder = decoder(io.BytesIO(b""))
    got = native_decoding(data, finder.find_class, finder.persistent_load)
    if got is None:
        return _decoded(data, decoder)
    pure, value = scan_decoding(data, decoder)
    assert value is not NOT_DECODED, data
    assert _facts(got[0]) == _facts(pure), data
    return [(g.module, g.name) for g in got[0].globals]


def scans(data: bytes) -> dict[str, list[tuple[str, str]]]:
    """The globals each of the scan's ways of resolving STACK_GLOBAL names: CPython's unpickler (a pickle
    held in memory), the scan's own stack walk (a stream read a window at a time), and scan_decoding with a
    decoder that accepts everything (the names are the ones it was asked for) or only torch's allowlist
    (the scan's general way for whatever it refuses)."""
    windowed = scan_source(lambda offset: BufferSource(data, offset), len(data), limit=1)
    ways = {
        "cpython": [(g.module, g.name) for g in scan_pickle(data).globals],
        "stack walk": [(g.module, g.name) for g in windowed[0].globals] if windowed else [],
        "decoding": _decoded(data, AcceptingDecoder),
        "decoding, allowlist only": _decoded(data, AllowlistDecoder),
        "compiled pass": _native(data, AcceptingDecoder),
        "compiled pass, allowlist only": _native(data, AllowlistDecoder),
    }
    for short in (48, 256):  # a pickle this small is walked with no string in the run: the big ones' runs too
        with run_lengths(short):
            again = scan_source(lambda offset: BufferSource(data, offset), len(data), limit=1)
            ways[f"cpython, runs of strings under {short}"] = [(g.module, g.name) for g in scan_pickle(data).globals]
            ways[f"stack walk, runs of strings under {short}"] = (
                [(g.module, g.name) for g in again[0].globals] if again else []
            )
    return ways


def check(data: bytes) -> None:
    expected, complete = cpython_globals(data)
    for way, got in scans(data).items():
        if complete:
            assert got == expected, (way, data)
        else:
            assert got[: len(expected)] == expected, (way, data)
    check_torch_opcodes(data)


def check_torch_opcodes(data: bytes) -> None:
    """A pickle the walk read to its STOP keeps to torch's opcodes (PickleScan.torch_opcodes, which spares the
    weights_only check its own walk) exactly when that walk finds none torch lacks; in memory and windowed alike."""
    windowed = scan_source(lambda offset: BufferSource(data, offset), len(data), limit=1)
    for scan in [scan_pickle(data), *windowed[:1]]:
        if scan.error is None:
            lacking = torch_unreadable_opcodes(data, scan.start, scan.end)
            assert scan.torch_opcodes == (lacking == []), (lacking, data)


_SLOW_OK = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]


@pytest.mark.slow  # 2,000 streams through the scan and CPython's unpickler: ~35 s on 2 busy cores
@settings(max_examples=DIFFERENTIAL_EXAMPLES, deadline=None, derandomize=DIFFERENTIAL_EXAMPLES <= 2000,
          suppress_health_check=_SLOW_OK)  # fmt: skip
@given(streams())
def test_the_scan_names_what_cpython_asks_find_class_for(data):
    check(data)


def test_pop_after_mark_pops_the_mark_as_cpython_does():
    # MARK POP: CPython pops the mark, so "posix" and "system" are the two strings STACK_GLOBAL takes
    data = b"\x80\x04\x8c\x05posix\x8c\x06system(0\x93)R."
    expected, _ = cpython_globals(data)
    assert expected == [("posix", "system")]
    scan = scan_pickle(data)
    assert [(g.module, g.name, g.kind) for g in scan.globals] == [("posix", "system", "unsafe")]


def test_ext_codes_resolve_through_copyreg():
    data = b"\x80\x02\x82\xf1)R."
    scan = scan_pickle(data)
    assert [(g.module, g.name, g.kind, g.opcode) for g in scan.globals] == [("os", "system", "unsafe", "EXT")]
    assert cpython_globals(data)[0] == [("os", "system")]
    unregistered = scan_pickle(b"\x80\x02\x82\xf3)R.")
    assert [(g.name, g.kind) for g in unregistered.globals] == [("<extension code 243>", "unsafe")]


def test_a_cut_pickle_still_names_what_came_before_the_cut():
    data = b"\x80\x04\x8c\x02os\x8c\x06system\x93\x8c\x02ls\x85R"  # no STOP: CPython still ran os.system
    scan = scan_pickle(data)
    assert scan.truncated and [(g.module, g.name) for g in scan.globals] == [("os", "system")]


def random_stream(rng) -> bytes:
    """The same opcode alphabet as `streams()`, drawn with `random` (for runs of 100,000 and more by hand,
    where hypothesis's own bookkeeping would cost more than the comparison)."""
    parts = []
    if rng.random() < 6 / 7:
        parts.append(b"\x80" + bytes([rng.randrange(6)]))
    for _ in range(rng.randrange(41)):
        kind = rng.randrange(13)
        name, other, index = rng.choice(NAMES), rng.choice(NAMES), rng.randrange(7)
        if kind == 0:
            parts.append(rng.choice(_SIMPLE))
        elif kind == 1:
            parts.append(rng.choice(_SIMPLE[:4] + [b"\x93", b"\x94"]))
        elif kind in (2, 3):
            parts.append(_string(rng.randrange(7), name))
        elif kind == 4:
            parts.append(rng.choice([b"c", b"i"]) + _line(name) + _line(other))
        elif kind == 5:
            parts.append(rng.choice([b"q" + bytes([index]), b"r" + struct.pack("<I", index), b"p" + _line(str(index))]))
        elif kind == 6:
            parts.append(rng.choice([b"h" + bytes([index]), b"j" + struct.pack("<I", index), b"g" + _line(str(index))]))
        elif kind == 7:
            code = rng.choice(EXT_CODES)
            parts.append(b"\x82" + bytes([code & 0xFF]) if code < 256 else b"\x83" + struct.pack("<H", code)
                         if code < 65536 else b"\x84" + struct.pack("<i", code))  # fmt: skip
        elif kind == 8:
            parts.append(b"P" + _line(rng.choice(["x", "1"])))
        else:
            parts.append(rng.choice(_SIMPLE))
    data = b"".join(parts) + rng.choice([b".", b".", b".", b"", b".c\nos\nsystem\n"])
    cut = rng.choice([0, 0, 0, 0, 1, 2, 5])
    return data[:-cut] if cut else data


def run_by_hand(count: int, seed: int = 0) -> int:
    """`count` random streams and `count` well-formed pickles through check(); prints progress; returns
    how many were compared."""
    import random

    rng = random.Random(seed)
    setup_module()
    try:
        for n in range(1, count + 1):
            for data in (random_stream(rng), wellformed_stream(rng)):
                try:
                    check(data)
                except AssertionError:
                    print(f"MISMATCH after {n} streams: {data!r}")
                    raise
            if n % 10_000 == 0:
                print(f"{n} random streams and {n} well-formed pickles: scan == CPython", flush=True)
    finally:
        teardown_module()
    return 2 * count


class _Wellformed:
    """Well-formed pickles from a random source: every opcode applies to what the stack holds, so CPython
    reads them to STOP and the scan resolves their STACK_GLOBALs through CPython's own unpickler. The names
    come through the memo, DUP, MARK ... POP_MARK and POP, as a hostile pickle would hide them."""

    def __init__(self, rng) -> None:
        self.rng = rng
        self.memo: list[str] = []  # per memo slot: "str" or "obj"
        self.budget = rng.randrange(1, 30)

    def put(self, kind: str) -> bytes:
        if self.rng.random() < 0.5:
            return b""
        index = len(self.memo)
        self.memo.append(kind)
        form = self.rng.randrange(4)
        if form == 0 and index < 256:
            return b"q" + bytes([index])
        if form == 1:
            return b"r" + struct.pack("<I", index)
        if form == 2:
            return b"p" + _line(str(index))
        return b"\x94"

    def get(self, index: int) -> bytes:
        form = self.rng.randrange(3)
        if form == 0 and index < 256:
            return b"h" + bytes([index])
        if form == 1:
            return b"j" + struct.pack("<I", index)
        return b"g" + _line(str(index))

    def string(self) -> bytes:
        known = [i for i, kind in enumerate(self.memo) if kind == "str"]
        if known and self.rng.random() < 0.3:
            return self.get(self.rng.choice(known))
        return _string(self.rng.randrange(7), self.rng.choice(NAMES)) + self.put("str")

    def global_(self) -> bytes:
        rng = self.rng
        form = rng.randrange(5)
        if form == 0:
            return b"c" + _line(rng.choice(NAMES)) + _line(rng.choice(NAMES)) + self.put("obj")
        if form == 1:  # DUP: the same string as module and name
            return self.string() + b"2\x93" + self.put("obj")
        module = self.string()
        between = b""
        if form == 2:  # a frame pushed and dropped between the two names
            between = b"(" + self.value()
            between += self.value() + b"1"
        name = self.string()
        after = self.value() + b"0" if form == 3 else b""  # a value pushed and popped after them
        return module + between + name + after + b"\x93" + self.put("obj")

    def value(self) -> bytes:
        self.budget -= 1
        rng = self.rng
        if self.budget <= 0:
            return rng.choice([b"N", b"K\x07", b"\x88", b")", b"C\x02ab"]) + self.put("obj")
        form = rng.randrange(10)
        if form == 0:
            return self.string()
        if form == 1:
            return self.global_()
        if form == 2:  # global(*args)
            return self.global_() + self.tuple_() + rng.choice([b"R", b"\x81"]) + self.put("obj")
        if form == 3:  # global(*args) with its state set
            return self.global_() + self.tuple_() + b"R" + self.value() + b"b" + self.put("obj")
        if form == 4:
            return b"]" + self.put("obj") + b"(" + self.value() + self.value() + b"e" + self.value() + b"a"
        if form == 5:
            head = b"}" + self.put("obj") + b"(" + self.string() + self.value() + b"u"
            return head + self.string() + self.value() + b"s"
        if form == 6:
            return self.value() + b"Q" + self.put("obj")  # a persistent id
        if form == 7:
            return b"(" + self.value() + b"i" + _line(rng.choice(NAMES)) + _line(rng.choice(NAMES)) + self.put("obj")
        if form == 8 and self.memo:
            return self.get(rng.randrange(len(self.memo)))
        return self.tuple_()

    def tuple_(self) -> bytes:
        count = self.rng.randrange(5)
        items = b"".join(self.value() for _ in range(count))
        end = b"t" if count == 4 else self.rng.choice([b"t", b")\x85\x86\x87"[count : count + 1]])
        return (b"(" + items + end if end == b"t" else items + end) + self.put("obj")


def wellformed_stream(rng) -> bytes:
    proto = rng.choice([b"", b"\x80\x02", b"\x80\x04", b"\x80\x05"])
    return proto + _Wellformed(rng).value() + b"."


@pytest.mark.slow
@settings(max_examples=DIFFERENTIAL_EXAMPLES, deadline=None, derandomize=DIFFERENTIAL_EXAMPLES <= 2000,
          suppress_health_check=_SLOW_OK)  # fmt: skip
@given(st.randoms(use_true_random=False))
def test_the_scan_names_what_cpython_asks_find_class_for_on_wellformed_pickles(rng):
    data = wellformed_stream(rng)
    assert cpython_globals(data)[1], data  # CPython reads it to STOP: the comparison is exact
    check(data)
