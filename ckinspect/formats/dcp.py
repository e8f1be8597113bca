"""torch.distributed.checkpoint folders: `.metadata` (a pickle) plus `*.distcp` data files.

`.metadata` holds a `Metadata` dataclass: state_dict_metadata maps each fully qualified name to
TensorStorageMetadata (dtype in `properties`, global `size`, `chunks` with offsets/sizes) or
BytesStorageMetadata (any other object); storage_data maps MetadataIndex(fqn, chunk offset) to
_StorageInfo(relative_path, offset, length). With torch's default serialization each item is a
complete torch.save zip written at that offset, so a chunk's raw bytes are that zip's storage
member; non-tensor values are small torch.save zips too and are decoded for the tree.
Nothing is imported: the dataclasses come back as `Opaque` records.

The folder may be a URL prefix (s3://, gs://, http(s)://, as io.folders lists it): its files are then
listed from that one listing and read by range requests, as a remote torch zip is (`.metadata` whole,
each item's zip header and pickle), never downloaded.
"""

from __future__ import annotations

import contextlib
import math
import operator
import os
from pathlib import Path

from ckinspect import steps
from ckinspect.dtypes import dtype_info
from ckinspect.formats import dcp_cover, dcp_metadata, dcp_quick
from ckinspect.formats.pickle_findings import check_views, decode, record_globals
from ckinspect.formats.pickle_scan import NOT_DECODED, GlobalRef, scan_decoding, scan_file
from ckinspect.formats.torch_zip import read_zip_into
from ckinspect.formats.tree import flatten, no_gc
from ckinspect.formats.unpickler import Opaque, _opaque_class
from ckinspect.io import folders
from ckinspect.io.contain import OutsideTarget, inside
from ckinspect.io.remote import as_path
from ckinspect.io.zipdir import LOCAL_SIG, ZipError, zip_ends
from ckinspect.model import Checkpoint, Extents, StorageInfo, TensorInfo, contiguous_strides

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ckinspect.io.reader import PositionedReader

METADATA = ".metadata"
ENUM_GETATTR = "builtins.getattr"
MAX_VALUE_BYTES = 16 << 20  # non-tensor values above this are listed, not decoded
# What a .metadata may declare scales with its own size: torch's writer spends ~90 bytes of pickle per
# entry, chunk and storage record it declares (a 70B + AdamW save: 6.76 MB for 73,760 of them at 16 ranks,
# 404 MB for 4,447,852 at 1024), and a distinct record cannot cost less than ~17 bytes even with every
# name memoized. Only a structure shared through the memo (2 bytes a reference: billion laughs) declares
# more per byte, and the listing's work and memory grow with what is declared, not with what was read.
BYTES_PER_DECLARED = 16
MAX_METADATA_BYTES = 1 << 30  # larger ones are decoded only when the data files they index are larger still
MIN_DECLARED = 1024  # whatever its size, a .metadata may declare this many
KEPT_PREFIX_BYTES = 64 << 20  # of a remote .metadata the compiled decoder reads, kept for the general path


def _expected_dcp_global(g: GlobalRef) -> bool:
    """DCP's own metadata classes. dcp.load reads .metadata with plain pickle.load (no allowlist at all),
    so these need no ALLOWLIST_NEEDED; anything unsafe in it would run on load, hence UNSAFE_PICKLE."""
    return g.module.startswith("torch.distributed.checkpoint") or g.module == "pathlib"


def rank_metadata_files(folder: Path) -> list[Path]:
    """`__<rank>.metadata` files (rank-local indexes dcp.load reads when `.metadata` fails), lowest rank first."""
    found = []
    try:
        for name, path in folders.regular_files(folder):
            rank = name[2 : -len(METADATA)] if name.startswith("__") and name.endswith(METADATA) else ""
            if rank.isdigit():
                found.append((int(rank), path))
    except OSError:
        return []
    return [path for _rank, path in sorted(found)]


def _fields(obj: Any) -> dict[str, Any]:
    if type(obj) in dcp_metadata.RECORDS:
        return obj.__dict__
    if isinstance(obj, Opaque):
        return obj.fields
    return obj if isinstance(obj, dict) else {}


