"""safetensors: 8-byte little-endian header length, a JSON header, then raw tensor bytes.

We parse the header ourselves (stdlib json only) so listing never touches tensor data, never
imports torch or the safetensors package, and every inconsistency becomes a precise CORRUPT
finding instead of an exception. The checks mirror safetensors' own `validate`.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from ckinspect.dtypes import SAFETENSORS_DTYPES, dtype_info
from ckinspect.fmt import human_bytes
from ckinspect.formats.tree import no_gc
from ckinspect.io.reader import FileReader
from ckinspect.model import Checkpoint, StorageInfo, TensorInfo, contiguous_strides

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAX_HEADER_BYTES = 100_000_000  # safetensors refuses larger headers (HeaderTooLarge)
MAX_FINDINGS = 10  # a broken 50,000-tensor header should not drown the report

# Bits per element of every dtype safetensors knows; F4 and F6 are packed, without padding per element.
_BITS: dict[str, int] = {code: dtype_info(name).bits for code, name in SAFETENSORS_DTYPES.items()}


def read_safetensors(path: str | os.PathLike[str], member: str | None = None, reader: Any = None) -> Checkpoint:
    """List a safetensors file from its header alone. Never raises for bad content.

    `member` names the file in storage messages (the sharded reader passes the shard name); `reader`
    (a remote object's positioned reads, ckinspect.io.remote) replaces opening `path`.
    """
    if reader is None:
        path = Path(path)  # else a URL where a Path is expected
    ckpt = Checkpoint(path=path, format="safetensors", file_bytes=0, files=[path])  # type: ignore[arg-type,list-item]
    try:
        with contextlib.ExitStack() as stack:
            if reader is None:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
                stack.callback(os.close, fd)
                file_bytes = os.fstat(fd).st_size
                read = FileReader(fd, file_bytes).read_at
            else:
                file_bytes, read = reader.size, reader.read_at
            ckpt.file_bytes = file_bytes
            prefix = read(0, 8)
            if len(prefix) < 8:
                ckpt.add("CORRUPT", f"safetensors file is {len(prefix)} bytes, shorter than the 8-byte header length")
                return ckpt
            header_len = int.from_bytes(prefix, "little")
            if header_len > MAX_HEADER_BYTES:
                ckpt.add(
                    "CORRUPT",
                    f"safetensors header length {header_len:,} bytes exceeds safetensors' limit of "
                    f"{MAX_HEADER_BYTES:,} bytes ({human_bytes(MAX_HEADER_BYTES)})",
                )
                return ckpt
            if 8 + header_len > file_bytes:
                ckpt.add(
                    "CORRUPT",
                    f"safetensors header length {header_len:,} bytes runs past the end of the "
                    f"{file_bytes:,}-byte file (truncated?)",
                )
                return ckpt
            raw = read(8, header_len)
    except OSError as exc:
        ckpt.add("CORRUPT", f"cannot read safetensors file: {exc.strerror or exc}")
        return ckpt
    with no_gc():  # 50,000 entries allocate ~1M objects and no cycles: collector passes would add ~30%
        _parse_header(ckpt, raw, header_len, file_bytes, member)
    return ckpt


def _parse_header(ckpt: Checkpoint, raw: bytes, header_len: int, file_bytes: int, member: str | None) -> None:
    header = _decoded_header(ckpt, raw)
    if header is None:
        return
    problems: list[str] = []
    _read_metadata(ckpt, header.pop("__metadata__", None), problems)
    spans, malformed = _entry_spans(header, problems)
    _tile(ckpt, spans, 8 + header_len, file_bytes - 8 - header_len, malformed, member, problems)
    ckpt.tree = {t.name: t for t in ckpt.tensors}
    for message in problems[:MAX_FINDINGS]:
        ckpt.add("CORRUPT", message)
    if len(problems) > MAX_FINDINGS:
        ckpt.add("CORRUPT", f"... and {len(problems) - MAX_FINDINGS:,} more safetensors header problems")


def _decoded_header(ckpt: Checkpoint, raw: bytes) -> dict[str, Any] | None:
    """The header's JSON object, or None with a CORRUPT finding saying why it is not one."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        ckpt.add("CORRUPT", f"safetensors header is not valid UTF-8 (byte {exc.start} of the header)")
        return None
    try:
        header = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        ckpt.add("CORRUPT", f"safetensors header is not valid JSON{where}: {getattr(exc, 'msg', exc)}")
        return None
    if not isinstance(header, dict):
        ckpt.add("CORRUPT", f"safetensors header is JSON {type(header).__name__}, not an object")
        return None
    return header


def _read_metadata(ckpt: Checkpoint, metadata: object, problems: list[str]) -> None:
    if metadata is None:
        return
    if not isinstance(metadata, dict):
        problems.append("__metadata__ is not an object of strings")
        return
    for key, value in metadata.items():
        if isinstance(value, str):
            ckpt.metadata[key] = value
        else:
            problems.append(f"__metadata__[{key!r}] is {type(value).__name__}, not a string")


def _entry_spans(header: dict[str, Any], problems: list[str]) -> tuple[list[tuple[int, int, str, TensorInfo]], int]:
    """(begin, end, name, entry) for every well-formed entry, for the coverage check, and how many were not."""
    spans: list[tuple[int, int, str, TensorInfo]] = []
    strides_of: dict[tuple[int, ...], tuple[int, ...]] = {}  # shapes repeat: compute strides once each
    malformed = 0  # entries we could not place: gaps they leave are their fault, not reported again
    for name, entry in header.items():
        parsed, problem = check_entry(entry)
        if parsed is None:
            problems.append(f"tensor {name!r}: {problem}")
            malformed += 1
            continue
        code, shape, begin, end = parsed
        stride = strides_of.get(shape)
        if stride is None:
            stride = strides_of[shape] = contiguous_strides(shape)
        spans.append((begin, end, name, TensorInfo(name, SAFETENSORS_DTYPES[code], shape, stride, name)))
    return spans, malformed


def _tile(ckpt: Checkpoint, spans: list[tuple[int, int, str, TensorInfo]], data_start: int, data_bytes: int,
          malformed: int, member: str | None, problems: list[str]) -> None:  # fmt: skip
    """Buffers must tile the data section exactly: no overlap, no gap, nothing past the end, nothing after."""
    spans.sort()  # by (begin, end, name): names are unique, so the descriptors are never compared
    covered = 0
    tensors, storages, path = ckpt.tensors, ckpt.storages, ckpt.path
    for begin, end, name, info in spans:
        problems += _span_problems(begin, end, name, covered, data_bytes, malformed)
        covered = max(covered, end)
        tensors.append(info)
        offset = None if end > data_bytes else data_start + begin
        storages[name] = StorageInfo(name, info.dtype, end - begin, path, offset, member=member)
    if covered < data_bytes and not malformed:
        extra = data_bytes - covered
        problems.append(f"{extra:,} trailing byte{'s' if extra != 1 else ''} after the last tensor")


def _span_problems(begin: int, end: int, name: str, covered: int, data_bytes: int, malformed: int) -> list[str]:
    out = []
    if begin < covered:
        out.append(f"tensor {name!r}: offsets [{begin}, {end}] overlap the previous tensor (ends at {covered})")
    elif begin > covered and not malformed:
        out.append(f"gap of {begin - covered:,} unused bytes before tensor {name!r} (offsets {covered}..{begin})")
    if end > data_bytes:
        out.append(f"tensor {name!r}: offsets [{begin}, {end}] run past the end of the data "
                   f"({data_bytes:,} bytes; file truncated?)")  # fmt: skip
    return out


def check_entry(entry: object) -> tuple[tuple[str, tuple[int, ...], int, int] | None, str | None]:
    """A header entry as ((dtype code, shape, begin, end), None), or (None, why not): malformed, or
    its offsets hold another number of bytes than its dtype and shape need."""
    parsed = _well_formed(entry)
    if parsed is None:
        return None, _entry_problem(entry) or "malformed"
    code, shape, begin, end = parsed
    numel = 1
    for size in shape:
        numel *= size
    bits = numel * _BITS[code]
    if bits % 8:
        return None, f"{numel} {code} elements do not fill whole bytes"
    if end - begin != bits // 8:
        return None, f"offsets [{begin}, {end}] hold {end - begin:,} bytes but {code} {list(shape)} needs {bits // 8:,}"
    return parsed, None


def _well_formed(entry: object) -> tuple[str, tuple[int, ...], int, int] | None:
    """(dtype code, shape, begin, end) for a valid entry; None sends it to _entry_problem for the why.

    The fast path for 50,000-tensor headers: exact type checks, no generators.
    """
    if type(entry) is not dict:
        return None
    code, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if type(code) is not str or code not in _BITS or type(shape) is not list or type(offsets) is not list:
        return None
    for size in shape:
        if type(size) is not int or size < 0:
            return None
    if len(offsets) != 2:
        return None
    begin, end = offsets
    if type(begin) is not int or type(end) is not int or not 0 <= begin <= end:
        return None
    return code, tuple(shape), begin, end


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _entry_problem(entry: object) -> str | None:
    """Why a header entry is malformed, or None when it is well-formed."""
    if not isinstance(entry, dict):
        return f"entry is {type(entry).__name__}, not an object"
    code = entry.get("dtype")
    if not isinstance(code, str):
        return "no dtype"
    if code not in _BITS:
        return f"unknown dtype {code!r}"
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(_is_count(s) for s in shape):
        return f"shape {shape!r} is not a list of non-negative integers"
    offsets = entry.get("data_offsets")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(o) for o in offsets)):
        return f"data_offsets {offsets!r} is not [begin, end]"
    if offsets[1] < offsets[0]:
        return f"data_offsets {offsets!r} end before they begin"
    return None
