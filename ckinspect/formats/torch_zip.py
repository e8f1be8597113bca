"""torch.save's default format: a zip holding `<archive>/data.pkl` and one member per storage.

Listing reads the zip directory, the local headers of the storage members (for their absolute
offsets) and data.pkl; storage bytes are never read.
"""

from __future__ import annotations

import os
from itertools import compress
from operator import itemgetter, methodcaller
from pathlib import Path

from ckinspect._native import load as load_native
from ckinspect.formats.opening import reading
from ckinspect.formats.pickle_findings import (
    StorageCollector,
    check_views,
    check_weights_only,
    decode,
    record_globals,
    set_tree,
)
from ckinspect.formats.pickle_scan import NOT_DECODED, PickleScan, mark_torchscript, scan_member, scan_stream
from ckinspect.formats.tree import flatten, no_gc
from ckinspect.formats.unpickler import StorageRef, framework_records, native_scan_and_load, scan_and_load
from ckinspect.io.crc import crc32
from ckinspect.io.reader import PositionedReader
from ckinspect.io.remote import as_path
from ckinspect.io.zipdir import (
    DEFLATED,
    LOCAL,
    LOCAL_SIG,
    STORED,
    ZipError,
    ZipMember,
    data_offset,
    data_offsets,
    find_end,
    local_header_at,
    members_in_order,
    read_directory,
    read_member,
)
from ckinspect.model import Checkpoint, StorageInfo
from ckinspect.record import slot_descriptors
from ckinspect.steps import step

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAX_PICKLE_BYTES = 1 << 30  # a data.pkl beyond this is not a checkpoint we should hold in memory
MAX_INFLATED_PICKLE_BYTES = 64 << 20  # a deflated data.pkl is inflated into memory up to this; beyond, only scanned
MAX_OTHER_PICKLE_BYTES = (
    64 << 20
)  # other pickles up to this are read whole (the allowlist hint reads them); beyond, scanned
MAX_UNINDEXED_PICKLE_BYTES = 256 << 20  # without a directory the pickle's size is unknown: read at most this


@no_gc()  # tens of thousands of small objects without cycles: collector passes are pure overhead
def read_torch_zip(path: str | os.PathLike[str], reader: PositionedReader | None = None) -> Checkpoint:
    """List a torch.save zip. Never raises for bad content:
    problems become CORRUPT / UNSAFE_PICKLE / ALLOWLIST_NEEDED findings; OSError only if it cannot be opened."""
    path = as_path(path)  # a URL stays one: its bytes come from `reader`
    with reading(path, "torch-zip", reader) as (ckpt, opened):
        try:
            read_zip_into(ckpt, opened, path)
        except ZipError as exc:
            ckpt.add("CORRUPT", f"{path.name}: {exc}")
    return ckpt


def read_zip_into(ckpt: Checkpoint, reader: PositionedReader, file: Path, base: int = 0, end: int | None = None,
                  key_prefix: str = "") -> Any:  # fmt: skip
    """Fill ckpt from the torch zip in [base, end) of `file`; returns the decoded tree (also set on ckpt
    when base is 0). Storage keys get `key_prefix` so several zips can share one Checkpoint (DCP)."""
    end = reader.size if end is None else end
    try:
        members, cd_start = read_directory(reader, base, end)
    except ZipError as exc:
        if base == 0 and end == reader.size:
            return _read_without_directory(ckpt, reader, file, str(exc))
        raise
    if base == 0:
        step("entries in the zip directory", len(members))
        _scan_second_directory(ckpt, reader, cd_start, file)
    pkl = _find_data_pkl(members)
    if pkl is None:
        ckpt.add("CORRUPT", f"{file.name}: a zip, but no <archive>/data.pkl in it: not a torch.save checkpoint")
        _scan_other_pickles(ckpt, reader, members, None, cd_start, file)
        return None
    archive = pkl.name[: -len("data.pkl")]
    with reader.planned(_records(reader, members, archive)):  # the pickle, byteorder ...: few requests remotely
        return _read_archive(ckpt, reader, file, members, pkl, cd_start, base, key_prefix)


