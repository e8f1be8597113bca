"""NumPy `.npy` arrays and `.npz` archives (a zip of `.npy` members, as `np.savez` writes them).

    .npy: b"\\x93NUMPY" | major | minor | header length (2 bytes in 1.0, 4 in 2.0/3.0) | header (a Python
          dict literal: descr, fortran_order, shape) | the raw array bytes, or a pickle for object arrays

Arrays of plain dtypes become tensors whose bytes are addressed in place (stored npz members included;
np.savez_compressed's deflated members are streamed through io.values, never inflated whole); object
arrays are pickles: scanned like any pickle, never loaded. No numpy import.
"""

from __future__ import annotations

import ast
import os
import re
import zlib
from pathlib import Path
from typing import Any

from ckinspect.dtypes import NUMPY_CODES
from ckinspect.formats.opening import reading
from ckinspect.formats.pickle_findings import check_views, record_globals
from ckinspect.formats.pickle_scan import scan_stream
from ckinspect.formats.sniff import NPY_MAGIC
from ckinspect.formats.tree import ROOT_TENSOR_NAME
from ckinspect.io.reader import PositionedReader
from ckinspect.io.remote import as_path
from ckinspect.io.zipdir import ZipError, ZipMember, data_offset, read_directory
from ckinspect.model import Checkpoint, StorageInfo, TensorInfo
from ckinspect.vocab import CkinspectError

MAX_HEADER_BYTES = 1 << 16  # numpy itself refuses headers over 10,000 bytes unless told otherwise
MAX_OBJECT_PICKLE_BYTES = 256 << 20


_PY2_LONG = re.compile(r"\b(\d+)L\b")


class NpyError(CkinspectError, ValueError):
    """The .npy header is missing or does not add up."""


def read_numpy(path: str | os.PathLike[str], reader: PositionedReader | None = None) -> Checkpoint:
    """List a .npy or .npz file. Never raises for bad content: problems become findings."""
    path = as_path(path)  # a URL stays one: its bytes come from `reader`
    with reading(path, "numpy", reader) as (ckpt, opened):
        if opened.read_at(0, len(NPY_MAGIC)) == NPY_MAGIC:
            _add_array(ckpt, opened, path, ROOT_TENSOR_NAME, 0, opened.size, path.name)
        else:
            _read_npz(ckpt, opened, path)
    tree: dict[str, TensorInfo] = {}
    for t in ckpt.tensors:
        tree[t.name] = t
    ckpt.tree = tree
    check_views(ckpt)
    return ckpt


def _read_npz(ckpt: Checkpoint, reader: PositionedReader, path: Path) -> None:
    try:
        members, cd_start = read_directory(reader)
    except ZipError as exc:
        ckpt.add("CORRUPT", f"{path.name}: {exc}")
        return
    arrays = [m for m in members if m.name.endswith(".npy")]
    ckpt.metadata["arrays"] = len(arrays)
    for member in arrays:
        name = member.name[: -len(".npy")]
        where = f"{path.name}:{member.name}"
        try:
            start = data_offset(reader, member)
        except ZipError as exc:
            ckpt.add("CORRUPT", f"{where}: {exc}")
            continue
        if start + member.compressed_size > cd_start:
            ckpt.add("CORRUPT", f"{where} runs past the end of the data")
            continue
        if member.compress_type == 0:
            _add_array(ckpt, reader, path, name, start, start + member.file_size, where, member)
        elif member.compress_type == 8:
            _add_compressed_array(ckpt, reader, path, name, start, member, where)
        else:
            ckpt.add("CORRUPT", f"{where} uses zip compression method {member.compress_type}, which numpy cannot read")


def parse_header(head: bytes) -> tuple[int, dict]:
    """(offset of the array data, header dict) of a .npy that starts with `head`. Raises NpyError."""
    if not head.startswith(NPY_MAGIC) or len(head) < 10:
        raise NpyError("no .npy magic")
    begin, text = _header_text(head)
    try:
        header = ast.literal_eval(text)  # literals only: nothing is evaluated
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise NpyError(f".npy header is not a dict literal ({type(exc).__name__})") from None
    if not isinstance(header, dict) or not {"descr", "fortran_order", "shape"} <= header.keys():
        raise NpyError(".npy header lacks descr, fortran_order or shape")
    shape = header["shape"]
    if not isinstance(shape, tuple) or not all(type(n) is int and n >= 0 for n in shape):
        raise NpyError(f".npy shape {shape!r:.60} is not a tuple of sizes")
    return begin, header


def _header_text(head: bytes) -> tuple[int, str]:
    """(offset of the array data, the header's text) by the format version's length field. Raises NpyError."""
    major = head[6]
    if major == 1:
        length, begin = int.from_bytes(head[8:10], "little"), 10
    elif major in (2, 3):
        length, begin = int.from_bytes(head[8:12], "little"), 12
    else:
        raise NpyError(f".npy format version {major}.{head[7]} is unknown")
    if length > MAX_HEADER_BYTES or begin + length > len(head):
        raise NpyError(f".npy header of {length} bytes runs past what the file holds")
    text = head[begin : begin + length].decode("utf-8" if major == 3 else "latin1", "replace")
    return begin + length, _PY2_LONG.sub(r"\1", text)  # numpy 1.x on Python 2 wrote sizes as 3L


def _dtype_of(descr: object) -> tuple[str | None, str]:
    """(our dtype name or None, what it is, for messages)."""
    if not isinstance(descr, str):
        return None, "a structured dtype"
    order, code = (descr[0], descr[1:]) if descr[:1] in "<>|=" else ("|", descr)
    if code in ("O", "O4", "O8"):  # Python 2 era files spell the item size
        return None, "object"
    name = NUMPY_CODES.get(code)
    if name is None:
        return None, f"dtype {descr!r:.20}"
    return name, descr


