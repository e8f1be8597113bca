"""Write a safetensors file, streaming, through ckinspect.io.atomic. No torch needed.

The format: 8-byte little-endian header length, a JSON header (padded with spaces to 8 bytes),
then the tensors' raw bytes back to back; each tensor owns its own bytes (no sharing).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator

from ckinspect.dtypes import SAFETENSORS_DTYPES, dtype_info
from ckinspect.io.atomic import atomic_write
from ckinspect.record import Record

TO_SAFETENSORS = {v: k for k, v in SAFETENSORS_DTYPES.items()}


class Entry(Record):
    name: str
    dtype: str  # torch-style name: float32, bfloat16 ...
    shape: tuple[int, ...]
    chunks: Callable[[], Iterable[bytes | memoryview]]  # yields the tensor's bytes, C order

    @property
    def nbytes(self) -> int:
        n = dtype_info(self.dtype).bits
        for d in self.shape:
            n *= d
        return (n + 7) >> 3  # F4 and F6 pack their elements


def header_bytes(entries: list[Entry], metadata: dict[str, str] | None = None) -> bytes:
    header: dict = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for e in entries:
        if e.dtype not in TO_SAFETENSORS:
            raise ValueError(f"{e.name}: safetensors has no dtype for {e.dtype}")
        span = [offset, offset + e.nbytes]
        header[e.name] = {"dtype": TO_SAFETENSORS[e.dtype], "shape": list(e.shape), "data_offsets": span}
        offset += e.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return len(raw).to_bytes(8, "little") + raw


def write_safetensors(
    path: str | os.PathLike[str], entries: list[Entry], metadata: dict[str, str] | None = None
) -> int:
    """Write atomically; returns the file size. Raises ValueError when a tensor's bytes do not match its shape."""
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ValueError("duplicate tensor names")
    head = header_bytes(entries, metadata)
    total = len(head)
    with atomic_write(path) as handle:
        handle.write(head)
        for e in entries:
            written = 0
            for chunk in _iter(e.chunks()):
                handle.write(chunk)
                written += len(chunk)
            if written != e.nbytes:
                raise ValueError(f"{e.name}: {written} bytes given for {e.nbytes}")
            total += written
    return total


def _iter(chunks: Iterable[bytes | memoryview]) -> Iterator[bytes | memoryview]:
    for c in chunks:
        if len(c):
            yield c
