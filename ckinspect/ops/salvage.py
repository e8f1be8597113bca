"""Recover every whole tensor of a damaged checkpoint and write them as a valid file.

torch zip: the central directory may be gone and the last storages cut short or corrupted. The
local file headers are walked from the start (`zipwalk`), `data.pkl` (written first by torch.save)
is read with the restricted unpickler to learn which tensor lives in which storage, and a tensor is
kept only when its storage member is complete and its CRC-32 holds. safetensors and legacy (pre-1.6)
torch files: every tensor whose bytes lie wholly inside the file is kept (neither has checksums).

Torch is imported only to write a torch file (placeholder tensors, torch.save through
ckinspect.io.atomic, then the recovered bytes written in place: ops.torchio.save_torch); a
safetensors file is written from the raw bytes without it. Either way the bytes stream from the
damaged file in bounded chunks and the pages of its mapping are dropped once read, so memory does
not grow with the file. Nothing from the damaged file is ever executed.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from ckinspect.io.zipdir import LOCAL_SIG
from ckinspect.io.zipwalk import LocalMember, crc32_of, map_file, walk_local_headers
from ckinspect.model import StorageInfo, TensorInfo, contiguous_strides
from ckinspect.ops.rawtensors import StorageSource
from ckinspect.optional import require_torch
from ckinspect.record import Record, field
from ckinspect.vocab import SALVAGE_KEY, CkinspectError


class SalvageResult(Record):
    __hash__ = None  # type: ignore[assignment]  # changed after it is built

    source: Path
    out: Path
    source_format: str
    out_format: str
    recovered: list[str] = field(default_factory=list)
    missing: list[tuple[str, str]] = field(default_factory=list)  # (tensor name, why)
    dropped: list[tuple[str, str]] = field(default_factory=list)  # non-tensor values that could not be carried over
    notes: list[str] = field(default_factory=list)
    out_bytes: int = 0
    unsafe: str = ""  # the source's UNSAFE_PICKLE message: it names code-running globals (none of them ran)

    def to_json(self) -> dict[str, Any]:
        return {
            **super().to_json(),
            "missing": [{"tensor": n, "why": w} for n, w in self.missing],
            "dropped": [{"path": n, "why": w} for n, w in self.dropped],
        }


class StorageBytes(Record):
    """One storage member as found in the damaged file."""

    key: str
    member: LocalMember
    state: str  # "ok" | "cut short" | "CRC mismatch" | "compressed" (an absent storage has no entry)

    @property
    def ok(self) -> bool:
        return self.state == "ok"


def salvage(broken: str | Path, out: str | Path) -> SalvageResult:
    broken, out = Path(broken), Path(out)
    if not broken.is_file():
        raise CkinspectError(f"{broken}: not a file" if broken.exists() else f"{broken}: no such file")
    if out.resolve() == broken.resolve():
        raise CkinspectError("OUT must differ from BROKEN: salvage never overwrites the damaged file")
    try:
        buf = map_file(broken)
    except OSError as exc:
        raise CkinspectError(f"cannot read {broken}: {exc.strerror or exc}") from None
    head = bytes(buf[:8])
    if head.startswith(LOCAL_SIG):
        return _judged(_salvage_torch_zip(broken, out, buf))
    if len(head) == 8 and 2 <= struct.unpack("<Q", head)[0] <= 100_000_000:
        return _salvage_safetensors(broken, out, buf)
    if head.startswith(b"\x80"):
        return _salvage_legacy(broken, out)
    raise CkinspectError(f"{broken}: neither a torch zip nor a safetensors file; nothing to salvage from")


def _judged(result: SalvageResult) -> SalvageResult:
    """The source judged as --report judges it: salvage reads one data.pkl by its local headers, but a
    zip can hold other pickles (or another directory) that torch.load would run. Said, never run."""
    from ckinspect.formats import open_checkpoint

    unsafe = [f.message for f in open_checkpoint(result.source).findings if f.code == "UNSAFE_PICKLE"]
    if unsafe:
        result.unsafe = unsafe[0]
        result.notes.append(f"UNSAFE_PICKLE in the source: {unsafe[0]} Only the recovered tensors were written.")
    return result


# ----------------------------------------------------------------------------------------- torch


def zip_storages(buf) -> tuple[LocalMember | None, dict[str, StorageBytes]]:
    """data.pkl's member and every `data/<key>` storage member, judged whole or not (a save whose every
    CRC-32 is 0, torch.save under compute_crc32=False, is judged by completeness alone)."""
    pickle_member = None
    found: dict[str, LocalMember] = {}
    recorded = False
    for m in walk_local_headers(buf):
        recorded = recorded or bool(m.crc32)
        prefix, _, rest = m.name.partition("/")
        if rest == "data.pkl" and pickle_member is None:
            pickle_member = m
        elif rest.startswith("data/"):
            found[rest[len("data/") :]] = m
    storages = {key: StorageBytes(key, m, _member_state(buf, m, recorded)) for key, m in found.items()}
    return pickle_member, storages


def _member_state(buf, m: LocalMember, crcs_recorded: bool = True) -> str:
    if m.method != 0:
        return "compressed"
    if m.size is None or m.crc32 is None:  # not m.complete
        return "cut short"
    if crcs_recorded and crc32_of(buf, m.data_offset, m.size) != m.crc32:
        return "CRC mismatch"
    return "ok"


def _big_endian(buf) -> bool:
    """The archive's byteorder record says "big" (torch then swaps its typed storages on load)."""
    for m in walk_local_headers(buf):
        if m.name.partition("/")[2] == "byteorder" and m.size is not None and m.method == 0:
            return bytes(buf[m.data_offset : m.data_offset + m.size]) == b"big"
    return False