def _add_array(ckpt: Checkpoint, reader: PositionedReader, path: Path, name: str, start: int, end: int, where: str,
               member: ZipMember | None = None) -> None:  # fmt: skip
    head = reader.read_at(start, min(end - start, MAX_HEADER_BYTES + 12))
    try:
        data_start, header = parse_header(head)
    except NpyError as exc:
        ckpt.add("CORRUPT", f"{where}: {exc}")
        return
    _add_described(ckpt, path, name, start + data_start, end - start - data_start, header, where, member,
                   lambda n: reader.read_at(start + data_start, n))  # fmt: skip


def _add_compressed_array(ckpt: Checkpoint, reader: PositionedReader, path: Path, name: str, start: int,
                          member: ZipMember, where: str) -> None:  # fmt: skip
    """np.savez_compressed: the header comes from inflating the first bytes; the data cannot be addressed in place."""
    inflater = zlib.decompressobj(-15)
    try:
        head = inflater.decompress(reader.read_at(start, min(member.compressed_size, 1 << 16)), MAX_HEADER_BYTES + 12)
        data_start, header = parse_header(head)
    except (zlib.error, NpyError) as exc:
        ckpt.add("CORRUPT", f"{where}: {exc}")
        return

    def payload(n: int) -> bytes:
        raw = reader.read_at(start, member.compressed_size)
        return zlib.decompressobj(-15).decompress(raw, data_start + n)[data_start:]

    deflated = (start, member.compressed_size, data_start, member.file_size, member.crc32)  # streamed by io.values
    _add_described(ckpt, path, name, None, member.file_size - data_start, header, where, member, payload, deflated)


def _add_described(ckpt: Checkpoint, path: Path, name: str, offset: int | None, available: int, header: dict,
                   where: str, member: ZipMember | None, payload,
                   deflated: tuple[int, int, int, int, int] | None = None) -> None:  # fmt: skip
    """One array: a tensor over `available` bytes at `offset` (None: inside a compressed member, `deflated`)."""
    shape: tuple[int, ...] = header["shape"]
    dtype, what = _dtype_of(header["descr"])
    if what == "object":
        _scan_object_array(ckpt, payload, where)
        return
    if dtype is None:
        ckpt.metadata.setdefault("arrays_not_listed", []).append(f"{name} ({what})")
        return
    tensor = TensorInfo(name, dtype, shape, _strides(shape, bool(header["fortran_order"])), f"npy/{name}", 0, "other")
    nbytes = tensor.numel * tensor.itemsize
    if available < nbytes:
        ckpt.add(
            "CORRUPT", f"{where}: the array needs {nbytes} bytes but the file holds {max(available, 0)} (truncated)"
        )
        nbytes, offset, deflated = 0, None, None  # the array cannot be read whole: no bytes are offered as its own
    member_name = member.name if member is not None else None
    big = header["descr"][:1] == ">" and tensor.itemsize > 1  # read swapped, as numpy reads it (io.values)
    ckpt.storages[tensor.storage_key] = StorageInfo(tensor.storage_key, dtype, nbytes, path, offset, None, member_name,
                                                    big_endian=big, deflated=deflated)  # fmt: skip
    ckpt.tensors.append(tensor)


def _strides(shape: tuple[int, ...], fortran: bool) -> tuple[int, ...]:
    strides = []
    step = 1
    for n in reversed(shape) if not fortran else shape:
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides)) if not fortran else tuple(strides)


def _scan_object_array(ckpt: Checkpoint, payload, where: str) -> None:
    """An object array is a pickle (np.load(allow_pickle=True) runs it): scan it, report what it names."""
    data = payload(MAX_OBJECT_PICKLE_BYTES)
    scans = scan_stream(data, limit=1)
    ckpt.metadata["object_arrays"] = ckpt.metadata.get("object_arrays", 0) + 1
    if not scans or scans[0].error is not None:
        ckpt.add("CORRUPT", f"{where}: object array whose pickle is unreadable: {scans[0].error if scans else 'empty'}")
        return
    _judge_object_pickle(ckpt, scans[0].globals, where)


def _judge_object_pickle(ckpt: Checkpoint, names_globals: list[Any], where: str) -> None:
    """UNSAFE_PICKLE for a global that runs code, else ALLOWLIST_NEEDED (once per file)."""
    unsafe = [g for g in names_globals if g.kind == "unsafe"]
    for g in names_globals:
        if g.qualname not in ckpt.globals:
            ckpt.globals.append(g.qualname)
    if unsafe:
        record_globals(ckpt, unsafe, f"{where} (an object array: np.load(allow_pickle=True) unpickles it)")
        ckpt.findings = [f for f in ckpt.findings if f.code != "ALLOWLIST_NEEDED"]  # allowing pickles would not do
    elif not any(f.code in ("ALLOWLIST_NEEDED", "UNSAFE_PICKLE") for f in ckpt.findings):
        _allowlist_needed(ckpt, names_globals, where)


def _allowlist_needed(ckpt: Checkpoint, names_globals: list[Any], where: str) -> None:
    """A benign object array: np.load refuses it unless pickles are allowed; say how to load it."""
    names = ", ".join(g.qualname for g in names_globals) or "none"
    load = "dict(numpy.load(PATH, allow_pickle=True, encoding='latin1'))" if ":" in where else \
        "numpy.load(PATH, allow_pickle=True, encoding='latin1')"  # fmt: skip
    ckpt.add(
        "ALLOWLIST_NEEDED",
        f"{where} holds an object array, a pickle that np.load refuses unless pickles are allowed; it names only "
        f"globals that build data ({names}). To load it: `import numpy`, then `{load}`.",
    )
