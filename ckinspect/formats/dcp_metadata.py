"""The fast decoder of a DCP `.metadata`: what torch's own writer puts there, at C speed.

A 70B + AdamW save over 1024 ranks declares 4.4 million chunks: the general path (the static opcode scan,
then the restricted unpickler's Python stand-ins) costs several times torch's own `pickle.load`. This
decoder runs CPython's C unpickler with a `find_class` that accepts exactly the globals DCP's writer
emits and hands back stand-ins the C code builds without a Python frame (records whose BUILD fills their
`__dict__`; `tuple` for `torch.Size`). Any other global, a persistent id, an extension code, or anything
the unpickler refuses ends this path with None, and the caller decodes with the general restricted
unpickler instead. It runs only after the static scan has judged the pickle (every global it names, and
what would make CPython's unpickler balloon: a LONG_BINPUT of index 2**30 makes it allocate 8 GiB of
memo), so it changes how fast a safe file is decoded, never what is found in a hostile one.
"""

from __future__ import annotations

import io
import pickle

from ckinspect.formats.pickle_scan import GlobalRef, classify_global
from ckinspect.formats.unpickler import Opaque, _FrozenMeta, _opaque_class, standin_for

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_METADATA = "torch.distributed.checkpoint.metadata"


class DcpRecord(metaclass=_FrozenMeta):
    """One of DCP's many small dataclasses (a chunk, an index, a storage location): its BUILD state lands
    in `__dict__` from C. The class itself refuses changes (_FrozenMeta); an instance holds only data."""

    qualname = "?"


def _record(qualname: str) -> type:
    return _FrozenMeta(qualname.rsplit(".", 1)[-1], (DcpRecord,), {"qualname": qualname})


# the millions: built by C (NEWOBJ then BUILD into __dict__)
_RECORDS = {
    f"{_METADATA}.ChunkStorageMetadata": _record(f"{_METADATA}.ChunkStorageMetadata"),
    f"{_METADATA}.MetadataIndex": _record(f"{_METADATA}.MetadataIndex"),
    "torch.distributed.checkpoint.filesystem._StorageInfo": _record(
        "torch.distributed.checkpoint.filesystem._StorageInfo"
    ),
}
RECORDS = frozenset(_RECORDS.values())
# one per entry or per file: the general path's stand-ins, the same objects the rest of dcp.py reads
_FEW = frozenset(
    {
        f"{_METADATA}.{n}"
        for n in (
            "Metadata",
            "TensorStorageMetadata",
            "BytesStorageMetadata",
            "TensorProperties",
            "_MEM_FORMAT_ENCODING",
            "StorageMeta",
        )
    }  # fmt: skip
)
_BENIGN = frozenset({"torch.serialization._get_layout", "pathlib.PosixPath", "pathlib.PurePosixPath"})


class _Declined(Exception):
    """Not what DCP's writer emits: the general path decides."""


class FastUnpickler(pickle.Unpickler):
    """The C unpickler with DCP's globals only; every global it is asked for is in `asked`, in order (the
    static scan's list when it reads to STOP: pickle_scan.scan_decoding)."""

    def __init__(self, file: Any) -> None:
        super().__init__(file, fix_imports=False, encoding="latin1")
        self.asked: list[tuple[str, str]] = []

    def find_class(self, module: str, name: str) -> Any:
        self.asked.append((module, name))
        qualname = f"{module}.{name}"
        found = _RECORDS.get(qualname)
        if found is not None:
            return found
        if qualname == "torch.Size":
            return tuple  # REDUCE(tuple, (dims,)) in C; the general stand-in returns the same tuple
        if qualname in _FEW:
            return _opaque_class(qualname)
        if qualname in _BENIGN or (module == "torch" and isinstance(standin_for(module, name), str)):
            return standin_for(module, name)  # dtypes, the layout, a checkpoint_id Path
        raise _Declined(qualname)

    def persistent_load(self, pid: Any) -> Any:
        raise _Declined("persistent id")


