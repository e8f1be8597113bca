"""The zip layer's compiled loops (ckinspect/_native/zipdir.c) against its Python loops, which stay the oracle:
the central directory's entries and the local headers' data offsets, on torch.save's own files and on directories
built entry by entry (zip64 extras, unrelated extra fields, names that are not UTF-8) and then damaged. The compiled
loop gives the Python loop's answer or declines (None); it declines wherever the Python loop raises."""

from __future__ import annotations

import os
import random
import struct

import pytest
import torch

from ckinspect._native import load
from ckinspect.io import zipdir
from ckinspect.io.reader import FileReader
from ckinspect.io.zipdir import ZIP64_MARK, ZipError, ZipMember
from ckinspect.settings import PURE as PURE_ENV

pytestmark = pytest.mark.core
NATIVE = load("zipdir")
needs_native = pytest.mark.skipif(NATIVE is None, reason="ckinspect._native.zipdir not built")


def test_the_compiled_zip_loops_are_built_where_ci_builds_them():
    if os.environ.get("CKINSPECT_EXPECT_NATIVE") and not os.environ.get(PURE_ENV):
        assert NATIVE is not None, "ckinspect._native.zipdir was not built: `pip install -e .` needs a C compiler"


def _entry(name: bytes, hoff: int, *, extra: bytes = b"", comment: bytes = b"", sizes=(16, 16), crc=0x1234,
           method=0, flags=0, sig=b"PK\x01\x02") -> bytes:  # fmt: skip
    head = struct.pack("<4s4H2H3L5H2L", sig, 45, 45, flags, method, 0, 0, crc, sizes[0], sizes[1], len(name),
                       len(extra), len(comment), 0, 0, 0, hoff)  # fmt: skip
    return head + name + extra + comment


def _zip64(*values: int, size: int | None = None) -> bytes:
    body = struct.pack(f"<{len(values)}Q", *values)
    return struct.pack("<HH", 0x0001, len(body) if size is None else size) + body


OTHER_FIELD = struct.pack("<HH", 0x7075, 3) + b"abc"


def _python(directory: bytes, count: int, base: int = 0) -> list[tuple] | str:
    try:
        return [tuple(m) for m in zipdir._entries(directory, 0, len(directory), count, base)]
    except (ZipError, struct.error) as exc:
        return f"{type(exc).__name__}: {exc}"


@needs_native
def test_well_formed_directories_give_the_python_loops_members():
    entries = [
        _entry(b"archive/data.pkl", 0),
        _entry("archive/data/\u00e9t\u00e9".encode(), 100, comment=b"a comment"),
        _entry(b"archive/data/big", ZIP64_MARK, extra=_zip64(5 << 32), sizes=(16, 16)),
        # an unrelated field before the zip64 one; sizes and offset all marked, taken in order
        _entry(
            b"archive/data/huge",
            ZIP64_MARK,
            extra=OTHER_FIELD + _zip64(7 << 32, 6 << 32, 9 << 32),
            sizes=(ZIP64_MARK, ZIP64_MARK),
        ),
        _entry(b"archive/data/short", ZIP64_MARK, extra=_zip64(), sizes=(ZIP64_MARK, 3)),  # marked, nothing to take
        _entry(b"not utf-8 \xff\xfe", 7, flags=0x800, method=8),
        _entry(b"archive/data/no-zip64", ZIP64_MARK, extra=struct.pack("<HH", 0x7075, 1) + b"x"),
    ]
    directory = b"".join(entries)
    for base in (0, 1 << 40):
        got = NATIVE.central(directory, len(entries), base, ZipMember)
        assert all(type(m) is ZipMember for m in got)
        assert [tuple(m) for m in got] == _python(directory, len(entries), base)
    assert [tuple(m) for m in NATIVE.central(directory, 3, 0, ZipMember)] == _python(directory, 3)  # fewer counted