def _salvage_torch_zip(broken: Path, out: Path, buf) -> SalvageResult:
    from ckinspect.formats.unpickler import StorageRef, restricted_load, storage_persistent_load

    result = SalvageResult(broken, out, "torch-zip", _out_format(out))
    pickle_member, storages = zip_storages(buf)
    if pickle_member is None or not pickle_member.complete:
        raise CkinspectError(
            f"{broken}: data.pkl is lost or cut short, so no tensor can be told from another; nothing salvaged"
        )
    state = _member_state(
        buf, pickle_member, any(s.member.crc32 for s in storages.values()) or bool(pickle_member.crc32)
    )
    if state != "ok":
        raise CkinspectError(f"{broken}: data.pkl {state}; refusing to guess the tensors' layout")
    data = bytes(buf[pickle_member.data_offset : pickle_member.end])
    refs: dict[str, StorageRef] = {}

    def remember(pid: Any) -> Any:
        ref = storage_persistent_load(pid)
        refs[ref.key] = ref
        return ref

    try:
        tree = restricted_load(data, remember)
    except Exception as exc:  # UnsafePickle / CorruptPickle: say what it was, do not run it
        raise CkinspectError(f"{broken}: data.pkl cannot be read safely ({type(exc).__name__}: {exc})") from exc
    big = _big_endian(buf)

    def storage_bytes(info) -> StorageSource | None:
        st = storages.get(info.storage_key)
        if st is None or not st.ok or st.member.size is None:
            return None
        ref = refs.get(info.storage_key)
        swapped = big and ref is not None and not ref.untyped  # as torch.load swaps: typed storages only
        source = _file_range(broken, st.key, st.member.data_offset, st.member.size)
        if swapped and source.storage is not None:
            source.storage.dtype, source.storage.big_endian = ref.dtype, True  # type: ignore[union-attr]
        return source

    def why_missing(info) -> str:
        st = storages.get(info.storage_key)
        if st is None:
            return f"storage {info.storage_key} is not in the file (cut off before it)"
        if st.ok:
            return f"storage {info.storage_key} is shorter than the tensor's view"
        return f"storage {info.storage_key} {st.state}"

    _write_tree(tree, result, storage_bytes, why_missing)
    return result


def _file_range(path: Path, key: str, offset: int, nbytes: int) -> StorageSource:
    """A storage's bytes where they lie in the damaged file, read in bounded chunks when written."""
    return StorageSource(StorageInfo(key, "uint8", nbytes, path, offset))


def _out_format(out: Path) -> str:
    return "safetensors" if out.suffix == ".safetensors" else "torch-zip"


def _write_tree(tree, result: SalvageResult, storage_bytes, why_missing) -> None:
    """Rebuild the tree with every recovered TensorInfo and write it: a torch file through torch, a
    safetensors file from the raw bytes (no torch needed)."""
    if result.out_format == "safetensors":
        from ckinspect.ops.rawtensors import raw_tensors, raw_to_safetensors

        built = raw_tensors(tree, storage_bytes)
    else:
        require_torch("writing a torch file")
        from ckinspect.ops.torchio import rebuild_tree

        built = rebuild_tree(tree, storage_bytes)
    result.recovered = [name for name, _t in built.tensors]
    result.missing = [(name, why_missing(info)) for name, info in built.missing]
    result.dropped = built.dropped
    if result.out_format == "safetensors":
        size, notes = raw_to_safetensors(result.out, built.tensors, metadata=_provenance(result))
        result.notes += notes
    else:
        from ckinspect.ops.torchio import save_torch

        size = save_torch(result.out, _recorded(built.tree, result), built.fills)
    result.out_bytes = size


def _provenance(result: SalvageResult) -> dict[str, str]:
    """What a safetensors output records of its salvage (its header's metadata, strings only): the source
    and every tensor that was lost, so a later `--report` of the output can say what it lacks."""
    meta = {"salvaged_from": result.source.name}
    if result.missing:
        meta["salvage_missing"] = json.dumps([name for name, _why in result.missing])
    if result.dropped:
        meta["salvage_dropped"] = json.dumps([path for path, _why in result.dropped])
    return meta