def fast_fields(data: bytes) -> dict[str, Any] | None:
    """Metadata's fields for a .metadata as torch writes it; None to take the general decoder. Only for a
    pickle the static scan has judged (CPython's C unpickler allocates its memo up to any index a
    LONG_BINPUT names: the scan refuses such indices first); dcp.py goes through scan_decoding instead,
    which judges and decodes in one pass."""
    unpickler = FastUnpickler(io.BytesIO(data))
    try:
        meta = unpickler.load()
    except Exception:  # noqa: BLE001 - declined, refused or malformed: the general decoder judges it
        return None
    return metadata_fields(meta)


def metadata_fields(meta: Any) -> dict[str, Any] | None:
    """The fields of what FastUnpickler built when it is DCP Metadata; None otherwise."""
    fields = meta.fields if isinstance(meta, Opaque) and meta.qualname == f"{_METADATA}.Metadata" else {}
    if not isinstance(fields.get("state_dict_metadata"), dict) or not isinstance(fields.get("storage_data"), dict):
        return None
    return fields


# ---- the compiled decoder (ckinspect/_native/dcpmeta.c): the same save as columns, for --quick listings


class Columns:
    """A `.metadata` as dcpmeta decodes it: one row per entry, flat int64 columns per chunk and per storage
    record (see dcpmeta.c). `globals` are (module, name, opcode), distinct, in the order the scan lists them."""

    __slots__ = ("globals", "version", "planner", "entries", "storage_records", "chunk_item", "chunk_numel",
                 "offsets_index", "offsets_pool", "sizes_index", "sizes_pool", "item_path", "item_offset",
                 "item_length", "paths")  # fmt: skip

    def __init__(self, decoded: tuple[Any, ...]) -> None:
        import numpy as np

        (self.globals, self.version, self.planner, self.entries, self.storage_records, *arrays,
         self.paths) = decoded  # fmt: skip
        (self.chunk_item, self.chunk_numel, self.offsets_index, self.offsets_pool, self.sizes_index,
         self.sizes_pool, self.item_path, self.item_offset, self.item_length) = (
            np.frombuffer(a, dtype=np.int64) for a in arrays)  # fmt: skip

    def global_refs(self) -> list[GlobalRef]:
        """The globals as the static scan lists them."""
        return [GlobalRef(module, name, classify_global(module, name), opcode) for module, name, opcode in self.globals]

    @property
    def chunks(self) -> int:
        return len(self.chunk_item)

    def declared(self) -> int:
        """Entries plus chunks plus storage records, as dcp._declared_entries counts them."""
        return len(self.entries) + self.chunks + self.storage_records

    def where(self, item: int) -> dict[str, Any] | None:
        """A storage record as the general path's _StorageInfo fields (None: no record)."""
        if item < 0:
            return None
        return {"relative_path": self.paths[int(self.item_path[item])], "offset": int(self.item_offset[item]),
                "length": int(self.item_length[item])}  # fmt: skip

    def offsets(self, chunk: int) -> tuple[int, ...]:
        return tuple(self.offsets_pool[self.offsets_index[chunk] : self.offsets_index[chunk + 1]].tolist())

    def sizes(self, chunk: int) -> tuple[int, ...]:
        return tuple(self.sizes_pool[self.sizes_index[chunk] : self.sizes_index[chunk + 1]].tolist())


def native_columns(source: Any, size: int) -> Columns | None:
    """The compiled decoder's columns for a .metadata as torch's FileSystemWriter writes it (`source`: its
    bytes, or a reader's `read_at(offset, length)`, asked for a few MiB at a time); None when the decoder is
    not built (or the pure path is asked for: ckinspect._native) or declines the file: the general path then
    judges and decodes it."""
    from ckinspect._native import load

    native = load("dcpmeta")
    if native is None:
        return None
    from ckinspect.dtypes import TORCH_DTYPE_ATTRS

    decoded = native.decode(source, size, TORCH_DTYPE_ATTRS)
    return None if decoded is None else Columns(decoded)
