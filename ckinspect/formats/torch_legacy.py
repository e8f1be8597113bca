"""torch.save(..., _use_new_zipfile_serialization=False), the pre-1.6 format: pickles back to back.

    magic number | protocol version | sys_info | the object (storages as persistent ids) |
    sorted storage keys | per storage: int64 little-endian element count, then the raw bytes

Listing reads the five pickles and the 8-byte count in front of each storage, nothing else.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from ckinspect.dtypes import dtype_info
from ckinspect.formats.errors import CorruptPickle
from ckinspect.formats.opening import reading
from ckinspect.formats.pickle_findings import StorageCollector, check_weights_only, decode, record_globals, set_tree
from ckinspect.formats.pickle_scan import PickleScan, scan_file
from ckinspect.formats.sniff import LEGACY_MAGIC as MAGIC_NUMBER  # torch/serialization.py names it so
from ckinspect.formats.sniff import LEGACY_TAR_MEMBERS, is_legacy_tar
from ckinspect.formats.tree import no_gc
from ckinspect.formats.unpickler import StorageRef, restricted_load
from ckinspect.io.reader import PositionedReader, ReaderFile
from ckinspect.io.remote import as_path
from ckinspect.model import Checkpoint, StorageInfo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROTOCOL_VERSION = 1001
MAX_PICKLE_BYTES = 256 << 20  # the header and object pickles; ~100 MB would already be a million tensors
_NAMES = ("magic number", "protocol version", "sys_info", "object", "storage key list")


def read_pickle_prefix(reader: PositionedReader, count: int) -> tuple[bytes, list[PickleScan]]:
    """The first `count` pickles: scanned a window at a time (whatever their size), and their bytes when
    they fit in MAX_PICKLE_BYTES (b"" otherwise: scanned, too large to decode)."""
    scans = scan_file(reader, 0, reader.size, limit=count)
    if len(scans) < count or any(s.error is not None for s in scans):
        return b"", scans  # not decoded: no need to hold bytes a garbage length field points at
    end = scans[-1].end
    return (reader.read_at(0, end) if end <= MAX_PICKLE_BYTES else b""), scans


@no_gc()  # tens of thousands of small objects without cycles: collector passes are pure overhead
def read_torch_legacy(path: str | os.PathLike[str], reader: PositionedReader | None = None) -> Checkpoint:
    """List a legacy torch.save file. Never raises for bad content:
    problems become CORRUPT / UNSAFE_PICKLE / ALLOWLIST_NEEDED findings; OSError only if it cannot be opened."""
    path = as_path(path)  # a URL stays one: its bytes come from `reader`
    with reading(path, "torch-legacy", reader) as (ckpt, opened):
        _read(ckpt, opened, path)
    return ckpt


def _read(ckpt: Checkpoint, reader: PositionedReader, path: Path) -> None:
    if reader.size == 0:
        ckpt.add("CORRUPT", f"{path.name} is empty")
        return
    if is_legacy_tar(reader.read_at(0, 512), reader):
        _read_tar(ckpt, reader, path)
        return
    data, scans = read_pickle_prefix(reader, 5)
    where = path.name
    unsafe = record_globals(ckpt, [g for s in scans for g in s.globals], where, data)
    check_weights_only(ckpt, data, scans, where)  # torch.load reads all five through weights_only's unpickler
    if _whole_pickles(ckpt, where, data, scans) and not unsafe and _header_is_torchs(ckpt, where, data, scans):
        _read_objects(ckpt, reader, path, data, scans)


def _whole_pickles(ckpt: Checkpoint, where: str, data: bytes, scans: list[Any]) -> bool:
    """Whether all five pickles were read whole (a finding says why not)."""
    for index, scan in enumerate(scans):
        if scan.error is not None:
            ckpt.add("CORRUPT", f"{where}: the {_NAMES[index]} pickle is unreadable: {scan.error}")
            return False
    if len(scans) < 5:
        ckpt.add("CORRUPT", f"{where}: ends after {len(scans)} of the 5 pickles a legacy torch file holds (truncated)")
        return False
    if not data:
        ckpt.add(
            "CORRUPT", f"{where}: its pickles end at byte {scans[-1].end}, too large to list (scanned, not decoded)"
        )
        return False
    return True


def _header_is_torchs(ckpt: Checkpoint, where: str, data: bytes, scans: list[Any]) -> bool:
    """The magic number, protocol version and system info pickles, as torch's legacy writer wrote them."""
    try:
        magic = restricted_load(data[scans[0].start : scans[0].end], scan=scans[0])
        version = restricted_load(data[scans[1].start : scans[1].end], scan=scans[1])
        sys_info = restricted_load(data[scans[2].start : scans[2].end], scan=scans[2])
    except CorruptPickle as exc:
        ckpt.add("CORRUPT", f"{where}: header pickles are unreadable: {exc}")
        return False
    if magic != MAGIC_NUMBER:
        ckpt.add("CORRUPT", f"{where}: starts with a pickle, but not torch's legacy magic number: a plain pickle?")
        return False
    if version != PROTOCOL_VERSION:
        ckpt.add("CORRUPT", f"{where}: legacy protocol version {version!r:.20}, expected {PROTOCOL_VERSION}")
        return False
    little = not isinstance(sys_info, dict) or sys_info.get("little_endian", True)
    ckpt.metadata["byteorder"] = "little" if little else "big"
    return True


