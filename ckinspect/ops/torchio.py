"""The torch side of salvage and convert: build real tensors from raw bytes and write files.

Imported only by commands that write torch or safetensors files from tensors; the readers never
import it. Input files are never torch.load-ed here: bytes come from our readers.
"""

from __future__ import annotations

import functools
import os
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ckinspect.io.atomic import atomic_write
from ckinspect.io.reader import FileReader
from ckinspect.io.safetensors_write import Entry, write_safetensors
from ckinspect.io.zipdir import read_directory, read_member
from ckinspect.io.zipwrite import TorchArchiveWriter
from ckinspect.model import TensorInfo
from ckinspect.ops.rawtensors import MISSING, Built, RawTensor, StorageSource, as_source, map_tree
from ckinspect.vocab import CkinspectError


def torch_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise CkinspectError(f"torch has no dtype {name}, and converting goes through torch")
    return dtype


def tensor_from_bytes(data: bytes | bytearray, dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    if not len(data):
        return torch.empty(0, dtype=torch_dtype(dtype)).reshape(shape)
    writable = data if isinstance(data, bytearray) else bytearray(data)  # frombuffer shares it, so no copy
    return torch.frombuffer(writable, dtype=torch.uint8).view(torch_dtype(dtype)).reshape(shape)


def rebuild_tree(
    tree: Any,
    source_of: Callable[[TensorInfo], StorageSource | bytes | bytearray | memoryview | None],
    keep: Callable[[str, TensorInfo], bool] | None = None,
    cast: Callable[[str, torch.Tensor], torch.Tensor] | None = None,
) -> Built:
    """Copy the reader's tree with torch tensors in place of TensorInfo (rawtensors.map_tree).

    One torch storage per storage key, so views and tied weights stay shared as in the original.
    A tensor whose bytes are unavailable is left out (dict entry dropped, list slot None).
    `keep(name, info)` filters tensors (convert --only); `cast` changes dtype (convert --dtype).

    Nothing is read here: each storage is a placeholder (torch.empty, never touched, so it costs
    address space, not memory) and `built.fills` says where its bytes come from; `save_torch` writes
    them there in bounded chunks. A cast tensor gets a placeholder of its own, filled with its values
    cast block by block. `cast` is asked on a meta tensor, so deciding costs nothing either.
    """
    storages: dict[str, tuple[torch.UntypedStorage, StorageSource] | None] = {}
    built_fills: dict[int, Any] = {}

    def tensor_for(name: str, info: TensorInfo) -> Any:
        if info.storage_key not in storages:
            source = as_source(source_of(info))
            if source is None:
                storages[info.storage_key] = None
            else:
                placeholder = torch.empty(source.nbytes, dtype=torch.uint8).untyped_storage()
                storages[info.storage_key] = (placeholder, source)
                built_fills[placeholder._cdata] = source
        entry = storages[info.storage_key]
        if entry is None or info.byte_offset + info.span_bytes > entry[1].nbytes:
            return MISSING
        placeholder, source = entry
        dtype = torch_dtype(info.dtype)
        t = torch.empty(0, dtype=dtype).set_(placeholder, info.storage_offset, info.shape, info.stride)
        if cast is None:
            return t
        probe = torch.empty_strided(info.shape, info.stride, dtype=dtype, device="meta")
        target = cast(name, probe)
        if target is probe:
            return t
        # .to() keeps a dense permuted layout (a transposed weight stays transposed): the meta result
        # has the strides torch would give, and the values are written in that storage order
        out = torch.empty_strided(target.shape, target.stride(), dtype=target.dtype)
        order = sorted(range(len(info.shape)), key=lambda d: -target.stride()[d])
        in_storage_order = info.replace(shape=tuple(info.shape[d] for d in order),
                                        stride=tuple(info.stride[d] for d in order))  # fmt: skip
        dtype_name = str(target.dtype).removeprefix("torch.")
        built_fills[out.untyped_storage()._cdata] = RawTensor(in_storage_order, source, dtype_name)
        return out

    built = map_tree(tree, tensor_for, keep, is_plain=_is_plain_torch)
    used = {t.untyped_storage()._cdata for _, t in built.tensors}
    built.fills = {k: v for k, v in built_fills.items() if k in used}
    return built


def _is_plain_torch(obj: Any) -> bool:
    return isinstance(obj, (torch.dtype, torch.Size, torch.device))


def save_torch(path: str | Path, obj: Any, fills: dict[int, Any] | None = None) -> int:
    """torch.save through ckinspect.io.atomic; returns the file size.

    With `fills` (rebuild_tree's placeholders), the archive is written by the zip layer's streaming writer
    (io.zipwrite), record by record: torch's own pickling (torch.serialization._save) gives data.pkl and
    the records in torch's order, and each storage's record is written from its source in bounded chunks,
    never from the placeholder. The file is byte for byte what torch.save writes from the same tensors in
    memory (tests/ops/test_streaming.py), at bounded memory.
    """
    with atomic_write(path) as handle:
        if not fills:
            torch.save(obj, handle)
        else:
            writer = TorchArchiveWriter(handle)  # torch.save to a file object names its archive "archive"
            torch.serialization._save(obj, _Records(writer, fills), pickle, torch.serialization.DEFAULT_PROTOCOL,
                                      _disable_byteorder_record=False)  # fmt: skip
            writer.finish(record_names_hash)
        handle.flush()
        size = handle.seek(0, os.SEEK_END)
    return size


class _Records:
    """What torch.serialization._save writes to (torch's zip writer's `write_record`), handed on to the
    streaming writer: a storage placeholder's bytes come from its source, any other record as given."""

    def __init__(self, writer: TorchArchiveWriter, fills: dict[int, Any]) -> None:
        self.writer, self.fills = writer, fills

    def write_record(self, name: str, data: Any, size: int) -> None:
        if isinstance(data, str):
            data = data.encode()
        if isinstance(data, (bytes, bytearray)):
            self.writer.write_record(name, [bytes(data)], size)
            return
        source = self.fills.get(data._cdata)  # an UntypedStorage
        self.writer.write_record(name, source.chunks() if source is not None else [_storage_bytes(data)], size)


def _storage_bytes(storage: torch.UntypedStorage) -> memoryview:
    """A storage held in memory (not a placeholder), as its bytes without a copy."""
    if storage.nbytes() == 0:
        return memoryview(b"")
    return torch.empty(0, dtype=torch.uint8).set_(storage).numpy().data


@functools.lru_cache(maxsize=8)
def _names_hash(names: tuple[str, ...]) -> int:
    with tempfile.TemporaryFile() as scratch:
        writer = torch._C.PyTorchFileWriter(scratch, True, 64)
        for name in names:
            writer.write_record(name, b"", 0)
        writer.write_end_of_file()
        scratch.flush()
        reader = FileReader(scratch.fileno(), os.fstat(scratch.fileno()).st_size)
        members, cd_start = read_directory(reader)
        serialization_id = read_member(reader, members[-1], cd_start)  # torch writes it last
    return int(serialization_id[:20])


def record_names_hash(names: list[str]) -> int:
    """The first half of torch's serialization id: its writer folds the hashes of the record names in the
    order of its own hash table (std::unordered_set), which only torch's writer knows; it is asked, with the
    same names written empty, which costs a directory's worth of bytes, not the file's."""
    return _names_hash(tuple(names))


def tensors_to_safetensors(
    path: str | Path, tensors: list[tuple[str, torch.Tensor]], metadata: dict[str, str] | None = None
) -> tuple[int, list[str]]:
    """Write named tensors as safetensors: each gets its own bytes (the format forbids sharing).

    Returns the size and notes naming every tensor that shared its storage and was copied.
    """
    seen: dict[tuple[int, int], str] = {}
    notes = []
    entries = []
    for name, t in tensors:
        if t.is_sparse or t.is_quantized:
            raise ValueError(f"{name}: sparse/quantized tensors cannot be written as safetensors")
        ident = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        if t.numel() and ident in seen:
            notes.append(
                f"{name} shared its storage with {seen[ident]}: written as a separate copy "
                "(safetensors forbids shared memory)"
            )
        elif t.numel():
            seen[ident] = name
        flat = t.detach().contiguous().reshape(-1)
        dtype = str(t.dtype).removeprefix("torch.")
        entries.append(Entry(name, dtype, tuple(t.shape), functools.partial(_chunks_of, flat)))
    return write_safetensors(path, entries, metadata), notes


def _chunks_of(flat: torch.Tensor) -> list[memoryview]:
    if flat.numel() == 0:
        return [memoryview(b"")]
    return [flat.view(torch.uint8).numpy().data]