@needs_native
@pytest.mark.parametrize("seed", range(4))
def test_damaged_directories_are_declined_wherever_the_python_loop_refuses(seed):
    rng = random.Random(seed)
    good = b"".join(  # every third entry's offset in a zip64 extra
        _entry(f"a/data/{i}".encode(), i * 64) if i % 3 else _entry(f"a/data/{i}".encode(), ZIP64_MARK,
                                                                   extra=_zip64(i << 33))
        for i in range(12)
    )  # fmt: skip
    answered = declined = 0
    for _ in range(500):
        directory = bytearray(good)
        for _ in range(rng.randint(1, 4)):  # flip, cut or stretch a few bytes
            action, at = rng.random(), rng.randrange(len(directory))
            if action < 0.6:
                directory[at] = rng.randrange(256)
            elif action < 0.8:
                del directory[at:]
            else:
                directory[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 9)))
            if not directory:
                directory = bytearray(b"PK")
        count = rng.choice([12, 11, 13, 1 << 20])
        got = NATIVE.central(bytes(directory), min(count, len(directory) // 46 + 1), 0, ZipMember)
        expected = _python(bytes(directory), count)
        if got is None:
            declined += 1
        else:
            answered += 1
            assert [tuple(m) for m in got] == expected
    assert answered and declined  # both ways were taken


def test_read_directory_and_data_offsets_agree_on_both_paths(tmp_path, pickle_paths):
    path = tmp_path / "many.pt"
    torch.save({f"w{i}": torch.full((3,), float(i)) for i in range(700)}, path)  # headers span several blocks
    with open(path, "rb") as f:
        reader = FileReader(f.fileno(), os.fstat(f.fileno()).st_size)
        members, cd_start = zipdir.read_directory(reader)
        start, size, count = zipdir.find_end(reader, 0, reader.size)
        assert (cd_start, [tuple(m) for m in members]) == (start, _python(reader.read_at(start, size), count))
        stray = ZipMember("nowhere", members[-1].header_offset + 1, 0, 0, 0, 0, 0)  # not at a local header
        beyond = ZipMember("beyond", reader.size + 10, 0, 0, 0, 0, 0)
        asked = [members[0], stray, *members[1:], beyond, members[5]]
        got = zipdir.data_offsets(reader, asked)
        expected = zipdir._local_offsets(reader, asked)
        assert [str(x) if isinstance(x, ZipError) else x for x in got] == [
            str(x) if isinstance(x, ZipError) else x for x in expected
        ]
        assert str(got[1]) == f"local header of nowhere missing at byte {stray.header_offset}"
        assert str(got[-2]) == f"local header of beyond missing at byte {beyond.header_offset}"


def test_a_damaged_directory_says_the_same_on_both_paths(tmp_path, pickle_paths):
    path = tmp_path / "small.pt"
    torch.save({"a": torch.ones(2), "b": torch.zeros(3)}, path)
    raw = bytearray(path.read_bytes())
    start = raw.rfind(b"PK\x01\x02")  # the last entry's signature
    raw[start + 1] = ord("X")
    path.write_bytes(bytes(raw))
    with open(path, "rb") as f, pytest.raises(ZipError, match=r"zip directory entry \d+ is damaged \(bad signature"):
        zipdir.read_directory(FileReader(f.fileno(), os.fstat(f.fileno()).st_size))


def _by_name(members, folder, keys):
    """What torch_zip looks up one by one: the last member of each name."""
    by_name = {m.name: m for m in members}
    return [by_name.get(folder + key) for key in keys]


@needs_native
def test_members_in_order_are_the_ones_looked_up_by_name():
    rng = random.Random(3)
    for case in range(400):
        keys = {str(k): None for k in rng.sample(range(40), rng.randint(1, 12))}
        run = [ZipMember(f"a/data/{k}", 1000 + i, 0, 4, 4, 0, 0) for i, k in enumerate(keys)]
        before = [ZipMember(n, i, 0, 1, 1, 0, 0) for i, n in enumerate(["a/data.pkl", "a/byteorder", "a/data/"])]
        after = [ZipMember(n, 5000 + i, 0, 1, 1, 0, 0) for i, n in enumerate(["a/version", "a/.data/serialization_id"])]
        roll = rng.random()
        if roll < 0.15:  # a later member of one of their names: by_name gives that one
            after.append(ZipMember(rng.choice(run).name, 9000, 0, 8, 8, 1, 0))
        elif roll < 0.3:  # an earlier one: the run's wins (the first's makes the run be looked up: declined)
            before.append(ZipMember(rng.choice(run).name, 9000, 0, 8, 8, 1, 0))
        elif roll < 0.45 and len(run) > 1:  # out of order
            i = rng.randrange(len(run) - 1)
            run[i], run[i + 1] = run[i + 1], run[i]
        elif roll < 0.55:  # one missing
            run.pop(rng.randrange(len(run)))
        elif roll < 0.6:  # another folder
            run = [m._replace(name=m.name.replace("a/data/", "b/data/")) for m in run]
        members = before + run + after
        start = NATIVE.in_order(members, "a/data/", keys)
        if start is not None:
            assert members[start : start + len(keys)] == _by_name(members, "a/data/", keys), case
        elif roll >= 0.6 or 0.15 <= roll < 0.3 and before[-1].name != run[0].name:
            raise AssertionError(f"case {case}: a plain run was not taken")
    assert NATIVE.in_order([], "a/data/", {"0": 1}) is None and NATIVE.in_order(members, "a/data/", {}) is None


def test_a_storage_member_named_twice_is_the_later_one_on_both_paths(tmp_path, pickle_paths):
    """A zip that carries `archive/data/0` again after the rest (a re-zipping tool, a hostile edit): torch_zip
    takes the last member of each name, whether its members are found in order or looked up one by one."""
    import zipfile

    from ckinspect.formats.torch_zip import read_torch_zip

    path = tmp_path / "twice.pt"
    torch.save({"a": torch.ones(4), "b": torch.zeros(2)}, path)
    with zipfile.ZipFile(path) as z:
        storage = next(n for n in z.namelist() if n.endswith("/data/0"))
    with zipfile.ZipFile(path, "a") as z:
        z.writestr(storage, b"\x00" * 64)
    ckpt = read_torch_zip(path)
    info = next(s for s in ckpt.storages.values() if s.member == storage)
    with zipfile.ZipFile(path) as z:
        last = [i for i in z.infolist() if i.filename == storage][-1]
    assert (info.nbytes, info.crc32) == (last.file_size, last.CRC)


@pytest.mark.skipif(load("records") is None, reason="ckinspect._native.records not built")
def test_storages_stored_in_place_are_built_as_the_loop_builds_them(tmp_path):
    """records.stored (torch_zip's storages built in C) against _storages_from_members' own loop on storages
    stored in place, deflated, located past the directory, without a local header, shorter than their storage,
    of huge sizes, typed and untyped in a big-endian archive: the same StorageInfo where every storage is in
    place, None (the loop then runs) as soon as one is not."""
    from pathlib import Path

    from ckinspect.formats import torch_zip
    from ckinspect.formats.pickle_findings import StorageCollector
    from ckinspect.formats.unpickler import StorageRef
    from ckinspect.model import Checkpoint, StorageInfo

    native = load("records")
    rng = random.Random(5)
    file = Path("x.pt")
    taken = 0
    for case in range(300):
        found, located = [], []
        odd = case % 2  # every other case may hold storages that are not in place
        for i in range(rng.randint(1, 6)):
            dtype, nbytes, untyped = rng.choice(["float32", "uint8"]), rng.choice([0, 4, 16]), rng.random() < 0.3
            ref = StorageRef(f"p/{i}", dtype, "cpu", nbytes, untyped)
            size = rng.choice([16, 16, 16, 4, 1 << 70] if odd else [16, 20])
            method = rng.choice([0, 0, 0, 8] if odd else [0])
            found.append((ref, ZipMember(f"a/data/{i}", 64 * i, method, size, size, rng.randrange(1 << 32), 0)))
            at = 128 * i + 64
            located.append(rng.choice([at, at, ZipError("no local header"), 1 << 40] if odd else [at]))
        cd_start, big = 100_000, rng.random() < 0.5
        built = native.stored(found, located, cd_start, file, big, StorageInfo, torch_zip._INFO_SLOTS,
                              torch_zip._REF_SLOTS)  # fmt: skip
        collector = StorageCollector()
        collector.storages = {ref.key: ref for ref, _ in found}
        expected = Checkpoint(path=file, format="torch-zip", file_bytes=1 << 20)
        # the loop, on the same pairs and offsets: the C pass declines, data_offsets gives `located`
        with pytest.MonkeyPatch.context() as m:
            m.setattr(torch_zip, "load_native", lambda name: None)
            m.setattr(torch_zip, "_storage_members", lambda *_, pairs=found: (pairs, []))
            m.setattr(torch_zip, "data_offsets", lambda reader, members, offsets=located: offsets)
            torch_zip._storages_from_members(expected, collector, {}, "a/", None, file, cd_start, big=big)
        if built is None:
            assert expected.findings or any(s.offset is None for s in expected.storages.values()), case
        else:
            taken += 1
            assert not expected.findings, case
            assert list(built) == list(expected.storages), case
            assert [s._values() for s in built.values()] == [s._values() for s in expected.storages.values()], case
    assert 20 < taken < 280  # both ways were taken
