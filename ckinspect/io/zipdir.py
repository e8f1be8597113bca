"""The one zip layer: the record layouts (APPNOTE.TXT), the central directory reader for torch
checkpoints, local headers, and member bytes. Every reader of a zip in ckinspect goes through here;
`zipwalk` walks the same records front to back when the directory is gone.

The directory gives names, sizes, CRCs and where each member's bytes start, without reading any
member. zipfile would do for whole files, but torch.distributed.checkpoint puts torch.save zips back
to back inside one .distcp file, and torch.save zips are read here with positioned reads (no mmap,
so a file truncated while we look cannot SIGBUS us); on 50,000 members this is 3x faster than
zipfile. Members are addressed absolutely: `data_offset` is the file position of the member's first
byte (torch stores members uncompressed and 64-byte aligned).
"""

from __future__ import annotations

import struct
import zlib
from collections import namedtuple
from collections.abc import Iterator, Mapping

from ckinspect._native import load as load_native
from ckinspect.io.crc import crc32
from ckinspect.io.reader import PositionedReader, ReadError

# record signatures
LOCAL_SIG = b"PK\x03\x04"
CENTRAL_SIG = b"PK\x01\x02"
DESCRIPTOR_SIG = b"PK\x07\x08"
EOCD_SIG = b"PK\x05\x06"
EOCD64_SIG = b"PK\x06\x06"
EOCD64_LOCATOR_SIG = b"PK\x06\x07"
ZIP64_EXTRA_TAG = 0x0001
ZIP64_MARK = 0xFFFFFFFF  # a 32-bit field whose real value is in the zip64 extra field
STORED, DEFLATED = 0, 8  # the two methods torch's reader (miniz) handles
FLAG_ENCRYPTED, FLAG_DESCRIPTOR, FLAG_UTF8 = 0x1, 0x8, 0x800

_EOCD = struct.Struct("<4s4H2LH")  # end of central directory record, 22 bytes
_EOCD64_LOCATOR = struct.Struct("<4sLQL")  # 20 bytes
_EOCD64 = struct.Struct("<4sQ2H2L4Q")  # 56 bytes
_CENTRAL = struct.Struct("<4s4B4HL2L5H2L")  # 46 bytes
# the same entry, only the fields read: signature, flags, method, crc, sizes, name/extra/comment lengths, header offset
_CENTRAL_USED = struct.Struct("<4s4xHH4xLLLHHH8xL")
# local file header, 30 bytes: signature, version, flags, method, time, date, crc, compressed size, size,
# name length, extra length
LOCAL = struct.Struct("<4sHHHHHLLLHH")
_LOCAL_LENGTHS = struct.Struct("<4s22xHH")  # signature, name length, extra length
DESCRIPTOR32 = struct.Struct("<4sLLL")  # data descriptor: signature, crc, compressed size, size (16 bytes)
DESCRIPTOR64 = struct.Struct("<4sLQQ")  # the zip64 form (24 bytes)
_EXTRA_FIELD = struct.Struct("<HH")  # tag, length
_MAX_COMMENT = 0xFFFF
_CHUNK = 1 << 22


ZipError = ReadError  # the zip layer's name for the one error root of positioned reads (io.reader)


class ZipMember(namedtuple("ZipMember", "name header_offset compress_type compressed_size file_size crc32 flags")):
    """One central directory entry; a tuple, as 50,000 of them are built per listing.

    `header_offset` is the absolute position of the local header; `compress_type` 0 is stored, 8 deflated.
    """

    __slots__ = ()


def find_end(reader: PositionedReader, base: int, end: int, classic: bool = False) -> tuple[int, int, int]:
    """(central directory start, its size, entry count) for a zip occupying [base, end) of the file.

    As torch's reader (miniz) and Python's zipfile do, a zip64 end record that a locator right before
    the end record points at wins, whether or not the end record's fields say so; `classic` reads the
    end record's own fields instead (unless they are zip64 marks), to find a second directory there."""
    if end - base < _EOCD.size:
        raise ZipError(f"{end - base} bytes is too short for a zip")
    tail, tail_start, pos = _end_record(reader, base, end)
    _sig, _disk, _cd_disk, _n_disk, count, cd_size, cd_offset, _clen = _EOCD.unpack_from(tail, pos)
    eocd_abs = tail_start + pos
    marked = count == 0xFFFF or cd_size == ZIP64_MARK or cd_offset == ZIP64_MARK
    zip64 = _zip64_end(reader, base, eocd_abs) if marked or not classic else None
    if zip64 is not None:
        count, cd_size, cd_offset, eocd_abs = zip64
    elif marked:
        raise ZipError("zip64 end-of-directory locator or record missing")
    cd_start = base + cd_offset
    if cd_start + cd_size > eocd_abs:
        # zipfile's rule for data prepended to a zip: the directory ends where the end record starts
        cd_start = eocd_abs - cd_size
    if cd_start < base:
        raise ZipError(f"zip directory claims {cd_size} bytes before byte {eocd_abs}, more than the zip holds")
    return cd_start, cd_size, count