@no_gc()  # tens of thousands of small objects without cycles: collector passes are pure overhead
def read_dcp(
    folder: str | os.PathLike[str], metadata_name: str = METADATA, *, trust_layout: bool = False
) -> Checkpoint:
    """List a torch.distributed.checkpoint folder. Never raises for bad content:
    problems become CORRUPT / UNSAFE_PICKLE / ALLOWLIST_NEEDED findings; OSError only if it cannot be opened.

    `metadata_name` reads another index in the folder: `.metadata.tmp`, to judge an interrupted save.
    `trust_layout` (--quick: structure only) lists tensors from `.metadata` and checks each data file once
    instead of opening every item (see _Lister); their storages then have no byte offset to scan, and a tensor
    sharded over ranks is one entry of its global shape, not one per chunk."""
    folder = as_path(folder)  # a URL prefix stays a URL: io.folders lists it
    data_files = folders.files(folder, ".distcp")
    meta_path = folder / metadata_name
    index = f"{folder.name}/{metadata_name}"
    data_bytes = sum(folders.sizes(data_files))
    ckpt = Checkpoint(path=folder, format="dcp", file_bytes=data_bytes, files=list(data_files))
    rank_local = _judged_rank_indexes(ckpt, folder)
    if not folders.is_file(meta_path) and metadata_name == METADATA and rank_local:
        meta_path, metadata_name = rank_local[0], rank_local[0].name
        index = f"{folder.name}/{metadata_name}"
    if not folders.is_file(meta_path):
        tmp = " (a .metadata.tmp is there: the save was interrupted before it was renamed)" if folders.exists(
            folder / ".metadata.tmp") else ""  # fmt: skip
        ckpt.add("CORRUPT", f"DCP folder without {metadata_name}: {len(data_files)} .distcp file(s) but no index{tmp}")
        return ckpt
    ckpt.file_bytes += folders.size(meta_path)
    ckpt.files.insert(0, meta_path)
    fields = _metadata_fields(ckpt, meta_path, index, data_bytes, columns=trust_layout)
    if fields is None:
        return ckpt
    if isinstance(fields, dcp_metadata.Columns):  # --quick of what torch's writer wrote: the compiled decoder's
        return _list_columns(ckpt, folder, index, fields, data_files, folders.size(meta_path))
    _note_version_and_ranks(ckpt, fields, data_files)
    if _declares_too_many(ckpt, fields, folders.size(meta_path), index):
        return ckpt
    items = _storage_items(ckpt, fields["storage_data"], index)
    _set_tree(ckpt, _entries_tree(ckpt, folder, index, fields, items, trust_layout), index)
    check_views(ckpt)
    return ckpt


def _judged_rank_indexes(ckpt: Checkpoint, folder: Path) -> list[Path]:
    """The rank-local `__<rank>.metadata` files, each judged: dcp.load falls back to them when `.metadata` is
    missing or fails to load."""
    rank_local = rank_metadata_files(folder)
    for other in rank_local:
        with folders.opened(other) as reader:
            scans = scan_file(reader, 0, reader.size, limit=1)
        refs = [g for s in scans for g in s.globals if not _expected_dcp_global(g) and g.qualname != ENUM_GETATTR]
        record_globals(ckpt, refs, f"{folder.name}/{other.name}")
    return rank_local


def _note_version_and_ranks(ckpt: Checkpoint, fields: dict[str, Any], data_files: list[Path]) -> None:
    if isinstance(fields.get("version"), str):
        ckpt.metadata["dcp_version"] = fields["version"]
    ranks = {p.name.split("_")[2] for p in data_files if p.name.startswith("__") and p.name.count("_") >= 3}
    if ranks:
        ckpt.metadata["dcp_ranks"] = len(ranks)


def _list_columns(ckpt: Checkpoint, folder: Path, index: str, cols: dcp_metadata.Columns, data_files: list[Path],
                  meta_bytes: int) -> Checkpoint:  # fmt: skip
    """read_dcp's trusted listing from dcp_metadata's columns (dcp_quick): the same checks and findings."""
    _note_version_and_ranks(ckpt, {"version": cols.version}, data_files)
    if _too_many(ckpt, cols.declared(), meta_bytes, index):
        return ckpt
    with contextlib.ExitStack() as handles:  # every data file opened stays open until the tree is read
        listing = dcp_quick.ColumnListing(ckpt, _Lister(ckpt, folder, handles, True), cols, _chunk_name)
        tree = listing.tree(index, _planner_keys, _place)
    _set_tree(ckpt, tree, index)
    check_views(ckpt)
    return ckpt


def _declares_too_many(ckpt: Checkpoint, fields: dict[str, Any], meta_bytes: int, index: str) -> bool:
    """CORRUPT (and True) when the metadata declares more than its size allows (declared_limit)."""
    return _too_many(ckpt, _declared_entries(fields, declared_limit(meta_bytes)), meta_bytes, index)


def _too_many(ckpt: Checkpoint, declared: int, meta_bytes: int, index: str) -> bool:
    limit = declared_limit(meta_bytes)
    if declared <= limit:
        return False
    ckpt.add("CORRUPT", f"{index} declares more than {limit:,} entries and chunks, more than one per "
                        f"{BYTES_PER_DECLARED} bytes of it (torch writes ~90): a structure shared through the "
                        "pickle's memo, not a save; not listed")  # fmt: skip
    return True


def _set_tree(ckpt: Checkpoint, tree: dict[str, Any], index: str) -> None:
    try:
        ckpt.tree = _lists(tree)
    except RecursionError:  # planner paths thousands of levels deep: keep the dicts as they are
        ckpt.tree = tree
        ckpt.add("CORRUPT", f"{index}: key paths nest too deeply to rebuild")