def _records(reader: PositionedReader, members: list[ZipMember], archive: str) -> list[tuple[int, int]]:
    """Where the records read before the storages' local headers lie (local header, name, torch's padding, data):
    the pickles and the byteorder record. Only where each read is a request (a remote object: io.remote plans
    them into few requests)."""
    if reader.fd is not None:
        return []
    byteorder = archive + "byteorder"
    read = [m for m in compress(members, map(_ENDS_IN_L, map(itemgetter(0), members)))
            if m.name.lower().endswith(".pkl")]  # fmt: skip
    read += [m for m in members if m.name == byteorder]
    return [(m.header_offset, LOCAL.size + len(m.name.encode()) + _PADDING + m.compressed_size) for m in read]


_PADDING = 128  # torch pads a local extra field so that data starts on 64 bytes; a longer one is read as asked


def _read_archive(ckpt: Checkpoint, reader: PositionedReader, file: Path, members: list[ZipMember], pkl: ZipMember,
                  cd_start: int, base: int, key_prefix: str) -> Any:  # fmt: skip
    """read_zip_into from its pickle on: judged, decoded, its storages placed."""
    by_name = {m.name: m for m in members}
    archive = pkl.name[: -len("data.pkl")]
    where = f"{file.name}:{pkl.name}"
    # torch.load hands a zip holding <archive>/constants.pkl to torch.jit.load (_is_torchscript_zip)
    torchscript = base == 0 and archive + "constants.pkl" in by_name
    _mark_torchscript(ckpt, torchscript)
    try:
        data = read_member(reader, pkl, cd_start, _pickle_cap(pkl))
    except ZipError as exc:
        ckpt.add("CORRUPT", f"{where}: {exc}")
        _scan_in_place(ckpt, reader, pkl, cd_start, where, torchscript)
        return None
    recorded = _check_pickle_crc(ckpt, members, pkl, data, file, where)
    _scan_other_pickles(ckpt, reader, members, pkl, cd_start, file, torchscript)
    # every torch.save archive records its own byte order, an embedded one too: a DCP item is one, and
    # dcp.load swaps each item as torch.load swaps a file (.metadata records no byte order of its own)
    big = _read_byteorder(ckpt, reader, by_name.get(archive + "byteorder"), cd_start, file.name)
    tree = _decode_pickle(ckpt, data, where, lambda collector: _storages_from_members(
        ckpt, collector, by_name, archive, reader, file, cd_start, big=big, members=members), key_prefix,
        torchscript)  # fmt: skip
    if not recorded:
        _forget_zero_crcs(ckpt, file)
    if base == 0:
        set_tree(ckpt, tree)
        if torchscript:
            _add_torchscript_constants(ckpt, reader, by_name, archive, cd_start, file)
            _report_code(ckpt, members, archive, file)
    return tree


def _mark_torchscript(ckpt: Checkpoint, torchscript: bool) -> None:
    if torchscript:
        ckpt.format = "torchscript"
        ckpt.metadata["torchscript"] = True


def _check_pickle_crc(ckpt: Checkpoint, members: list[ZipMember], pkl: ZipMember, data: bytes, file: Path,
                      where: str) -> bool:  # fmt: skip
    """Whether the archive records CRCs (CRC_NOT_RECORDED when every one is 0); the pickle's checked if so."""
    recorded = crcs_recorded(members)
    if not recorded:
        ckpt.add("CRC_NOT_RECORDED", f"{file.name}: every CRC-32 in the zip directory is 0, as torch.save writes "
                                     "them under compute_crc32=False: the bytes cannot be checked against them; "
                                     "values are still scanned")  # fmt: skip
    elif crc32(data) != pkl.crc32:
        ckpt.add("CORRUPT", f"{where}: CRC mismatch (the pickle's bytes changed after the save)")
    return recorded


def _forget_zero_crcs(ckpt: Checkpoint, file: Path) -> None:
    for storage in ckpt.storages.values():
        if storage.file == file and storage.crc32 == 0:
            storage.crc32 = None  # nothing recorded to check against
            if storage.deflated is not None:
                storage.deflated = (*storage.deflated[:4], None)


def _read_byteorder(ckpt: Checkpoint, reader: PositionedReader, record: ZipMember | None, cd_start: int,
                    where: str) -> bool:  # fmt: skip
    """Whether the archive's byteorder record says "big", as torch.load reads it: its typed storages are
    then stored byte-swapped (torch swaps them on load); no record means little; anything else torch refuses."""
    if record is None:
        return False
    try:
        raw = read_member(reader, record, cd_start, 16) if record.file_size <= 16 else b"(longer than 16 bytes)"
    except ZipError:  # a damaged record: the directory's checks say so elsewhere
        return False
    ckpt.metadata["byteorder"] = raw.decode("ascii", "replace")
    if raw not in (b"big", b"little"):
        ckpt.add("CORRUPT", f"{where}:{record.name} says {raw[:24]!r}, neither little nor big: "
                            "torch.load refuses the file")  # fmt: skip
    return raw == b"big"


