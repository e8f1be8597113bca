"""The one data model: every reader fills a `Checkpoint`, every check and renderer reads it.

Pure data. No torch, no textual, no I/O beyond what a property needs to say what it is.
"""

from __future__ import annotations

import math
from array import array
from pathlib import Path

from ckinspect.dtypes import dtype_info
from ckinspect.record import Record, field
from ckinspect.vocab import SEVERITY, SEVERITY_RANK

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class Finding(Record):
    code: str
    message: str
    tensor: str | None = None
    severity: str = ""  # "" -> the code's severity in vocab.SEVERITY

    def __post_init__(self) -> None:
        self.severity = self.severity or SEVERITY.get(self.code, "info")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "severity": self.severity, "message": self.message}
        if self.tensor is not None:
            out["tensor"] = self.tensor
        return out


class StorageInfo(Record):
    """One block of raw bytes that tensors view into.

    `offset` is the absolute position of the first raw byte in `file` when the bytes
    lie there uncompressed (torch zip members are stored, legacy storages are inline,
    safetensors buffers are raw); None when they cannot be addressed directly.
    """

    key: str
    dtype: str
    nbytes: int
    file: Path
    offset: int | None
    crc32: int | None = None  # expected CRC-32 from the zip directory, where there is one
    member: str | None = None  # zip member or shard name, for messages
    location: str = "cpu"
    big_endian: bool = False  # the archive's byteorder record says "big": elements are stored byte-swapped
    # a deflated zip member's bytes (np.savez_compressed): (absolute start of the deflate stream, its length,
    # bytes it inflates to before the storage's first byte, the whole member's size and CRC-32 or None when
    # the archive records none); offset is None
    deflated: tuple[int, int, int, int, int | None] | None = None
    # a tensor whose bytes lie in many pieces (a DCP tensor sharded over ranks: one chunk per item); offset is None
    extents: Extents | None = None


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides, in elements, of a C-contiguous tensor of `shape` (a size 0 counts as 1, as torch's do)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


class Extents:
    """Where a tensor's bytes lie when they are many chunks, in several files (a DCP tensor sharded over
    ranks): per chunk its file, absolute offset and length of its raw bytes (C order, contiguous), the
    CRC-32 its item's zip directory records (-1: none), whether it is stored big-endian, and its box in the
    tensor (offsets, then sizes, per dimension). Columns, not a record per chunk: the 1024-rank 70B save
    has 4.4 million chunks, in any order; `whole` when they cover the tensor exactly once (the reader checks).

        for i in range(len(ext)): ext.storage(i, dtype), ext.chunk(i, fqn, dtype)   # one chunk as a plain storage
    """

    __slots__ = ("box", "crc", "file", "files", "length", "ndim", "offset", "swapped", "whole")

    def __init__(self, ndim: int) -> None:
        self.ndim = ndim
        self.files: list[Path] = []  # distinct files, indexed by `file`
        self.file = array("I")
        self.offset = array("q")
        self.length = array("q")
        self.crc = array("q")
        self.box = array("q")  # 2 * ndim per chunk
        self.swapped = bytearray()  # 1: big-endian
        self.whole = False  # every element of the tensor in exactly one chunk, and every chunk's bytes here

    def __len__(self) -> int:
        return len(self.offset)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Extents) and all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def __getstate__(self) -> tuple[Any, ...]:  # crosses a process boundary (jobs.parallel)
        return tuple(getattr(self, k) for k in self.__slots__)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for k, v in zip(self.__slots__, state, strict=True):
            setattr(self, k, v)

    def add(self, file_index: int, offset: int, length: int, crc: int | None, big_endian: bool,
            offsets: tuple[int, ...], sizes: tuple[int, ...]) -> None:  # fmt: skip
        self.file.append(file_index)
        self.offset.append(offset)
        self.length.append(length)
        self.crc.append(-1 if crc is None else crc)
        self.swapped.append(1 if big_endian else 0)
        self.box.extend(offsets)
        self.box.extend(sizes)

    def file_index(self, path: Path, known: dict[Path, int]) -> int:
        """The index of `path` in `files` (`known`: the caller's memo of it, path -> index)."""
        index = known.get(path)
        if index is None:
            index = known[path] = len(self.files)
            self.files.append(path)
        return index

    def offsets(self, i: int) -> tuple[int, ...]:
        at = 2 * self.ndim * i
        return tuple(self.box[at : at + self.ndim])

    def sizes(self, i: int) -> tuple[int, ...]:
        at = 2 * self.ndim * i + self.ndim
        return tuple(self.box[at : at + self.ndim])

    def shape(self) -> tuple[int, ...]:
        """The tensor's shape, as far as its chunks reach."""
        n = self.ndim
        box = self.box
        return tuple(max((box[at + d] + box[at + n + d] for at in range(0, len(box), 2 * n)), default=0)
                     for d in range(n))  # fmt: skip

    def box_of(self, i: int) -> str:
        """A chunk's box as the per-chunk listing named it: `[0:4,0:8]`."""
        return "[" + ",".join(f"{o}:{o + s}" for o, s in zip(self.offsets(i), self.sizes(i), strict=True)) + "]"

    def where(self, i: int) -> str:
        """A chunk in a message: `[0:4,0:8] (__3_0.distcp at byte 1234)`."""
        return f"{self.box_of(i)} ({self.files[self.file[i]].name} at byte {self.offset[i]})"

    def storage(self, i: int, dtype: str, key: str, name: str = "") -> StorageInfo:
        """Chunk `i` (of tensor `name`) as a storage of its own, which every single-extent reader reads."""
        crc, file = self.crc[i], self.files[self.file[i]]
        return StorageInfo(f"{key}#{i}", dtype, self.length[i], file, self.offset[i], None if crc < 0 else crc,
                           name + self.where(i), big_endian=bool(self.swapped[i]))  # fmt: skip

    def chunk(self, i: int, name: str, dtype: str, key: str) -> TensorInfo:
        """Chunk `i` as a contiguous tensor on storage(i)."""
        sizes = self.sizes(i)
        return TensorInfo(name + self.box_of(i), dtype, sizes, contiguous_strides(sizes), f"{key}#{i}")

    def subset(self, indices: list[int]) -> Extents:
        """These chunks only (one file's share of a scan split by file)."""
        out = Extents(self.ndim)
        out.whole = self.whole and len(indices) == len(self)
        known: dict[Path, int] = {}
        for i in indices:
            out.add(out.file_index(self.files[self.file[i]], known), self.offset[i], self.length[i],
                    None if self.crc[i] < 0 else self.crc[i], bool(self.swapped[i]), self.offsets(i),
                    self.sizes(i))  # fmt: skip
        return out

    def same_boxes(self, other: Extents) -> bool:
        """Both cut the tensor into the same chunks, in the same order."""
        return self.ndim == other.ndim and self.box == other.box