def _metadata_fields(ckpt: Checkpoint, meta_path: Path, index: str, data_bytes: int,
                     columns: bool = False) -> dict[str, Any] | dcp_metadata.Columns | None:  # fmt: skip
    """The fields of the `.metadata` pickle's Metadata, decoded without importing anything; None (with the
    findings that say why) when it names unsafe globals, is cut short, or is not DCP Metadata. `columns`: the
    compiled decoder's Columns instead, where it is built and takes the file."""
    with folders.opened(meta_path) as reader:
        meta_size = reader.size
        if meta_size > max(MAX_METADATA_BYTES, data_bytes):  # scanned a window at a time, never decoded
            scans = scan_file(reader, 0, meta_size, limit=1)
            refs = [g for s in scans for g in s.globals if not _expected_dcp_global(g)]
            if not record_globals(ckpt, refs, index):
                ckpt.add("CORRUPT", f"{index} is {meta_size} bytes, larger than the data files it indexes and "
                                    "too large to list (scanned, not decoded)")  # fmt: skip
            return None
        # streamed through the compiled decoder a window at a time: what torch's writer wrote is never held whole
        kept = _KeptPrefix(reader.read_at, KEPT_PREFIX_BYTES if reader.fd is None else 0)
        cols = dcp_metadata.native_columns(kept.read_at, meta_size) if columns and meta_size else None
        if cols is not None:  # every opcode read to STOP, only DCP's own globals named: judged as the scan judges
            return cols if _judge_globals(ckpt, cols.global_refs(), index) is not None else None
        data = kept.rest(meta_size)  # the size the file has, never more (read(n) allocates n up front)
    return _scanned_fields(ckpt, data, index)


class _KeptPrefix:
    """`read_at` that keeps the file's first `keep` bytes as they are read, so that when the compiled decoder
    declines a `.metadata` where each read is a request (a URL), the general path fetches only what it has
    not read already: a file of up to `keep` bytes is fetched once, whatever is decided about it."""

    def __init__(self, read_at: Any, keep: int) -> None:
        self._read_at, self.keep = read_at, keep
        self.parts: list[bytes] = []
        self.held = 0

    def read_at(self, offset: int, length: int) -> bytes:
        data = self._read_at(offset, length)
        if offset <= self.held < min(offset + len(data), self.keep):  # windows come in order, and may overlap
            self.parts.append(data[self.held - offset : self.keep - offset])
            self.held += len(self.parts[-1])
        return data

    def rest(self, size: int) -> bytes:
        """The whole file: what was kept, then the rest of it read."""
        held, self.parts = b"".join(self.parts), []
        return held + self._read_at(len(held), size - len(held)) if len(held) < size else held[:size]


def _scanned_fields(ckpt: Checkpoint, data: bytes, index: str) -> dict[str, Any] | None:
    """The static scan judges every global (and what CPython's unpickler would choke or balloon on: memo
    indices, sizes); the fast decoder decodes in the same pass, or for anything it declines the restricted
    unpickler decodes after the scan."""
    if not data:
        ckpt.add("CORRUPT", f"{index} is empty")
        return None
    # judged and, when it is what torch's writer emits, decoded in the same pass of the C unpickler
    scan, fast = scan_decoding(data, dcp_metadata.FastUnpickler)
    guarded = _judge_globals(ckpt, scan.globals, index)
    if guarded is None:
        return None
    if scan.error is not None:
        ckpt.add("CORRUPT", f"{index}: {scan.error}")
        return None
    fields = dcp_metadata.metadata_fields(fast) if fast is not NOT_DECODED else None
    return fields if fields is not None else _decoded_fields(ckpt, data, scan, index, guarded)


def _judge_globals(ckpt: Checkpoint, found: list[GlobalRef], index: str) -> frozenset[str] | None:
    """Every global the scan found: DCP's own are named, anything else judged (None when that refuses the
    file); returns the calls the unpickler may make under its guard."""
    # Python 3.11.0-3.11.x pickled enum members (DCP's _MEM_FORMAT_ENCODING) as getattr(EnumClass, "NAME"):
    # accepted here only because the unpickler checks every such call (see unpickler.GUARDED)
    guarded = frozenset({ENUM_GETATTR}) if any(g.qualname == ENUM_GETATTR for g in found) else frozenset()
    refs = [g for g in found if not _expected_dcp_global(g) and g.qualname not in guarded]
    _name_own_globals(ckpt, found, guarded)
    return None if record_globals(ckpt, refs, index) else guarded


def _name_own_globals(ckpt: Checkpoint, found: list[GlobalRef], guarded: frozenset[str]) -> None:
    for g in found:
        if (_expected_dcp_global(g) or g.qualname in guarded) and g.qualname not in ckpt.globals:
            ckpt.globals.append(g.qualname)