def _end_record(reader: PositionedReader, base: int, end: int) -> tuple[bytes, int, int]:
    """(the tail read, where it starts, the end record's position in it); ZipError when there is none.
    torch writes no archive comment, so the end record sits in the last few hundred bytes; only a zip
    with a comment needs the full 64 KiB search (which, per DCP item, would add up)."""
    for reach in (1024, _EOCD.size + _MAX_COMMENT):
        tail_start = max(base, end - reach)
        tail = reader.read_at(tail_start, end - tail_start)
        pos = tail.rfind(EOCD_SIG)
        while pos >= 0 and pos + _EOCD.size > len(tail):
            pos = tail.rfind(EOCD_SIG, 0, pos)
        if pos >= 0 or tail_start == base:
            break
    if pos < 0:
        raise ZipError("no zip end-of-directory record: the file is truncated or is not a zip")
    return tail, tail_start, pos


def _zip64_end(reader: PositionedReader, base: int, eocd_abs: int) -> tuple[int, int, int, int] | None:
    """(count, directory size, directory offset, record position) of the zip64 end record the locator
    just before the end record at `eocd_abs` points at; None when there is no such locator or record."""
    if eocd_abs - _EOCD64_LOCATOR.size < base:
        return None
    locator = reader.read_at(eocd_abs - _EOCD64_LOCATOR.size, _EOCD64_LOCATOR.size)
    sig, _disk, eocd64_rel, disks = _EOCD64_LOCATOR.unpack(locator)
    if sig != EOCD64_LOCATOR_SIG:
        return None
    rec = reader.read_at(base + eocd64_rel, _EOCD64.size)
    if len(rec) < _EOCD64.size or rec[:4] != EOCD64_SIG:
        return None  # miniz then reads the end record's own fields (and fails when they are zip64 marks)
    if disks != 1:
        raise ZipError(f"the zip64 locator counts {disks} disks: a multi-disk zip, which torch does not read")
    fields = _EOCD64.unpack(rec)
    return fields[7], fields[8], fields[9], base + eocd64_rel