class TensorInfo(Record):
    name: str  # dotted path in the checkpoint: model.layers.0.attn.wq.weight ("" until a reader names it)
    dtype: str  # torch-style name without the prefix: float32, bfloat16, int64 ...
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_key: str
    storage_offset: int = 0  # in elements, as torch counts it
    group: str = "other"

    # The restricted unpickler hands these to the checkpoint's pickle, whose BUILD opcode would call
    # __setstate__ to overwrite the fields: refuse. copy and pickle go through __init__ instead.
    def __setstate__(self, state: object) -> None:
        raise TypeError("a pickle tries to rewrite a tensor descriptor")

    def __reduce__(self) -> tuple[type[TensorInfo], tuple[Any, ...]]:
        return (TensorInfo, self._values())

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return dtype_info(self.dtype).itemsize

    @property
    def bits(self) -> int:
        """Bits per element: itemsize * 8, but 4 or 6 for the packed sub-byte floats."""
        return dtype_info(self.dtype).bits

    @property
    def nbytes(self) -> int:
        return (self.numel * self.bits + 7) >> 3

    @property
    def byte_offset(self) -> int:
        """Offset of the first element within its storage, in bytes."""
        return (self.storage_offset * self.bits) >> 3

    @property
    def is_contiguous(self) -> bool:
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.stride), strict=True):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True

    @property
    def span_bytes(self) -> int:
        """Bytes of storage this view reaches, from its first element to its last."""
        if self.numel == 0:
            return 0
        last = sum((size - 1) * stride for size, stride in zip(self.shape, self.stride, strict=True))
        bits = self.bits
        return ((self.storage_offset + last + 1) * bits + 7 >> 3) - (self.storage_offset * bits >> 3)


