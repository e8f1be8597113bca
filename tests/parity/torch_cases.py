"""The differential harness's generator: torch.save's option space as cases, each written with the installed
torch exactly as a user's torch would write it.

    for case in full_matrix(): ...      # every combination (run by hand: tests/parity/run_full_matrix.py)
    ci_share()                          # a seeded few hundred, every value of every axis at least once
    write_case(case, path)              # torch.save with the case's options -> {name: tensor} it saved

Axes (from torch/serialization.py's torch.save signature and torch.utils.serialization.config.save, and from
torch's own test/test_serialization.py): dtype (every dtype torch.save writes), the tensor's view (contiguous,
transposed, offset, strided, shared storage), byte order (a big-endian archive made as a big-endian host
writes it: the byteorder record says big and every storage is byte-swapped per element, complex per half),
pickle protocol 2..5, the legacy (pre-1.6) format, storage alignment, CRC-32s recorded or not. Composite
tensors (quantized per tensor and per channel, sparse in every layout, nested, meta) are cases of their own.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import pickle
import random
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.utils.serialization as serialization

# What this harness was written against: an upgrade that adds a dtype or a save option fails
# test_pinned_to_the_installed_torch loudly, so the new one gets cases (and ckinspect support) first.
PINNED_TORCH = "2.13.0"
SAVEABLE_DTYPES = (
    "float64", "float32", "float16", "bfloat16",
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2",
    "complex128", "complex64", "complex32",
    "int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8", "bool",
    "qint8", "quint8", "qint32", "quint4x2", "quint2x4",
    "bits1x8", "bits2x4", "bits4x2", "bits8", "bits16",
)  # fmt: skip
# torch has these dtypes but torch.save refuses them ("dtype torch.uint1 is not recognized")
UNSAVEABLE_DTYPES = tuple(f"{s}int{n}" for s in ("u", "") for n in range(1, 8))
SAVE_PARAMETERS = ("obj", "f", "pickle_module", "pickle_protocol", "_use_new_zipfile_serialization",
                   "_disable_byteorder_record")  # fmt: skip
SAVE_CONFIG = {"compute_crc32": True, "use_pinned_memory_for_d2h": False, "storage_alignment": 64}

VIEWS = ("contiguous", "transposed", "offset", "strided", "shared")
BYTE_ORDERS = ("little", "big")
PROTOCOLS = (2, 3, 4, 5)
FORMATS = ("zip", "legacy")
ALIGNMENTS = (64, 4096)
CRCS = (True, False)

QUANTIZED = ("qint8", "quint8", "qint32", "quint4x2", "quint2x4")
BITS = ("bits1x8", "bits2x4", "bits4x2", "bits8", "bits16")
FLOAT8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu")
COMPLEX = ("complex128", "complex64", "complex32")
FLOATS = ("float64", "float32", "float16", "bfloat16")


class Case(NamedTuple):
    dtype: str
    view: str = "contiguous"
    byteorder: str = "little"
    protocol: int = 2
    format: str = "zip"
    alignment: int = 64
    crc: bool = True

    @property
    def id(self) -> str:
        crc = "crc" if self.crc else "nocrc"
        return f"{self.dtype}-{self.view}-{self.byteorder}-p{self.protocol}-{self.format}-a{self.alignment}-{crc}"


# torch.save writes these through an UntypedStorage, and torch.load's legacy (pre-1.6) reader cannot read
# them back (AttributeError: UntypedStorage has no dtype): no oracle, so no such cases; pinned by a test
LEGACY_UNLOADABLE = (*FLOAT8, "float4_e2m1fn_x2", "complex32", "uint16", "uint32", "uint64", *BITS)


def _valid(case: Case) -> bool:
    # quantized tensors are saved whole (a view of packed quint2x4 need not start or end on a byte, and
    # torch cannot view their raw values); per-channel is a case of its own
    if case.dtype in QUANTIZED and case.view != "contiguous":
        return False
    if case.format == "legacy" and case.dtype in LEGACY_UNLOADABLE:
        return False
    if case.format == "legacy":  # no byteorder record, no alignment, no CRCs: those axes do not exist there
        return case.byteorder == "little" and case.alignment == 64 and case.crc
    return True


def full_matrix() -> list[Case]:
    return [c for c in itertools.starmap(Case, itertools.product(
        SAVEABLE_DTYPES, VIEWS, BYTE_ORDERS, PROTOCOLS, FORMATS, ALIGNMENTS, CRCS)) if _valid(c)]  # fmt: skip


def ci_share(size: int = 240, seed: int = 25) -> list[Case]:
    """Every dtype in every view little- and big-endian once, then a seeded sample of the rest."""
    everything = full_matrix()
    chosen = {c for c in everything if c.protocol == 2 and c.format == "zip" and c.alignment == 64 and c.crc}
    rest = sorted(set(everything) - chosen)
    chosen |= set(random.Random(seed).sample(rest, max(0, size - len(chosen))))
    for axis, values in (("protocol", PROTOCOLS), ("format", FORMATS), ("alignment", ALIGNMENTS), ("crc", CRCS)):
        for value in values:  # every value of every axis at least once
            if not any(getattr(c, axis) == value for c in chosen):
                chosen.add(next(c for c in rest if getattr(c, axis) == value))
    return sorted(chosen)


# ---------------------------------------------------------------- values


def base_values(dtype: str, n: int = 24, seed: int = 0) -> torch.Tensor:
    """n values of a dtype, NaN, +Inf and -Inf among them where the dtype has them."""
    g = torch.Generator().manual_seed(seed)
    if dtype in FLOATS:
        t = torch.randn(n, generator=g, dtype=torch.float64) * 3
        t[1], t[5], t[7] = float("nan"), float("inf"), -float("inf")
        return t.to(getattr(torch, dtype))
    if dtype in FLOAT8 or dtype == "float4_e2m1fn_x2" or dtype in BITS:
        width = 2 if dtype == "bits16" else 1
        raw = torch.randint(0, 256, (n * width,), generator=g, dtype=torch.int64).to(torch.uint8)
        if dtype in FLOAT8:  # every special code of the format, surely
            raw[:4] = torch.tensor([0x7F, 0xFF, 0x80, 0x7C], dtype=torch.uint8)
        return raw.view(getattr(torch, dtype))
    if dtype in COMPLEX:
        re, im = torch.randn(n, generator=g), torch.randn(n, generator=g)
        re[2], im[3], re[4], im[4], re[6] = float("nan"), float("inf"), float("nan"), float("inf"), -float("inf")
        return torch.complex(re, im).to(getattr(torch, dtype))
    if dtype == "bool":
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype in QUANTIZED:
        x = torch.randn(n, generator=g)
        return torch.quantize_per_tensor(x, 0.25, 3 if dtype.startswith("qu") else 0, getattr(torch, dtype))
    info = torch.iinfo(getattr(torch, dtype))
    lo, hi = max(info.min, -(2**62)), min(info.max, 2**62)
    return torch.randint(lo, hi, (n,), generator=g, dtype=torch.int64).to(getattr(torch, dtype))


LAST_SEEN = {"contiguous": 23, "transposed": 23, "offset": 16, "strided": 22, "shared": 23}  # base index


def case_tensors(case: Case, changed: bool = False) -> dict[str, torch.Tensor]:
    """The state dict a case saves: its base tensor and, by the case's view, a view of it. `changed` flips
    the lowest bit of the last element `w` sees (quantized: unchanged, their raw values are not settable)."""
    base = base_values(case.dtype)
    if changed and not base.is_quantized:
        raw = base.view(torch.uint8)
        raw[LAST_SEEN[case.view] * base.element_size()] ^= 1
    if case.view == "contiguous":
        return {"w": base}
    if case.view == "transposed":
        return {"w": base.reshape(4, 6).t()}
    if case.view == "offset":
        return {"w": base[5:17]}
    if case.view == "strided":
        return {"w": base.reshape(4, 6)[:, ::2]}
    return {"w": base, "v": base[3:9].reshape(2, 3)}  # shared: two views of one storage


# ---------------------------------------------------------------- writing


@contextlib.contextmanager
def save_config(alignment: int | None = None, crc: bool = True) -> Iterator[None]:
    saved = serialization.config.save.storage_alignment, serialization.config.save.compute_crc32
    serialization.config.save.storage_alignment = alignment or saved[0]
    serialization.config.save.compute_crc32 = crc
    try:
        yield
    finally:
        serialization.config.save.storage_alignment, serialization.config.save.compute_crc32 = saved


def write_case(case: Case, path: Path, obj: Any = None) -> Any:
    """torch.save with the case's options; returns what was saved."""
    obj = case_tensors(case) if obj is None else obj
    with save_config(case.alignment, case.crc):
        if case.byteorder == "big":
            save_big_endian(obj, path, pickle_protocol=case.protocol)
        else:
            torch.save(obj, path, pickle_protocol=case.protocol,
                       _use_new_zipfile_serialization=case.format == "zip")  # fmt: skip
    return obj