def _recorded(tree: Any, result: SalvageResult) -> Any:
    """A torch output that lost anything says so inside: a top-level SALVAGE_KEY of plain strings (loadable
    with weights_only=True), which `--report` turns into SALVAGED_PARTIAL, so it is never taken for whole."""
    if not (result.missing or result.dropped):
        return tree
    if not isinstance(tree, dict):
        result.notes.append(f"the output's top level is a {type(tree).__name__}, which has no place to record "
                            "what was lost: only this report says it")  # fmt: skip
        return tree
    meta = _provenance(result)
    record = {"salvaged_from": meta["salvaged_from"]}
    record["missing"] = [name for name, _why in result.missing]  # type: ignore[assignment]
    record["dropped"] = [path for path, _why in result.dropped]  # type: ignore[assignment]
    return {**tree, SALVAGE_KEY: record}


# ------------------------------------------------------------------------------------ torch legacy


def _salvage_legacy(broken: Path, out: Path) -> SalvageResult:
    """Pre-1.6 torch files: the pickle comes first and the storages follow inline, without checksums,
    so a storage is kept when the reader found all of its bytes inside the file."""
    from ckinspect.formats import open_checkpoint

    ckpt = open_checkpoint(broken)
    if ckpt.format != "torch-legacy" or ckpt.tree is None:
        problems = [f.message for f in ckpt.findings if f.code in ("CORRUPT", "UNSAFE_PICKLE")]
        why = problems[0] if problems else "its pickle is unreadable"
        raise CkinspectError(f"{broken}: nothing to salvage from ({why})")
    size = broken.stat().st_size
    result = SalvageResult(broken, out, "torch-legacy", _out_format(out))

    def storage_bytes(info):
        st = ckpt.storages.get(info.storage_key)
        if st is None or st.offset is None or st.offset + st.nbytes > size:
            return None
        return StorageSource(st)

    def why_missing(info):
        return f"storage {info.storage_key} cut short or not in the file"

    _write_tree(ckpt.tree, result, storage_bytes, why_missing)
    return result


# ----------------------------------------------------------------------------------- safetensors


def _salvage_safetensors(broken: Path, out: Path, buf) -> SalvageResult:
    from ckinspect.dtypes import SAFETENSORS_DTYPES, dtype_info
    from ckinspect.formats.safetensors import check_entry
    from ckinspect.io.safetensors_write import Entry, write_safetensors

    result = SalvageResult(broken, out, "safetensors", _out_format(out))
    size = len(buf)
    n = struct.unpack("<Q", bytes(buf[:8]))[0]
    if 8 + n > size:
        raise CkinspectError(f"{broken}: the header itself is cut short ({size - 8} of {n} bytes); nothing to locate")
    try:
        header = json.loads(bytes(buf[8 : 8 + n]))
    except ValueError as exc:
        raise CkinspectError(f"{broken}: the header is not JSON ({exc}); no tensor can be located") from exc
    if not isinstance(header, dict):
        kind = type(header).__name__
        raise CkinspectError(f"{broken}: the header is JSON {kind}, not an object; no tensor can be located")
    base = 8 + n
    meta = header.pop("__metadata__", None)
    meta = {str(k): str(v) for k, v in meta.items()} if isinstance(meta, dict) else {}
    located: list[tuple[int, str, int, str, tuple[int, ...]]] = []  # (begin, name, end, dtype code, shape)
    for name, spec in header.items():
        parsed, problem = check_entry(spec)
        if parsed is None:
            result.missing.append((name, f"its header entry cannot be trusted: {problem}"))
        else:
            code, shape, begin, end = parsed
            located.append((begin, name, end, code, shape))
    kept: list[tuple[str, str, tuple[int, ...], int, int]] = []  # (name, dtype, shape, begin, end)
    for begin, name, end, code, shape in sorted(located):
        dtype = SAFETENSORS_DTYPES[code]
        if dtype_info(dtype).bits % 8 and result.out_format != "safetensors":
            result.missing.append((name, f"torch has no {code} dtype: salvage to a .safetensors file keeps it"))
        elif base + end <= size:
            kept.append((name, dtype, shape, begin, end))
        else:
            have = max(0, size - base - begin)
            result.missing.append((name, f"cut short: {have} of {end - begin} bytes in the file"))
    result.recovered = [name for name, *_ in kept]
    sources = {name: _file_range(broken, name, base + begin, end - begin) for name, _d, _s, begin, end in kept}
    if result.out_format == "safetensors":
        entries = [Entry(name, dtype, shape, sources[name].chunks) for name, dtype, shape, _b, _e in kept]
        result.out_bytes = write_safetensors(out, entries, {**meta, **_provenance(result)})
    else:
        require_torch("writing a torch file")
        from ckinspect.ops.torchio import rebuild_tree, save_torch

        flat = {n: TensorInfo(n, dtype, shape, contiguous_strides(shape), n) for n, dtype, shape, *_ in kept}
        built = rebuild_tree(flat, lambda info: sources[info.storage_key])
        result.out_bytes = save_torch(out, built.tree, built.fills)
    return result