def _read_objects(ckpt: Checkpoint, reader: PositionedReader, path: Path, data: bytes, scans: list[Any]) -> None:
    """The object pickle, then the storage keys and the storages after them."""
    where = path.name
    collector = _LegacyStorages()
    obj_scan = scans[3]
    tree = decode(ckpt, data[obj_scan.start : obj_scan.end], obj_scan, f"{where} (object pickle)", collector)
    if tree is None:
        return
    keys_scan = scans[4]
    try:
        keys = restricted_load(data[keys_scan.start : keys_scan.end], scan=keys_scan)
    except CorruptPickle as exc:
        ckpt.add("CORRUPT", f"{where}: storage key list is unreadable: {exc}")
        keys = None
    if isinstance(keys, list):
        _locate_storages(ckpt, reader, path, collector, [str(k) for k in keys], keys_scan.end)
    set_tree(ckpt, tree)


class _LegacyStorages(StorageCollector):
    """Legacy persistent ids carry view metadata: (view key, byte offset, nbytes) into a root storage."""

    def __init__(self) -> None:
        super().__init__()
        self.views: dict[str, tuple[str, int, int]] = {}

    def __call__(self, pid: Any) -> Any:
        ref = super().__call__(pid)
        if isinstance(pid, tuple) and len(pid) >= 6 and isinstance(pid[5], tuple) and len(pid[5]) == 3:
            view_key, view_offset, view_size = pid[5]
            if isinstance(view_offset, int) and isinstance(view_size, int) and isinstance(ref, StorageRef):
                self.views[str(view_key)] = (ref.key, view_offset, view_size)
                return StorageRef(str(view_key), ref.dtype, ref.location, view_size, ref.untyped)
        return ref


def _locate_storages(ckpt: Checkpoint, reader: PositionedReader, path: Path, collector: _LegacyStorages,
                     keys: list[str], pos: int) -> None:  # fmt: skip
    """Walk the storage section: each storage is an 8-byte element count followed by its bytes."""
    size = reader.size
    for index, key in enumerate(keys):
        ref = collector.storages.get(key)
        head = reader.small_read(pos, 8)
        if len(head) < 8:
            ckpt.add("CORRUPT", f"{path.name}: truncated: storage {key} ({index + 1} of {len(keys)}) should start "
                                f"at byte {pos} but the file ends at {size}")  # fmt: skip
            return
        (count,) = struct.unpack("<q", head)
        itemsize = 1 if ref is None or ref.untyped else dtype_info(ref.dtype).itemsize
        nbytes = count * itemsize
        if count < 0 or pos + 8 + nbytes > size:
            ckpt.add("CORRUPT", f"{path.name}: truncated: storage {key} needs {nbytes} bytes from byte {pos + 8} "
                                f"but the file ends at {size}")  # fmt: skip
            return
        if ref is not None and nbytes < ref.nbytes:
            ckpt.add("CORRUPT", f"{path.name}: storage {key} holds {nbytes} bytes but the pickle says {ref.nbytes}")
        dtype, location = (ref.dtype, ref.location) if ref else ("uint8", "cpu")
        ckpt.storages[key] = StorageInfo(key, dtype, nbytes, path, pos + 8, location=location)
        pos += 8 + nbytes
    _add_views(ckpt, path, collector)


def _add_views(ckpt: Checkpoint, path: Path, collector: _LegacyStorages) -> None:
    """Legacy storage views as storages of their own (their root's bytes), then what the pickle named but the
    file lacks."""
    for view_key, (root, offset, nbytes) in collector.views.items():
        base = ckpt.storages.get(root)
        if base is not None and base.offset is not None and offset + nbytes <= base.nbytes:
            start = base.offset + offset
            ckpt.storages[view_key] = StorageInfo(view_key, base.dtype, nbytes, path, start, location=base.location)
    missing = [k for k in collector.storages if k not in ckpt.storages]
    if missing:
        ckpt.add("CORRUPT", f"{path.name}: {len(missing)} storage(s) named by the pickle are not in the file: "
                            + ", ".join(missing[:10]))  # fmt: skip


def _read_tar(ckpt: Checkpoint, reader: PositionedReader, path: Path) -> None:
    """The oldest form (torch < 0.4): a tar of `storages`, `tensors` and `pickle`, which torch.load tries
    before anything else. Each is scanned as torch would unpickle it (the last member of a name, as
    tarfile's getmember picks); the tensors are not listed."""
    import tarfile

    members: dict[str, tarfile.TarInfo] = {}
    with tarfile.open(fileobj=ReaderFile(reader), mode="r:") as tar:  # type: ignore[call-overload]  # read, seek, tell
        for info in tar:
            if info.name in LEGACY_TAR_MEMBERS:
                members[info.name] = info  # a later member of the same name wins
    for name in LEGACY_TAR_MEMBERS:
        member = members.get(name)
        if member is not None and member.isfile():
            _scan_tar_member(ckpt, reader, path, name, member.offset_data, member.size)
    if "pickle" not in members:
        ckpt.add(
            "CORRUPT", f"{path.name}: a tar that torch.load reads as its legacy format, but without a pickle member"
        )


def _scan_tar_member(ckpt: Checkpoint, reader: PositionedReader, path: Path, name: str, start: int, size: int) -> None:
    """One member of the legacy tar, scanned as torch would unpickle it."""
    where = f"{path.name}:{name}"
    end = min(start + size, reader.size)
    scans = scan_file(reader, start, end)
    record_globals(ckpt, [g for scan in scans for g in scan.globals], where)
    walked = scans[-1].end if scans else start
    if name != "pickle" and walked < end:
        # raw storage bytes and sizes lie between the pickles of `storages` and `tensors`
        ckpt.add("CORRUPT", f"{where}: legacy tar form, scanned up to byte {walked - start} of {end - start}; "
                            "the rest is not listed (re-save it with a current torch)")  # fmt: skip
    elif scans and scans[0].error is not None:
        ckpt.add("CORRUPT", f"{where}: {scans[0].error}")