def save_big_endian(obj: Any, path: Path, pickle_protocol: int = 2) -> None:
    """What torch.save writes on a big-endian host, made here: the same records (written by torch's own zip
    writer, under the same CRC and alignment settings), but the byteorder record says `big` and every
    storage holds its elements byte-swapped, each complex half on its own (torch's storage.byteswap(dtype)
    swaps them back on load; the tests check that it does)."""
    buffer = io.BytesIO()
    with save_config(crc=True):  # read back by zipfile, which checks CRCs
        torch.save(obj, buffer, pickle_protocol=pickle_protocol)
    writer = torch._C.PyTorchFileWriter(str(path), serialization.config.save.compute_crc32,
                                        serialization.config.save.storage_alignment)  # fmt: skip
    for name, data in _swapped_archive(buffer.getvalue()):
        writer.write_record(name, data, len(data))
    writer.write_end_of_file()


def _swapped_archive(archive: bytes) -> list[tuple[str, bytes]]:
    """The records of a little-endian torch.save archive with byteorder `big` and every storage swapped."""
    zf = zipfile.ZipFile(io.BytesIO(archive))
    names = zf.namelist()
    prefix = names[0].split("/", 1)[0] + "/"
    pkl = zf.read(prefix + "data.pkl")
    units = _storage_units(pkl)
    out = []
    for full in names:
        name = full[len(prefix) :]
        if name in ("version", ".data/serialization_id"):
            continue  # the writer adds these itself
        data = zf.read(full)
        if name == "byteorder":
            data = b"big"
        elif name.startswith("data/"):
            unit = units[name[len("data/") :]]
            if unit > 1 and data:  # (an NJT's seqlen caches are empty storages)
                data = bytes(torch.frombuffer(bytearray(data), dtype=torch.uint8).view(-1, unit).flip(1).reshape(-1))
        out.append((name, data))
    return out