def crcs_recorded(members: list[ZipMember]) -> bool:
    """False when every non-empty member's CRC-32 is 0: torch.save under compute_crc32=False (a real
    CRC of 0 is one in four billion, so one 0 among real CRCs is still damage)."""
    return any(m.crc32 for m in members) or not any(m.file_size for m in members)


def _scan_other_pickles(ckpt: Checkpoint, reader: PositionedReader, members: list[ZipMember], pkl: ZipMember | None,
                        cd_start: int, file: Path, torchscript: bool = False) -> None:  # fmt: skip
    """torch.load reads only data.pkl, but TorchScript archives (constants.pkl) are handed to
    torch.jit.load, and other tools read whatever .pkl they find: scan every pickle in the archive, in
    any case and at any size (duplicates included). constants.pkl of a TorchScript archive is decoded
    later, with its tensors."""
    constants = pkl.name[: -len("data.pkl")] + "constants.pkl" if torchscript and pkl is not None else None
    # only a name ending in "l" or "L" can end in ".pkl" once lowered (no other character lowers to one): that
    # much is tested in C, for each of 50,000 storages, and only those names are lowered
    for member in compress(members, map(_ENDS_IN_L, map(itemgetter(0), members))):
        if member is pkl or member.name == constants or not member.name.lower().endswith(".pkl"):
            continue
        where = f"{file.name}:{member.name}"
        if member.file_size > MAX_OTHER_PICKLE_BYTES:
            _scan_in_place(ckpt, reader, member, cd_start, where, torchscript)
            continue
        try:
            data = read_member(reader, member, cd_start, MAX_OTHER_PICKLE_BYTES)
        except ZipError as exc:
            ckpt.add("CORRUPT", f"{where}: {exc}")
            _scan_in_place(ckpt, reader, member, cd_start, where, torchscript)
            continue
        scans = scan_stream(data)
        if torchscript:
            mark_torchscript(scans)
        record_globals(ckpt, [g for s in scans for g in s.globals], where, data)


_ENDS_IN_L = methodcaller("endswith", ("l", "L"))

# constants.pkl names TorchScript's constants; torch.jit shows them to code as CONSTANTS.c0, c1, ...
TORCHSCRIPT_CONSTANTS = "CONSTANTS"


def _add_torchscript_constants(ckpt: Checkpoint, reader: PositionedReader, by_name: dict[str, ZipMember], archive: str,
                               cd_start: int, file: Path) -> None:  # fmt: skip
    """The tensors of <archive>/constants.pkl (a tuple), whose storages live in <archive>/constants/."""
    member = by_name[archive + "constants.pkl"]
    where = f"{file.name}:{member.name}"
    try:
        data = read_member(reader, member, cd_start, _pickle_cap(member))
    except ZipError as exc:
        ckpt.add("CORRUPT", f"{where}: {exc}")
        _scan_in_place(ckpt, reader, member, cd_start, where, torchscript=True)
        return
    folder = f"{archive}constants/"
    tree = _decode_pickle(ckpt, data, where, lambda collector: _storages_from_members(
        ckpt, collector, by_name, archive, reader, file, cd_start, folder), "constants/", True)  # fmt: skip
    if not isinstance(tree, (tuple, list)):
        return
    named = {f"c{i}": value for i, value in enumerate(tree)}
    ckpt.tensors = ckpt.tensors + flatten(named, TORCHSCRIPT_CONSTANTS)
    check_views(ckpt)
    ckpt.metadata["torchscript_constants"] = len(named)


_MAX_CODE_NAMED = 8