def read_directory(reader: PositionedReader, base: int = 0, end: int | None = None,
                   classic: bool = False) -> tuple[list[ZipMember], int]:  # fmt: skip
    """Every member of the zip in [base, end), plus where the central directory starts (`classic`:
    the directory the end record itself names, see find_end)."""
    if end is None:
        end = reader.size
    cd_start, cd_size, count = find_end(reader, base, end, classic)
    directory = reader.read_at(cd_start, cd_size)
    if len(directory) < cd_size:
        raise ZipError(f"zip directory cut short: {len(directory)} of {cd_size} bytes")
    native = load_native("zipdir")
    if native is not None and len(directory) == cd_size:
        # the loop below in C (ckinspect/_native/zipdir.c); None where an entry is not whole and well-formed: the
        # loop then says what is wrong. More entries than the directory can hold fail there too.
        found = native.central(directory, min(count, cd_size // _CENTRAL.size + 1), base, ZipMember)
        if found is not None:
            return found, cd_start
    return _entries(directory, cd_start, cd_size, count, base), cd_start


def _entries(directory: bytes, cd_start: int, cd_size: int, count: int, base: int) -> list[ZipMember]:
    """The directory's entries, one at a time (the compiled loop's oracle, and the one that names damage)."""
    members = []
    pos = 0
    unpack = _CENTRAL_USED.unpack_from
    entry_size = _CENTRAL.size
    new_member = tuple.__new__  # ZipMember(...) without its Python-level __new__: one per member, 50,000 of them
    for index in range(count):
        if pos + entry_size > cd_size:
            raise ZipError(f"zip directory ends after {index} of {count} entries")
        sig, flags, method, crc, csize, usize, nlen, xlen, clen, hoff = unpack(directory, pos)
        if sig != CENTRAL_SIG:
            raise ZipError(f"zip directory entry {index} is damaged (bad signature at byte {cd_start + pos})")
        name_end = pos + entry_size + nlen
        name = directory[pos + entry_size : name_end].decode("utf-8", "replace")
        if xlen and (usize == ZIP64_MARK or csize == ZIP64_MARK or hoff == ZIP64_MARK):
            usize, csize, hoff = zip64_extra(directory[name_end : name_end + xlen], usize, csize, hoff)
        members.append(new_member(ZipMember, (name, base + hoff, method, csize, usize, crc, flags)))
        pos = name_end + xlen + clen
    return members


def zip64_extra(extra: bytes, usize: int, csize: int, hoff: int = 0, local: bool = False) -> tuple[int, int, int]:
    """(size, compressed size, header offset) with each 32-bit field marked ZIP64_MARK replaced from
    the zip64 extra field. In a central entry the extra holds only the marked fields, in that order;
    in a local header it holds both sizes as soon as either is marked (APPNOTE 4.5.3)."""
    if local and usize != ZIP64_MARK and csize != ZIP64_MARK:
        return usize, csize, hoff
    found = _zip64_field(extra)
    if found is None:
        return usize, csize, hoff
    at, size = found
    if local:
        return (*struct.unpack_from("<QQ", extra, at), hoff) if size >= 16 else (usize, csize, hoff)
    values = iter(struct.unpack_from(f"<{size // 8}Q", extra, at))  # the marked fields, in this order
    return tuple(next(values, v) if v == ZIP64_MARK else v for v in (usize, csize, hoff))  # type: ignore[return-value]


def _zip64_field(extra: bytes) -> tuple[int, int] | None:
    """(where its data starts, its size) of the zip64 field in an extra field; None when there is none."""
    i = 0
    while i + 4 <= len(extra):
        tag, size = _EXTRA_FIELD.unpack_from(extra, i)
        if tag == ZIP64_EXTRA_TAG:
            return i + 4, size
        i += 4 + size
    return None


def local_name(head: bytes) -> bytes | None:
    """The member name of a local header at the start of `head` (raw bytes), or None if there is none."""
    if len(head) < LOCAL.size or not head.startswith(LOCAL_SIG):
        return None
    return head[LOCAL.size : LOCAL.size + int.from_bytes(head[26:28], "little")]


def data_offset(reader: PositionedReader, member: ZipMember) -> int:
    """Absolute position of the member's first byte: local header + name + the local extra field
    (torch pads that extra field so the data is 64-byte aligned; the directory does not record it)."""
    header = reader.small_read(member.header_offset, LOCAL.size)
    if len(header) < LOCAL.size:
        raise ZipError(f"local header of {member.name} missing at byte {member.header_offset}")
    sig, name_len, extra_len = _LOCAL_LENGTHS.unpack(header)
    if sig != LOCAL_SIG:
        raise ZipError(f"local header of {member.name} missing at byte {member.header_offset}")
    return member.header_offset + LOCAL.size + name_len + extra_len


def data_offsets(reader: PositionedReader, members: list[ZipMember]) -> list[int | ZipError]:
    """data_offset() of each member, or the ZipError it would raise, in one loop over blocks of local
    headers: for 50,000 tiny storages the per-member calls cost more than the reading."""
    native = load_native("zipdir")
    if native is None:
        return _local_offsets(reader, members)
    found = native.local_offsets(reader.read_at, reader.BLOCK, members)  # this loop in C: None, no header there
    for i, at in enumerate(found):
        if at is None:
            member = members[i]
            found[i] = ZipError(f"local header of {member.name} missing at byte {member.header_offset}")
    return found


def members_in_order(members: list[ZipMember], folder: str, keys: Mapping[str, object]) -> int | None:
    """Where the members named `folder` + key, for each of `keys` in order, lie one after the other with no later
    member bearing one of those names (torch.save's `archive/data/0`, `archive/data/1` ...): the index of the
    first, so that member i of the run is the one a dict of the members by name (the last of each name) gives for
    key i. None otherwise, or where the compiled loop is not built: the caller looks each one up."""
    native = load_native("zipdir")
    return native.in_order(members, folder, keys) if native is not None else None


def _local_offsets(reader: PositionedReader, members: list[ZipMember]) -> list[int | ZipError]:
    """data_offsets, one member at a time in Python (the compiled loop's oracle)."""
    out: list[int | ZipError] = []
    block = b""
    block_start = -1
    size = LOCAL.size
    unpack = _LOCAL_LENGTHS.unpack_from
    for member in members:
        pos = member.header_offset
        rel = pos - block_start
        if rel < 0 or rel + size > len(block):
            block = reader.read_at(pos, reader.BLOCK)  # headers lie in file order: the next ones come along
            block_start = pos
            rel = 0
        if rel + size > len(block):
            out.append(ZipError(f"local header of {member.name} missing at byte {pos}"))
            continue
        sig, name_len, extra_len = unpack(block, rel)
        if sig != LOCAL_SIG:
            out.append(ZipError(f"local header of {member.name} missing at byte {pos}"))
            continue
        out.append(pos + size + name_len + extra_len)
    return out


def local_header_at(reader: PositionedReader, offset: int) -> tuple[str, int, int] | None:
    """(name, data offset, flags) of a local header at `offset`, or None if there is none."""
    header = reader.small_read(offset, LOCAL.size)
    if len(header) < LOCAL.size or header[:4] != LOCAL_SIG:
        return None
    fields = LOCAL.unpack(header)
    flags, name_len, extra_len = fields[2], fields[9], fields[10]
    name = reader.small_read(offset + LOCAL.size, name_len).decode("utf-8", "replace")
    return name, offset + LOCAL.size + name_len + extra_len, flags


def member_chunks(reader: PositionedReader, member: ZipMember, start: int, verify: bool = False,
                  max_bytes: int | None = None, chunk: int = _CHUNK) -> Iterator[bytes]:  # fmt: skip
    """The member's bytes from its data at `start`, inflated, in pieces of about `chunk` bytes.

    Raises ZipError for what a reader cannot get past: a method other than stored or deflate, a bad
    deflate stream, data cut short, more than `max_bytes`. With `verify` (what a whole-file check
    needs), also an encrypted member, a local header that names another member and, at the end, a
    CRC-32 that does not match.
    """
    _check_readable(reader, member, verify)
    inflate = zlib.decompressobj(-15) if member.compress_type == DEFLATED else None
    crc = 0
    produced = 0
    for raw in _raw_chunks(reader, member, start, chunk):
        out = raw if inflate is None else _inflate(inflate, raw, member, _left(max_bytes, produced))
        produced += len(out)
        if max_bytes is not None and produced > max_bytes:
            raise ZipError(f"{member.name} inflates past {max_bytes} bytes")
        if verify:
            crc = crc32(out, crc)
        yield out
    if verify and crc != member.crc32:
        raise ZipError(f"Bad CRC-32 for {member.name}")


def _left(max_bytes: int | None, produced: int) -> int | None:
    return None if max_bytes is None else max_bytes - produced


def _raw_chunks(reader: PositionedReader, member: ZipMember, start: int, chunk: int) -> Iterator[bytes]:
    """The member's stored bytes from `start`, about `chunk` at a time; ZipError when they are cut short."""
    pos, end = start, start + member.compressed_size
    while pos < end:
        raw = reader.read_at(pos, min(chunk, end - pos))
        if not raw:
            raise ZipError(f"{member.name} is cut short at byte {pos}")
        pos += len(raw)
        yield raw


def _check_readable(reader: PositionedReader, member: ZipMember, verify: bool) -> None:
    """ZipError for a member no reader gets past (a method torch never writes), and with `verify` for an
    encrypted one or one whose local header names another member."""
    if member.compress_type not in (STORED, DEFLATED):
        raise ZipError(f"{member.name} uses zip compression method {member.compress_type}, which torch never writes")
    if verify:
        if member.flags & FLAG_ENCRYPTED:
            raise ZipError(f"{member.name} is encrypted")
        header = local_header_at(reader, member.header_offset)
        if header is None or header[0] != member.name:
            raise ZipError("its local header names another file")


def _inflate(inflate: zlib._Decompress, raw: bytes, member: ZipMember, room: int | None) -> bytes:
    """`raw` inflated, at most one byte past the `room` left (so that going past it is seen)."""
    try:
        return inflate.decompress(raw, room + 1) if room is not None else inflate.decompress(raw)
    except zlib.error as exc:
        raise ZipError(f"{member.name}: bad deflate data ({exc})") from None


def read_member(reader: PositionedReader, member: ZipMember, limit: int | None = None, max_bytes: int | None = None,
                verify: bool = False) -> bytes:  # fmt: skip
    """The member's whole (inflated) bytes; `limit` is where its data must end (the directory's start)."""
    start = data_offset(reader, member)
    if limit is not None and start + member.compressed_size > limit:
        raise ZipError(f"{member.name} runs past the end of the data ({start + member.compressed_size} > {limit})")
    if max_bytes is not None and member.file_size > max_bytes:
        raise ZipError(f"{member.name} is {member.file_size} bytes, too large to be a checkpoint pickle")
    return b"".join(member_chunks(reader, member, start, verify, max_bytes))