def _storage_units(pkl: bytes) -> dict[str, int]:
    """storage key -> bytes swapped together (element size; half of it for complex), from the pickle's ids
    (a typed storage names its dtype) or, for an untyped storage, from the _rebuild_tensor_v3 viewing it."""
    units: dict[str, int] = {}
    keys: dict[int, str] = {}

    def unit_of(dtype: torch.dtype) -> int:
        size = dtype.itemsize
        return max(1, size // 2) if dtype.is_complex else size

    def rebuild_v3(storage, offset, size, stride, requires_grad, hooks, dtype, *rest):  # type: ignore[no-untyped-def]
        units[keys[id(storage)]] = unit_of(dtype)
        return torch._utils._rebuild_tensor_v3(storage, offset, size, stride, requires_grad, hooks, dtype, *rest)

    class Reader(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if (module, name) == ("torch._utils", "_rebuild_tensor_v3"):
                return rebuild_v3
            return super().find_class(module, name)

        def persistent_load(self, pid: Any) -> Any:
            storage_type, key, numel = pid[1], pid[2], pid[4]
            if storage_type is torch.storage.UntypedStorage:
                dtype = torch.uint8
                units.setdefault(key, 1)
            else:
                dtype = storage_type if isinstance(storage_type, torch.dtype) else storage_type.dtype
                units[key] = unit_of(dtype)
            untyped = torch.zeros(numel * dtype.itemsize, dtype=torch.uint8).untyped_storage()  # rebuilds read it
            storage = torch.storage.TypedStorage(wrap_storage=untyped, dtype=dtype, _internal=True)
            keys[id(storage)] = key
            return storage

    Reader(io.BytesIO(pkl)).load()
    return units


# ---------------------------------------------------------------- composite tensors: one entry, several parts

COMPOSITES = ("coo", "coo_uncoalesced", "coo_legacy", "csr", "csc", "bsr", "bsc", "nested", "meta", "per_channel",
              "jagged", "jagged_lengths", "dtensor")  # fmt: skip
# torch's weights_only unpickler reads these once the torch modules that register their globals are imported
# (plain `import torch` imports torch.nested itself: an NJT without dim marks, jagged_lengths, needs nothing)
REGISTERED_BY_IMPORT = {"jagged": ("torch._dynamo",), "dtensor": ("torch.distributed.tensor",)}


class CompositeCase(NamedTuple):
    kind: str
    byteorder: str = "little"
    protocol: int = 2

    @property
    def id(self) -> str:
        return f"{self.kind}-{self.byteorder}-p{self.protocol}"


def composite_cases() -> list[CompositeCase]:
    return [CompositeCase(k, b, p) for k in COMPOSITES for b in BYTE_ORDERS for p in (2, 4)]


class _LegacySparse:
    """Pickles as torch did before is_coalesced was saved: _rebuild_sparse_tensor(layout, (indices, values, size))."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    def __reduce__(self) -> Any:
        t = self.t
        return torch._utils._rebuild_sparse_tensor, (torch.sparse_coo, (t._indices(), t._values(), t.size()))


def _dense(changed: bool) -> torch.Tensor:
    d = torch.zeros(4, 6)
    d[0, 1], d[1, 3], d[2, 0], d[3, 5], d[3, 2] = 1.5, float("nan"), -2.0, float("inf"), 3.0
    if changed:
        d[2, 0] = -5.0
    return d


def composite_tensor(kind: str, changed: bool = False) -> Any:
    """The composite a case saves (`changed`: one stored value differs)."""
    d = _dense(changed)
    if kind == "coo":
        return d.to_sparse().coalesce()
    if kind in ("coo_uncoalesced", "coo_legacy"):
        i = torch.tensor([[0, 2, 0, 3], [1, 0, 1, 5]])
        v = torch.tensor([1.5, -2.5 if changed else -2.0, float("nan"), float("inf")])
        t = torch.sparse_coo_tensor(i, v, (4, 6))
        return _LegacySparse(t) if kind == "coo_legacy" else t
    if kind in ("csr", "csc"):
        return d.to_sparse_csr() if kind == "csr" else d.to_sparse_csc()
    if kind in ("bsr", "bsc"):
        return d.to_sparse_bsr((2, 3)) if kind == "bsr" else d.to_sparse_bsc((2, 3))
    if kind == "nested":
        return torch.nested.nested_tensor([d[:2, :3], d[1:, :3]])
    if kind == "meta":
        return torch.empty(4, 7 if changed else 6, device="meta")
    if kind == "jagged":  # torch.nested with layout=torch.jagged (NJT): values end to end, and offsets
        return torch.nested.nested_tensor([d[:2, :3], d[1:, :3]], layout=torch.jagged)
    if kind == "jagged_lengths":  # a non-contiguous NJT: each component's length saved too
        return torch.nested.nested_tensor_from_jagged(d[:, :3], torch.tensor([0, 2, 4]), torch.tensor([1, 2]))
    if kind == "dtensor":  # a wrapper subclass (torch._utils._rebuild_wrapper_subclass): data in its state
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard, distribute_tensor

        return distribute_tensor(d, init_device_mesh("cpu", (1,)), [Shard(0)])
    scales = torch.tensor([0.5, 0.25, 1.0, 2.0], dtype=torch.float64)
    return torch.quantize_per_channel(d.nan_to_num(0, 9, -9), scales, torch.tensor([0, 1, 2, 3]), 0, torch.qint8)


@contextlib.contextmanager
def one_rank() -> Iterator[None]:
    """A world of one process (gloo, an in-memory store: no port), for building DTensors; ended after."""
    import torch.distributed as dist

    if dist.is_initialized():
        yield
        return
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def write_composite(case: CompositeCase, path: Path, changed: bool = False) -> None:
    with one_rank() if case.kind == "dtensor" else contextlib.nullcontext():
        obj = {"t": composite_tensor(case.kind, changed), "dense": torch.arange(6.0)}
        if case.byteorder == "big":
            save_big_endian(obj, path, pickle_protocol=case.protocol)
        else:
            torch.save(obj, path, pickle_protocol=case.protocol)