def _report_code(ckpt: Checkpoint, members: list[ZipMember], archive: str, file: Path) -> None:
    """EMBEDDED_CODE: the TorchScript source torch.jit.load compiles, and runs when the model is used."""
    code = [m.name for m in members if m.name.startswith(archive + "code/") and m.name.endswith(".py")]
    if not code:
        return
    shown = ", ".join(code[:_MAX_CODE_NAMED]) + (
        f" and {len(code) - _MAX_CODE_NAMED} more" if len(code) > _MAX_CODE_NAMED else ""
    )
    ckpt.metadata["torchscript_code_files"] = len(code)
    ckpt.add(
        "EMBEDDED_CODE",
        f"{file.name} is a TorchScript archive with {len(code)} code file(s) that torch.jit.load compiles and that "
        f"run when the model is loaded and called: {shown}. Listing it ran none of them.",
    )


def _find_data_pkl(members: list[ZipMember]) -> ZipMember | None:
    """The member torch.load reads as data.pkl: `<archive>/data.pkl` where the archive is the folder of
    the directory's first entry, matched without regard to case (miniz's lookup); else any
    `<folder>/data.pkl` or a bare `data.pkl`. Every other pickle member is scanned too (duplicates included)."""
    if members and "/" in members[0].name:
        wanted = members[0].name.split("/", 1)[0].lower() + "/data.pkl"
        for m in members:
            if m.name.lower() == wanted:
                return m
    candidates = [m for m in members if m.name.lower().endswith("/data.pkl") and m.name.count("/") == 1]
    candidates += [m for m in members if m.name.lower() == "data.pkl"]
    return candidates[0] if candidates else None


def _scan_second_directory(ckpt: Checkpoint, reader: PositionedReader, cd_start: int, file: Path) -> None:
    """A zip whose end record names another directory than its zip64 record: torch (and zipfile) read
    the zip64 one, other readers may not. The pickles the other directory lists are judged too."""
    try:  # where the end record's own directory starts first: the same one (the usual case) is not read twice
        if find_end(reader, 0, reader.size, classic=True)[0] == cd_start:
            return
        members, other_start = read_directory(reader, classic=True)
    except ZipError:
        return
    if other_start == cd_start:
        return
    for member in members:
        if member.name.lower().endswith(".pkl"):
            _scan_in_place(ckpt, reader, member, other_start, f"{file.name}:{member.name} (second zip directory)")


def _scan_in_place(ckpt: Checkpoint, reader: PositionedReader, member: ZipMember, limit: int, where: str,
                   torchscript: bool = False) -> None:  # fmt: skip
    """Scan a member's pickle(s) a window at a time, whatever its size (deflated: up to its declared size)."""
    try:
        start = data_offset(reader, member)
    except ZipError as exc:
        ckpt.add("CORRUPT", f"{where}: {exc}")
        return
    compressed = max(0, min(member.compressed_size, limit - start))
    scans = scan_member(reader, start, compressed, member.file_size, member.compress_type)
    if torchscript:
        mark_torchscript(scans)
    record_globals(ckpt, [g for s in scans for g in s.globals], where)


def _pickle_cap(member: ZipMember) -> int:
    """How much of a member's pickle is held to decode it: never past its declared size (inflation
    stops there), and a deflated one only up to MAX_INFLATED_PICKLE_BYTES; beyond, it is only scanned."""
    return min(member.file_size, MAX_PICKLE_BYTES if member.compress_type == 0 else MAX_INFLATED_PICKLE_BYTES)


def _decode_pickle(ckpt: Checkpoint, data: bytes, where: str, fill_storages, key_prefix: str = "",
                   torchscript: bool = False) -> Any:  # fmt: skip
    collector = StorageCollector(key_prefix)
    scans, tree = _scan_decoding(data, collector, torchscript)
    first: PickleScan = scans[0]
    refs = [g for s in scans for g in s.globals]
    unsafe = record_globals(ckpt, refs, where, data)
    if first.error is not None:
        ckpt.add("CORRUPT", f"{where}: {first.error}")
        return None
    records = framework_records([g.qualname for g in refs if g.kind == "unsafe"]) if unsafe else frozenset()
    if records is None:
        return None
    if tree is NOT_DECODED or unsafe:  # the general way: the scan's findings first, then the restricted unpickler
        collector = StorageCollector(key_prefix)
        tree = decode(ckpt, data, first, where, collector, guarded=records, torchscript=torchscript)
    fill_storages(collector)
    if not key_prefix and not torchscript:  # what torch.load reads (a DCP item or TorchScript is not)
        check_weights_only(ckpt, data, scans[:1], where)
    return tree