def _decoded_fields(ckpt: Checkpoint, data: bytes, scan: Any, index: str,
                    guarded: frozenset[str]) -> dict[str, Any] | None:  # fmt: skip
    """What the fast decoder declined, through the restricted unpickler."""
    meta = decode(ckpt, data[: scan.end], scan, index, guarded=guarded)
    fields = _fields(meta)
    if not isinstance(fields.get("state_dict_metadata"), dict) or not isinstance(fields.get("storage_data"), dict):
        if meta is not None:
            ckpt.add("CORRUPT", f"{index} is a pickle but not DCP Metadata (no state_dict_metadata)")
        return None
    return fields


def declared_limit(metadata_bytes: int) -> int:
    """Entries, chunks and storage records a .metadata of this size may declare (see BYTES_PER_DECLARED)."""
    return max(MIN_DECLARED, metadata_bytes // BYTES_PER_DECLARED)


def _declared_entries(fields: dict[str, Any], limit: int) -> int:
    """Entries plus chunks plus storage records the metadata declares, counted up to just past `limit`."""
    declared = len(fields["storage_data"]) + len(fields["state_dict_metadata"])
    for md in fields["state_dict_metadata"].values():
        chunks = _fields(md).get("chunks")
        declared += len(chunks) if isinstance(chunks, (list, tuple)) else 0
        if declared > limit:
            break
    return declared


if TYPE_CHECKING:
    _Items = dict[tuple[str, tuple[int, ...] | None], dict[str, Any]]  # (fqn, chunk offsets) -> where its bytes are


def _storage_items(ckpt: Checkpoint, storage_data: dict[Any, Any], index: str) -> _Items:
    """storage_data as (fqn, chunk offsets) -> {relative_path, offset, length}."""
    items: _Items = {}
    for key, info in storage_data.items():
        idx, where = _fields(key), _fields(info)
        offset = idx.get("offset")
        try:
            items[(str(idx.get("fqn")), tuple(offset) if isinstance(offset, (tuple, list)) else None)] = where
        except TypeError:
            ckpt.add("CORRUPT", f"{index}: a storage index entry is malformed")
    return items


def _entries_tree(ckpt: Checkpoint, folder: Path, index: str, fields: dict[str, Any], items: _Items,
                  trust: bool) -> dict[str, Any]:  # fmt: skip
    """Every state_dict_metadata entry read (tensors as TensorInfo, small values decoded) and placed at its
    planner path (or its dotted name)."""
    planner = fields.get("planner_data")
    if not isinstance(planner, dict):
        planner = {}
    tree: dict[str, Any] = {}
    with contextlib.ExitStack() as handles:  # every data file opened below stays open until the tree is read
        lister = _Lister(ckpt, folder, handles, trust)
        entries = fields["state_dict_metadata"]
        for done, (fqn, md) in enumerate(entries.items()):
            if not done % steps.EVERY:  # a folder of many ranks: the TUI shows how far the listing is
                steps.step(f"entries of {index}", done, len(entries))
            fqn = str(fqn)
            try:
                kind = md.qualname.rsplit(".", 1)[-1] if isinstance(md, Opaque) else type(md).__name__
                if kind == "TensorStorageMetadata":
                    value = lister.tensor_entry(fqn, _fields(md), items)
                elif kind == "BytesStorageMetadata":
                    value = lister.bytes_entry(fqn, items)
                else:
                    value = md
                _place(tree, _planner_keys(planner.get(fqn)) or fqn.split("."), value)
            except (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError) as exc:
                # a .metadata that decodes but whose fields are not what DCP writes
                ckpt.add("CORRUPT", f"{index}: entry {fqn} is malformed ({type(exc).__name__})", fqn)
        if trust:
            lister.check_files()
    return tree


def _planner_keys(path: Any) -> list[Any] | None:
    """A planner path as tree keys: ints stay list positions, anything else becomes a str key."""
    if isinstance(path, (tuple, list)) and path:
        return [p if type(p) is int else str(p) for p in path]
    return None


def _place(tree: dict[Any, Any], path: list[Any], value: Any) -> None:
    node = tree
    for key in path[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    node[path[-1]] = value


def _lists(node: Any) -> Any:
    """DCP flattens lists into int path elements (dict keys are always str): rebuild them as lists."""
    if not isinstance(node, dict) or type(node) is not dict:
        return node
    for key in list(node):
        node[key] = _lists(node[key])
    if node and all(type(k) is int and k >= 0 for k in node) and max(node) < 4 * len(node):
        return [node.get(i) for i in range(max(node) + 1)]
    return node


class _Lister:
    """Reads the items `.metadata` places in the data files. Each data file is opened (and its path checked)
    once. `trust`: tensors are listed from `.metadata`'s layout (dtype, chunk shape, where the item lies),
    each item checked against its file's size and the files' items checked once per file (no overlap; the
    first begins and the last ends as torch.save writes them), never opened one by one: the value scan
    (`--verify`, any report without --quick) reads every item instead."""

    def __init__(self, ckpt: Checkpoint, folder: Path, handles: contextlib.ExitStack, trust: bool) -> None:
        self.ckpt, self.folder, self.handles, self.trust = ckpt, folder, handles, trust
        self.readers: dict[str, PositionedReader | str | None] = {}  # str: why it is not read
        self.paths: dict[str, Path] = {}
        # trusted: (offset, length, name, chunk) per file; name is the fqn of a sharded tensor's `chunk` (the
        # decoded record, named only for a message: 2.2 million at 1024 ranks), else the chunk's name and None
        self.extents: dict[str, list[tuple[int, int, str, Any]]] = {}
        self.shapes: dict[tuple[int, ...], tuple[tuple[int, ...], int]] = {}  # chunk sizes -> (strides, numel)
        self.numels: dict[tuple[int, ...], int] = {}  # chunk sizes -> numel
        self.bits: dict[str, int] = {}
        self.layouts = dcp_cover.Remembered()  # whether each distinct layout of chunks covers its tensor

    def _reader(self, relative: str) -> PositionedReader | str | None:
        if relative not in self.readers:
            try:
                target = inside(self.folder, relative)
            except OutsideTarget as exc:
                self.readers[relative] = str(exc)
                return self.readers[relative]
            if not folders.is_file(target):
                self.readers[relative] = None  # missing, or a path that passes a symlink
            else:
                self.paths[relative] = target
                self.extents[relative] = []
                self.readers[relative] = self.handles.enter_context(folders.opened(target))  # shared by many items
        return self.readers[relative]

    def item(self, fqn: str, where: dict[str, Any] | None):
        """(reader, offset, length, relative path) of one stored item, or None with a finding."""
        ckpt, name = self.ckpt, self.folder.name
        if where is None:
            ckpt.add("CORRUPT", f"{name}/.metadata lists {fqn} but says nowhere where its bytes are", fqn)
            return None
        relative = str(where.get("relative_path"))
        offset: Any = where.get("offset")
        length: Any = where.get("length")
        if not _is_span(offset, length):
            ckpt.add("CORRUPT", f"{name}/.metadata: bad offset/length for {fqn}", fqn)
            return None
        reader = self._reader(relative)
        if isinstance(reader, str) or reader is None:
            self._unreadable(fqn, relative, reader)
            return None
        if offset + length > reader.size:
            ckpt.add("CORRUPT", f"{name}/{relative} is truncated: {fqn} needs bytes {offset}..{offset + length} "
                                f"but the file has {reader.size}", fqn)  # fmt: skip
            return None
        if where.get("transform_descriptors"):
            ckpt.metadata.setdefault("dcp_transforms", sorted({str(t) for t in where["transform_descriptors"]}))
        return reader, offset, length, relative

    def _unreadable(self, fqn: str, relative: str, why: str | None) -> None:
        """A data file .metadata names that is not read: outside the folder (`why`), or missing (None)."""
        if why is None:
            self.ckpt.add("MISSING_PARTS", f"{self.folder.name}: {relative} is missing (named by .metadata for {fqn})",
                          fqn)  # fmt: skip
        else:
            self.ckpt.add("CORRUPT", f"{self.folder.name}/.metadata names {why} for {fqn}; not read", fqn)

    def tensor_entry(self, fqn: str, md: dict[str, Any], items: _Items) -> Any:
        dtype = _dtype_of(md.get("properties"))
        size = tuple(md.get("size") or ())
        chunks = list(md.get("chunks") or [])
        if len(chunks) > 1:
            self.ckpt.metadata.setdefault("dcp_sharded", {})[fqn] = list(size)
            # one entry for the tensor: --quick checks its chunks in bulk, the full read opens each
            whole = (self._sharded_tensor(fqn, dtype, size, chunks, items) if self.trust else
                     self._read_sharded(fqn, dtype, size, chunks, items))  # fmt: skip
            if isinstance(whole, TensorInfo):
                self.ckpt.tensors.append(whole)
            return whole
        out = self._chunk_entries(fqn, dtype, chunks, items)
        if len(chunks) <= 1:
            boxes = [_chunk_box(c) for c in chunks]
            self.covered(fqn, size, [b[0] for b in boxes], [b[1] for b in boxes])
        return next(iter(out.values()), None) if len(chunks) == 1 else out

    def covered(self, fqn: str, size: tuple[int, ...], offsets: list[Any], sizes: list[Any]) -> bool:
        """Whether the chunks (their offsets and sizes) cover the tensor exactly once; CORRUPT if not."""
        if self.layouts.covers(size, offsets, sizes):
            return True
        dcp_cover.add_finding(self.ckpt, self.folder.name, fqn, size, len(offsets))
        return False

    def _chunk_entries(self, fqn: str, dtype: str, chunks: list[Any], items: _Items) -> dict[str, TensorInfo]:
        """Each chunk as a tensor of its own (`fqn`, or `fqn[start:stop,...]` when there are several)."""
        out: dict[str, TensorInfo] = {}
        for chunk in chunks:
            cf = _fields(chunk)
            offsets = tuple(cf.get("offsets") or ())
            sizes = tuple(cf.get("sizes") or ())
            name = fqn if len(chunks) == 1 else _chunk_name(fqn, offsets, sizes)
            where = items.get((fqn, offsets))
            if self.trust:
                tensor = self._declared_tensor(name, where, dtype, sizes)
            else:
                tensor = self._read_tensor(name, where, dtype, sizes)
            if tensor is not None:
                self.ckpt.tensors.append(tensor)
                out[name] = tensor
        return out

    def _read_sharded(self, fqn: str, dtype: str, size: tuple[int, ...], chunks: list[Any],
                      items: _Items) -> TensorInfo | dict[str, TensorInfo]:  # fmt: skip
        """A tensor whose chunks lie in many items, as one entry of its global shape whose storage lists every
        chunk's bytes (model.Extents), each item opened and judged as _read_tensor judges it. Each chunk listed
        on its own instead (as _chunk_entries lists them: name -> tensor) when an item holds its chunk in a way
        one extent cannot say: a view into a larger storage, a strided or unaddressable one."""
        read = []
        boxes = []
        for chunk in chunks:
            offsets, sizes = _chunk_box(chunk)
            boxes.append((offsets, sizes))
            name = _chunk_name(fqn, offsets, sizes)
            found = self.item(name, items.get((fqn, offsets)))
            if found is None:
                continue
            reader, offset, length, relative = found
            tensor = _chunk_tensor(self.ckpt, reader, self.paths[relative], offset, length, f"{relative}@{offset}",
                                   name, dtype, sizes)  # fmt: skip
            read.append((offsets, sizes, tensor))
        storages = self.ckpt.storages
        extents = _extents_of(size, read, storages)
        for _offsets, _sizes, tensor in read:
            if tensor is None:
                continue
            if extents is None:
                self.ckpt.tensors.append(tensor)  # each chunk an entry of its own, as before
            else:
                storages.pop(tensor.storage_key, None)  # its bytes are one extent of the tensor's storage
        covered = self.covered(fqn, size, [b[0] for b in boxes], [b[1] for b in boxes])
        if extents is None:
            return {tensor.name: tensor for _offsets, _sizes, tensor in read if tensor is not None}
        extents.whole = covered and len(extents) == len(chunks)  # an unreadable chunk: its finding says so
        key = f"dcp:{fqn}"  # as the --quick listing keys it
        nbytes = (math.prod(size) * self._bits(dtype) + 7) >> 3
        file = extents.files[0] if extents.files else self.folder
        self.ckpt.storages[key] = StorageInfo(key, dtype, nbytes, file, None, None, f"{len(chunks)} chunks",
                                              extents=extents)  # fmt: skip
        return TensorInfo(fqn, dtype, size, contiguous_strides(size), key, 0)

    def _read_tensor(self, name: str, where: dict[str, Any] | None, dtype: str, sizes: tuple[int, ...]):
        """A chunk as its item's own torch.save zip holds it."""
        found = self.item(name, where)
        if found is None:
            return None
        reader, offset, length, relative = found
        key = f"{relative}@{offset}"
        return _chunk_tensor(self.ckpt, reader, self.folder / relative, offset, length, key, name, dtype, sizes)

    def _declared_tensor(self, name: str, where: dict[str, Any] | None, dtype: str,
                         sizes: tuple[int, ...]) -> TensorInfo | None:  # fmt: skip
        """A chunk as `.metadata` declares it: its item must at least hold its bytes. Half a million chunks at 256
        ranks: an item in a file already opened, within it and without transforms takes the short way here;
        anything else goes through item(), which says what is wrong."""
        placed = self._placed(where, name)
        if placed is None:
            return None
        relative, offset, length = placed
        shape = self.shapes.get(sizes)
        if shape is None:
            shape = self.shapes[sizes] = (contiguous_strides(sizes), math.prod(sizes))
        key = f"{relative}@{offset}/0"  # torch.save of one tensor names its storage "0": as the full read keys it
        nbytes = (shape[1] * self._bits(dtype) + 7) >> 3
        if length < nbytes:
            self._short_item(relative, offset, length, name, nbytes)
            return None
        self.ckpt.storages[key] = StorageInfo(key, dtype, nbytes, self.paths[relative], None, None, name)
        self.extents[relative].append((offset, length, name, None))
        return TensorInfo(name, dtype, sizes, shape[0], key, 0)

    def _placed(self, where: Any, name: str, chunk: Any = None) -> tuple[str, int, int] | None:
        """(relative path, offset, length) of an item. Half a million chunks at 256 ranks: an item in a file
        already opened, within it and without transforms takes the short way here; anything else goes through
        item(), which says what is wrong. `name` with `chunk` names it (_extent_name), only when a message needs it."""
        relative = where.get("relative_path") if type(where) is dict else None
        reader = self.readers.get(relative) if type(relative) is str else None
        if reader is not None:
            offset, length = where["offset"], where["length"]
            if not isinstance(reader, str) and _lies_within(offset, length, reader.size, where):
                return relative, offset, length  # type: ignore[return-value]  # relative is a str here
        found = self.item(_extent_name(name, chunk), where)
        return None if found is None else (found[3], found[1], found[2])

    def _bits(self, dtype: str) -> int:
        bits = self.bits.get(dtype)
        if bits is None:
            bits = self.bits[dtype] = dtype_info(dtype).bits
        return bits

    def _sharded_tensor(self, fqn: str, dtype: str, size: tuple[int, ...], chunks: list[Any],
                        items: _Items) -> TensorInfo:  # fmt: skip
        """A tensor whose chunks lie in many items, as one entry of its global shape (its storage the bytes of
        all its chunks; no offset: nothing is read from it). Each chunk is checked as _declared_tensor checks
        one, in one loop that builds no object per chunk: 4,338 entries hold 2.2 million chunks at 1024 ranks."""
        bits = self._bits(dtype)
        numels, extents = self.numels, self.extents
        first = None
        box_offsets, box_sizes = [], []
        for chunk in chunks:
            offsets, sizes = _chunk_box(chunk)
            box_offsets.append(offsets)
            box_sizes.append(sizes)
            numel = numels.get(sizes)
            if numel is None:
                numel = numels[sizes] = math.prod(sizes)
            placed = self._placed(items.get((fqn, offsets)), fqn, chunk)
            if placed is None:
                continue
            relative, offset, length = placed
            if length < (numel * bits + 7) >> 3:
                self._short_item(relative, offset, length, _chunk_name(fqn, offsets, sizes), (numel * bits + 7) >> 3)
                continue
            extents[relative].append((offset, length, fqn, chunk))
            first = first or relative
        key = f"dcp:{fqn}"  # not a place in a file: torch.save names an item's storage `<file>@<offset>/0`
        file = self.paths[first] if first is not None else self.folder
        nbytes = (math.prod(size) * bits + 7) >> 3
        self.ckpt.storages[key] = StorageInfo(key, dtype, nbytes, file, None, None, f"{len(chunks)} chunks")
        self.covered(fqn, size, box_offsets, box_sizes)
        return TensorInfo(fqn, dtype, size, contiguous_strides(size), key, 0)

    def _short_item(self, relative: str, offset: int, length: int, name: str, nbytes: int) -> None:
        self.ckpt.add("CORRUPT", f"{self.folder.name}/{relative} at byte {offset}: {name} needs {nbytes} bytes, "
                                 f".metadata gives it {length}", name)  # fmt: skip

    def check_files(self) -> None:
        """Once per data file: its items do not overlap, and they begin and end as torch.save zips (or are all
        raw bytes, as the safetensors-style serialization writes them)."""
        files = [(relative, extents) for relative, extents in self.extents.items() if extents]
        runs = []
        for relative, extents in files:
            extents.sort(key=_PLACE_IN_FILE)  # torch writes them in order: a pass over a sorted list
            reader = self.readers[relative]
            assert reader is not None and not isinstance(reader, str)  # noqa: S101 - only read files have extents
            runs.append((reader, extents[0][0], extents[-1][0] + extents[-1][1]))
        for (relative, extents), ends in zip(files, zip_ends(runs), strict=True):  # every file's reads at once
            end = 0
            for offset, length, fqn, chunk in extents:
                if offset < end:
                    name = _extent_name(fqn, chunk)
                    self.ckpt.add("CORRUPT", f"{self.folder.name}/{relative}: {name} at byte {offset} overlaps the "
                                             "item before it", name)  # fmt: skip
                    break
                end = offset + length
            if ends is False:  # None: raw bytes, nothing more to check without reading values
                name = _extent_name(extents[-1][2], extents[-1][3])
                self.ckpt.add("CORRUPT", f"{self.folder.name}/{relative}: {name}, its last item, does not end as "
                                         "torch.save ends a file (no end-of-directory record)", name)  # fmt: skip

    def bytes_entry(self, fqn: str, items: _Items) -> Any:
        found = self.item(fqn, items.get((fqn, None)))
        if found is None:
            return None
        reader, offset, length, relative = found
        file = self.folder / relative
        if length > MAX_VALUE_BYTES or reader.read_at(offset, 4) != LOCAL_SIG:
            return _opaque_class("torch.distributed.checkpoint.bytes")(relative, offset, length)  # listed, not decoded
        blob = Checkpoint(path=file, format="torch-zip", file_bytes=length)
        try:
            value = read_zip_into(blob, reader, file, base=offset, end=offset + length,
                                  key_prefix=f"{relative}@{offset}/")  # fmt: skip
        except ZipError as exc:
            self.ckpt.add("CORRUPT", f"{file.name} at byte {offset} ({fqn}): {exc}", fqn)
            return None
        # dcp.load decodes these with torch.load(weights_only=False): allowlists play no part, only UNSAFE does
        blob.findings = [f for f in blob.findings if f.code != "ALLOWLIST_NEEDED"]
        self.ckpt.absorb(blob, fqn, tensor=fqn)
        if blob.storages:  # a tensor inside a non-tensor value (e.g. a list of tensors): list it by path
            for tensor in flatten(value, fqn):
                self.ckpt.tensors.append(tensor)
        return value


def _dtype_of(props: Any) -> str:
    """A TensorProperties' dtype name (the general decoder's stand-in keeps it in `state`)."""
    state = props.state if isinstance(props, Opaque) else None
    return str(state[0] if isinstance(state, tuple) and state else _fields(props).get("dtype", "uint8"))


def _chunk_box(chunk: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A ChunkStorageMetadata's (offsets, sizes) as tuples."""
    cf = chunk.__dict__ if type(chunk) in dcp_metadata.RECORDS else _fields(chunk)
    offsets, sizes = cf.get("offsets"), cf.get("sizes")
    return (offsets if type(offsets) is tuple else tuple(offsets or ()),
            sizes if type(sizes) is tuple else tuple(sizes or ()))  # fmt: skip


def _is_span(offset: Any, length: Any) -> bool:
    return type(offset) is int and type(length) is int and offset >= 0 and length >= 0


def _lies_within(offset: Any, length: Any, size: int, where: dict[str, Any]) -> bool:
    """An item that lies inside its file (of `size` bytes) and was stored without a transform."""
    return (type(offset) is int and type(length) is int and offset >= 0 and length >= 0  # _is_span, inline: per chunk
            and offset + length <= size and not where.get("transform_descriptors"))  # fmt: skip


def _chunk_name(fqn: str, offsets: tuple[int, ...], sizes: tuple[int, ...]) -> str:
    """A chunk as the full listing names it: `fqn[start:stop,...]` per dimension."""
    return f"{fqn}[{','.join(f'{o}:{o + s}' for o, s in zip(offsets, sizes, strict=False))}]"


def _extent_name(name: str, chunk: Any) -> str:
    return name if chunk is None else _chunk_name(name, *_chunk_box(chunk))


_PLACE_IN_FILE = operator.itemgetter(0, 1)  # an extent's (offset, length): what names it is never compared


def _extents_of(size: tuple[int, ...], read: list[Any], storages: dict[str, StorageInfo]) -> Extents | None:
    """The chunks read (offsets, sizes, its tensor or None) as Extents; None when one of them is held other than
    as the whole of a contiguous, addressable storage of its own."""
    extents = Extents(len(size))
    known: dict[Path, int] = {}
    for offsets, sizes, tensor in read:
        if tensor is None:
            continue  # unreadable: its finding says so, and the tensor's bytes are short of it
        storage = storages.get(tensor.storage_key) if len(offsets) == len(size) == len(sizes) else None
        if storage is None or storage.offset is None or not _whole_storage(storage, tensor):
            return None
        extents.add(extents.file_index(storage.file, known), storage.offset, storage.nbytes, storage.crc32,
                    storage.big_endian, offsets, sizes)  # fmt: skip
    return extents


def _whole_storage(storage: StorageInfo, tensor: TensorInfo) -> bool:
    """The tensor is all of its storage, contiguous, its bytes addressable in place."""
    in_place = storage.offset is not None and storage.deflated is None and storage.dtype == tensor.dtype
    return in_place and tensor.is_contiguous and not tensor.storage_offset and storage.nbytes == tensor.nbytes


def _chunk_tensor(ckpt, reader, file: Path, offset: int, length: int, key: str, name: str, dtype: str,
                  sizes: tuple[int, ...]) -> TensorInfo | None:  # fmt: skip
    head = reader.read_at(offset, 4)
    if head != LOCAL_SIG:
        # not a torch.save blob (safetensors-style serialization): raw contiguous bytes
        ckpt.storages[key] = StorageInfo(key, dtype, length, file, offset)
        return TensorInfo(name, dtype, sizes, contiguous_strides(sizes), key, 0)
    blob = Checkpoint(path=file, format="torch-zip", file_bytes=length)
    try:
        value = read_zip_into(blob, reader, file, base=offset, end=offset + length, key_prefix=key + "/")
    except ZipError as exc:
        ckpt.add("CORRUPT", f"{file.name} at byte {offset} ({name}): {exc}", name)
        return None
    ckpt.absorb(blob, name, tensor=name)
    if not isinstance(value, TensorInfo):
        if not any(f.code in ("CORRUPT", "UNSAFE_PICKLE") for f in blob.findings):
            ckpt.add(
                "CORRUPT", f"{file.name} at byte {offset}: {name} is stored as something other than a tensor", name
            )
        return None
    if tuple(value.shape) != sizes:
        ckpt.add("CORRUPT", f"{name}: .metadata says shape {sizes}, the stored tensor has {tuple(value.shape)}", name)
    return value.replace(name=name)