# The documented names of a composite tensor's parts, by layout (README: "Sparse, nested and meta tensors").
COMPOSITE_PARTS: dict[str, tuple[str, ...]] = {
    "sparse_coo": ("indices", "values"),
    "sparse_csr": ("crow_indices", "col_indices", "values"),
    "sparse_csc": ("ccol_indices", "row_indices", "values"),
    "sparse_bsr": ("crow_indices", "col_indices", "values"),
    "sparse_bsc": ("ccol_indices", "row_indices", "values"),
    "nested": ("buffer", "sizes", "strides", "storage_offsets"),
    "per_channel_affine": ("values", "scales", "zero_points"),  # quantized per channel: int values + per-channel params
    "meta": (),  # a meta-device tensor: a shape and a dtype, no data at all
    "jagged": ("values", "offsets", "lengths"),  # torch.nested with layout=torch.jagged (NJT); lengths when saved
    "wrapper_subclass": (),  # a tensor subclass without storage (DTensor ...): parts named by its attributes
}
RAGGED = -1  # a nested tensor's ragged dimension in `shape` (null in JSON)


class CompositeTensor(Record):
    """A tensor torch saves as several tensors (sparse layouts, nested, per-channel quantized) or as none
    (meta): listed as one entry with its layout, its logical shape and its parts. The parts are ordinary
    TensorInfo in `Checkpoint.tensors`, named `<name>.<part>` (COMPOSITE_PARTS), so that the value scan,
    diff and convert read them like any other tensor."""

    layout: str  # a COMPOSITE_PARTS key
    dtype: str  # of the values
    shape: tuple[int, ...]  # logical shape (RAGGED for a nested tensor's ragged dimensions)
    parts: dict[str, TensorInfo]
    name: str = ""  # set by formats.tree.flatten, as for TensorInfo
    subclass: str = ""  # a wrapper subclass's class (torch.distributed.tensor.DTensor ...)

    def __setstate__(self, state: object) -> None:
        raise TypeError("a pickle tries to rewrite a tensor descriptor")

    def __reduce__(self) -> tuple[type[CompositeTensor], tuple[Any, ...]]:
        return (CompositeTensor, self._values())

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.parts.values())


class Checkpoint(Record):
    """What a reader found in one checkpoint; the layout recogniser and the checks add to it."""

    __hash__ = None  # type: ignore[assignment]  # filled in step by step

    path: Path
    format: str
    file_bytes: int
    tensors: list[TensorInfo] = field(default_factory=list)
    storages: dict[str, StorageInfo] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)  # step, epoch, world_size, config ...
    findings: list[Finding] = field(default_factory=list)
    globals: list[str] = field(default_factory=list)  # every "module.name" any pickle names
    layout: str = "unknown"  # which recogniser mapped the roles: trainer, minimind, nanogpt ...
    tree: Any = None  # the decoded object, TensorInfo in place of tensors; None when unread
    files: list[Path] = field(default_factory=list)  # every file it is made of (shards, .distcp)
    composites: list[CompositeTensor] = field(default_factory=list)  # sparse, nested, meta ... (parts in tensors)
    _anatomy: Any = field(default=None, init=False)  # anatomy.summarize's memo of its last answer

    def tensor(self, name: str) -> TensorInfo | None:
        return next((t for t in self.tensors if t.name == name), None)

    def add(self, code: str, message: str, tensor: str | None = None) -> None:
        self.findings.append(Finding(code, message, tensor))

    def absorb(
        self, part: Checkpoint, where: str, key_prefix: str = "", member: str | None = None, tensor: str | None = None
    ) -> None:
        """Fold in one part of a checkpoint made of several (a shard of a sharded set, an item of a DCP
        folder): its storages (keys given `key_prefix` so that parts cannot collide, and `member` as
        the member of those that name none), the globals its pickles name (once each), and its findings,
        each message prefixed by `where` and, when `tensor` is given, about that tensor."""
        for storage in part.storages.values():
            if key_prefix:
                storage = storage.replace(key=key_prefix + storage.key, member=storage.member or member)
            self.storages[storage.key] = storage
        for name in part.globals:
            if name not in self.globals:
                self.globals.append(name)
        for finding in part.findings:
            self.findings.append(
                finding.replace(message=f"{where}: {finding.message}", tensor=tensor or finding.tensor)
            )


def worst_severity(findings: list[Finding]) -> str | None:
    return max((f.severity for f in findings), key=SEVERITY_RANK.__getitem__, default=None)


def fails(findings: list[Finding], fail_on: str) -> bool:
    """Whether these findings reach the --fail-on threshold (error, warning or never)."""
    if fail_on == "never":
        return False
    threshold = SEVERITY_RANK[fail_on]
    return any(SEVERITY_RANK[f.severity] >= threshold for f in findings)