def _scan_decoding(data: bytes, collector: StorageCollector, torchscript: bool) -> tuple[list[PickleScan], Any]:
    """Every pickle of `data` scanned, the first one decoded in the same pass of the C unpickler where it names
    nothing outside the allowlist (a protocol 4 pickle's STACK_GLOBAL names would otherwise take a pass of
    their own): (the scans, the tree or NOT_DECODED)."""
    native = native_scan_and_load(data, collector, torchscript, collector.native_storages())
    if native is None:
        collector.storages.clear()  # what a declined compiled pass named: the pure way starts afresh
        first, tree = scan_and_load(data, collector, torchscript)
    else:
        first, tree = native
    scans = [first, *scan_stream(data, first.end)] if first.error is None and first.end < len(data) else [first]
    if torchscript:
        mark_torchscript(scans)
    return scans, tree


def _storages_from_members(ckpt: Checkpoint, collector: StorageCollector, by_name: dict[str, ZipMember], archive: str,
                           reader: PositionedReader, file: Path, cd_start: int, folder: str = "",
                           big: bool = False, members: list[ZipMember] | None = None) -> None:  # fmt: skip
    """Each storage the pickle names, where its member's bytes are (`members`: the directory in its order, where
    the caller has it, so that the storages' members can be found where they lie rather than looked up)."""
    folder = folder or f"{archive}data/"
    found, missing = _storage_members(collector, by_name, folder, members)
    storages = ckpt.storages
    located_all = data_offsets(reader, [member for _, member in found])
    native = load_native("records")
    in_place = native.stored(found, located_all, cd_start, file, big, StorageInfo, _INFO_SLOTS, _REF_SLOTS) if (
        native is not None and type(cd_start) is int) else None  # fmt: skip
    if in_place is not None:  # every storage stored in place, as torch.save writes them: built in C, as below
        storages.update(in_place)
        found = []
    for (ref, member), located in zip(found, located_all if found else [], strict=True):
        name, _header, compress_type, _compressed, file_size, crc32, _flags = member  # one unpack, not six lookups
        if type(located) is int and compress_type == STORED and located + file_size <= cd_start:
            offset, deflated = located, None  # where torch.save puts every storage: its bytes in place
        else:
            offset = None
            _unaddressable(ckpt, file, located, member, cd_start)
            deflated = _deflated_member(located, member, cd_start)
        if file_size < ref.nbytes:
            ckpt.add("CORRUPT", f"{file.name}: storage {name} holds {file_size} bytes "
                                f"but the pickle says {ref.nbytes}")  # fmt: skip
        key = ref.key
        # positional, once per storage; torch.load swaps by the storage's type: an UntypedStorage (uint16, ...) never
        storages[key] = StorageInfo(key, ref.dtype, file_size, file, offset, crc32, name, ref.location,
                                    big and not ref.untyped, deflated)  # fmt: skip
    if missing:
        shown = ", ".join(f"{folder}{k}" for k in missing[:10]) + (" ..." if len(missing) > 10 else "")
        ckpt.add("CORRUPT", f"{file.name}: {len(missing)} storage member(s) named by the pickle are missing: {shown}")


# what records.stored builds and reads: StorageInfo's slots (as its __init__ takes them); StorageRef's key, dtype,
# location, nbytes and untyped
_INFO_SLOTS = slot_descriptors(StorageInfo)
_REF_SLOTS = tuple(vars(StorageRef)[name] for name in ("key", "dtype", "location", "nbytes", "untyped"))


def _storage_members(collector: StorageCollector, by_name: dict[str, ZipMember], folder: str,
                     members: list[ZipMember] | None = None) -> tuple[list[tuple[StorageRef, ZipMember]],
                                                                       list[str]]:  # fmt: skip
    """(storage, its member) for each storage the pickle names, and the keys of those without a member. Where
    `members` lists them one after the other in the pickle's order, as torch.save writes them, and no later member
    bears one of their names, each is the one by_name gives: taken where it lies (zipdir.members_in_order), not
    looked up 50,000 times."""
    start = members_in_order(members, folder, collector.storages) if members is not None else None
    if start is not None:
        refs = collector.storages.values()
        return list(zip(refs, members[start : start + len(refs)], strict=True)), []  # type: ignore[index]
    missing = []
    found: list[tuple[StorageRef, ZipMember]] = []
    for key, ref in collector.storages.items():
        member = by_name.get(folder + key)
        if member is None:
            missing.append(key)
        else:
            found.append((ref, member))
    return found, missing


def _deflated_member(
    located: int | ZipError, member: ZipMember, cd_start: int
) -> tuple[int, int, int, int, int] | None:
    """A storage member a re-zipping tool deflated (torch's miniz inflates it): streamed by io.values."""
    if member.compress_type != DEFLATED or type(located) is not int or located + member.compressed_size > cd_start:
        return None
    return (located, member.compressed_size, 0, member.file_size, member.crc32)


def _unaddressable(ckpt: Checkpoint, file: Path, located: int | ZipError, member: ZipMember, cd_start: int) -> None:
    """A storage member whose bytes cannot be addressed in place: why (a finding unless it is merely deflated)."""
    name, compress_type = member.name, member.compress_type
    if type(located) is not int:
        ckpt.add("CORRUPT", f"{file.name}: {located}")
    if compress_type != STORED:  # compressed by some re-zipping tool
        if compress_type != DEFLATED:  # deflate is the one method torch's reader (miniz) inflates
            ckpt.add("CORRUPT", f"{file.name}: storage {name} uses zip compression method {compress_type}, "
                                "which torch cannot read")  # fmt: skip
    elif type(located) is int and located + member.file_size > cd_start:
        ckpt.add("CORRUPT", f"{file.name}: storage {name} runs past the end of the data")


def _unindexed_pickle(reader: PositionedReader, start: int) -> bytes:
    """data.pkl's bytes from `start` up to its STOP, read in growing pieces (at most
    MAX_UNINDEXED_PICKLE_BYTES); what was read when the pickle does not end within them."""
    want = 1 << 20
    while True:
        data = reader.read_at(start, min(want, MAX_UNINDEXED_PICKLE_BYTES))
        scans = scan_stream(data, limit=1)
        if scans and scans[0].error is None:
            return data[: scans[0].end]
        if (
            not scans
            or not scans[0].truncated
            or start + len(data) >= reader.size
            or want >= MAX_UNINDEXED_PICKLE_BYTES
            or start + scans[0].needed > reader.size
        ):
            return data
        want = max(want * 4, scans[0].needed + (1 << 20))


def _read_without_directory(ckpt: Checkpoint, reader: PositionedReader, file: Path, problem: str) -> Any:
    """No end record (a save cut short): the local headers still say where data.pkl and each
    storage start, and the pickle ends itself with STOP, so list what is there and say what is not."""
    first = local_header_at(reader, 0)
    if first is None or not (first[0] == "data.pkl" or first[0].endswith("/data.pkl")):
        ckpt.add("CORRUPT", f"{file.name}: {problem}")
        return None
    name, start, _flags = first
    archive = name[: -len("data.pkl")]
    data = _unindexed_pickle(reader, start)
    where = f"{file.name}:{name}"

    def fill(collector: StorageCollector) -> None:
        pos = start + len(data)
        complete = 0
        found: dict[str, tuple[int, int]] = {}
        while pos < reader.size:
            header_pos = reader.read_at(pos, 64).find(LOCAL_SIG)
            if header_pos < 0:
                break
            header = local_header_at(reader, pos + header_pos)
            if header is None:
                break
            member, offset, _ = header
            key = member[len(archive) + len("data/") :] if member.startswith(archive + "data/") else None
            length = collector.storages[key].nbytes if key in collector.storages else 0
            if key is not None:
                found[key] = (offset, length)
            pos = offset + length
        for key, ref in collector.storages.items():
            at = found[key][0] if key in found else None
            whole = at is not None and at + ref.nbytes <= reader.size
            complete += whole
            ckpt.storages[ref.key] = StorageInfo(
                key=ref.key,
                dtype=ref.dtype,
                nbytes=ref.nbytes if whole else 0,
                file=file,
                offset=at if whole else None,
                member=f"{archive}data/{key}",
                location=ref.location,
            )
        ckpt.add("CORRUPT", f"{file.name}: {problem}; the save was cut short at {reader.size} bytes: "
                            f"{complete} of {len(collector.storages)} storages are complete")  # fmt: skip

    tree = _decode_pickle(ckpt, data, where, fill)
    if tree is None and not any(f.code == "CORRUPT" for f in ckpt.findings):
        ckpt.add("CORRUPT", f"{file.name}: {problem}")
    set_tree(ckpt, tree)
    return tree
