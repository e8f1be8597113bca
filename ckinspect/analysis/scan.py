"""The value scan: every stored byte checked against its CRC, every floating value checked for NaN/Inf
and for values half precision cannot hold. Streams bounded chunks on two threads; never imports torch.

    result = scan_values(ckpt, progress)   # progress(done_bytes, total_bytes), called on this thread
    result.findings                        # CORRUPT (CRC mismatch / cut short), NONFINITE, FP16_OVERFLOW
    result.stats["model.tok_emb.weight"]   # TensorStats(min, max, mean, std, nonfinite, fp16_overflow, max_abs)
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from ckinspect.formats.tree import no_gc
from ckinspect.io.blobs import DEFAULT_CHUNK, Blobs, UnreadableStorage, crc32_combine
from ckinspect.model import Checkpoint, Finding, StorageInfo, TensorInfo
from ckinspect.vocab import FP16_MAX

Progress = Callable[[int, int], None]

SCANNED_DTYPES = ("float32", "float16", "bfloat16", "float64")
# fp16 weights cannot overflow fp16; the warning is about saving wider values in half precision.
OVERFLOW_DTYPES = ("float32", "bfloat16", "float64")
_BLOCK = 512 << 10  # bytes per numpy pass: several passes over one block stay in L2
_WHOLE_SPAN = 64 << 20  # a strided view spanning up to this much is mapped whole for C-order reads


def worker_count() -> int:
    """Two threads on the usual 2-core box; CKINSPECT_THREADS overrides (1 disables threading)."""
    env = os.environ.get("CKINSPECT_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return max(1, min(2, os.cpu_count() or 1))


@dataclass
class TensorStats:
    """What the scan learnt about one floating tensor's values (std with Bessel's correction, as torch.std)."""

    min: float | None
    max: float | None
    mean: float | None
    std: float | None
    nonfinite: int
    fp16_overflow: int
    max_abs: float | None
    nan: int = 0
    count: int = 0

    def to_json(self) -> dict[str, Any]:
        def num(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else x

        return {
            "min": num(self.min),
            "max": num(self.max),
            "mean": num(self.mean),
            "std": num(self.std),
            "max_abs": num(self.max_abs),
            "nonfinite": self.nonfinite,
            "nan": self.nan,
            "fp16_overflow": self.fp16_overflow,
            "count": self.count,
        }


@dataclass
class ScanResult:
    findings: list[Finding]
    stats: dict[str, TensorStats]
    bytes_scanned: int
    seconds: float = 0.0
    crc_checked: int = 0  # storages whose CRC was known and checked
    skipped: list[str] = field(default_factory=list)  # storages that could not be read directly, and why

    @property
    def gb_per_s(self) -> float:
        return self.bytes_scanned / self.seconds / 1e9 if self.seconds > 0 else 0.0


# ---------------------------------------------------------------- numeric core (numpy, per block)


class _Moments:
    """Running min/max/count/mean/M2 that merge in any order (Chan et al.), plus the non-finite tallies."""

    __slots__ = ("n", "mean", "m2", "mn", "mx", "nan", "inf", "over")

    def __init__(self) -> None:
        self.n = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.mn = math.inf
        self.mx = -math.inf
        self.nan = 0
        self.inf = 0
        self.over = 0

    def merge(self, other: _Moments) -> None:
        self.nan += other.nan
        self.inf += other.inf
        self.over += other.over
        if other.n == 0:
            return
        if other.mn < self.mn:
            self.mn = other.mn
        if other.mx > self.mx:
            self.mx = other.mx
        if self.n == 0:
            self.n, self.mean, self.m2 = other.n, other.mean, other.m2
            return
        n = self.n + other.n
        delta = other.mean - self.mean
        self.mean += delta * other.n / n
        self.m2 += other.m2 + delta * delta * self.n * other.n / n
        self.n = n

    def stats(self) -> TensorStats:
        count = self.n + self.nan + self.inf
        if self.n == 0:
            return TensorStats(None, None, None, None, self.nan + self.inf, self.over, None, self.nan, count)
        std = math.sqrt(max(self.m2, 0.0) / (self.n - 1)) if self.n > 1 else (math.nan if self.n == 1 else None)
        return TensorStats(
            float(self.mn),
            float(self.mx),
            self.mean,
            std,
            self.nan + self.inf,
            self.over,
            max(abs(self.mn), abs(self.mx)),
            self.nan,
            count,
        )


def _block_moments(x: Any, count_overflow: bool) -> _Moments:
    """Moments of one contiguous float32/float64 block; extra passes only when something is unusual."""
    import numpy as np

    m = _Moments()
    if x.size == 0:
        return m
    mn, mx = x.min(), x.max()
    if not (math.isfinite(mn) and math.isfinite(mx)):  # NaN propagates through min/max; Inf shows as a bound
        finite = np.isfinite(x)
        kept = int(np.count_nonzero(finite))
        m.nan = int(np.count_nonzero(np.isnan(x)))
        m.inf = x.size - kept - m.nan
        x = x[finite]
        if x.size == 0:
            return m
        mn, mx = x.min(), x.max()
    n = x.size
    m.n, m.mn, m.mx = n, float(mn), float(mx)
    if count_overflow and max(-m.mn, m.mx) > FP16_MAX:
        m.over = int(np.count_nonzero(np.abs(x) > FP16_MAX))
    if x.dtype == np.float32 and max(-m.mn, m.mx) > 1e18:  # squares would overflow float32 accumulators
        x = x.astype(np.float64)
    total = float(x.sum(dtype=x.dtype))
    mean = total / n
    sumsq = float(np.dot(x, x))
    m2 = sumsq - total * mean
    if m2 < 1e-2 * sumsq:  # spread tiny next to the mean (norm weights near 1): E[x^2]-E[x]^2 cancels; centre first
        d = x - x.dtype.type(mean)
        m2 = float(np.dot(d, d)) - float(d.sum(dtype=d.dtype)) ** 2 / n
    m.mean, m.m2 = mean, max(m2, 0.0)
    return m


class _Scratch(threading.local):
    def __init__(self) -> None:
        import numpy as np

        self.wide = np.empty(_BLOCK // 2, dtype=np.uint32)  # bf16/fp16 blocks widened to float32 here


_scratch: _Scratch | None = None
_scratch_lock = threading.Lock()


def _widen(raw: Any, dtype: str) -> Any:
    """A float32/float64 array of a raw block: bf16 by shifting its bits into the top of a uint32."""
    import numpy as np

    global _scratch
    if dtype in ("float32", "float64"):
        return raw
    if _scratch is None:
        with _scratch_lock:
            if _scratch is None:
                _scratch = _Scratch()
    wide = _scratch.wide[: raw.size]
    if dtype == "bfloat16":
        np.copyto(wide, raw, casting="safe")  # raw is uint16
        np.left_shift(wide, 16, out=wide)
        return wide.view(np.float32)
    out = wide.view(np.float32)
    np.copyto(out, raw, casting="same_kind")  # float16 -> float32 (exact)
    return out


def raw_numpy_dtype(dtype: str) -> Any:
    """The numpy dtype to view a tensor's raw bytes as (bf16 as uint16, float8 as uint8)."""
    import numpy as np

    from ckinspect.dtypes import dtype_info

    info = dtype_info(dtype)
    if info.numpy:
        return np.dtype(info.numpy)
    return np.dtype({1: "u1", 2: "<u2", 4: "<u4", 8: "<u8"}.get(info.itemsize, "u1"))


def _moments_of_bytes(buf: memoryview | bytes, dtype: str) -> _Moments:
    """Moments of a run of raw little-endian elements, in blocks of _BLOCK bytes."""
    import numpy as np

    raw = np.frombuffer(buf, dtype=raw_numpy_dtype(dtype))
    over = dtype in OVERFLOW_DTYPES
    per = _BLOCK // raw.itemsize
    total = _Moments()
    for i in range(0, raw.size, per):
        total.merge(_block_moments(_widen(raw[i : i + per], dtype), over))
    return total


def _moments_of_array(arr: Any, dtype: str) -> _Moments:
    import numpy as np

    flat = np.ascontiguousarray(arr).reshape(-1)
    return _moments_of_bytes(memoryview(flat).cast("B"), dtype)


# ---------------------------------------------------------------- strided views, bounded


def iter_view_blocks(
    blobs: Blobs, storage: StorageInfo, tensor: TensorInfo, limit: int = DEFAULT_CHUNK, logical: bool = True
) -> Iterator[Any]:
    """The elements of any (non-contiguous) view as contiguous numpy blocks, each read from at most ~`limit` bytes.

    With `logical=True` the blocks come in the tensor's own C order (what a diff needs); with False the
    dimensions are walked by falling stride (same elements, fewer and bigger reads: what statistics need).
    """
    import numpy as np
    from numpy.lib.stride_tricks import as_strided

    np_dtype = raw_numpy_dtype(tensor.dtype)
    item = tensor.itemsize
    if tensor.numel == 0:
        return
    dims = list(zip(tensor.shape, tensor.stride, strict=True))
    if not logical:
        dims = sorted((d for d in dims if d[0] != 1), key=lambda d: -d[1]) or [(1, 1)]

    def span(ds: list[tuple[int, int]]) -> int:
        return (sum((n - 1) * s for n, s in ds) + 1) * item

    def walk(base: int, ds: list[tuple[int, int]]) -> Iterator[Any]:
        if not ds or span(ds) <= limit:
            nbytes = span(ds)
            offset, _ = blobs.check_within(storage, base * item, nbytes)
            with blobs.window(storage.file, offset, nbytes) as view:
                flat = np.frombuffer(view, dtype=np_dtype, count=nbytes // item)
                shape = [n for n, _ in ds] or [1]
                strides = [s * item for _, s in ds] or [item]
                block = as_strided(flat, shape=shape, strides=strides, writeable=False).copy().reshape(-1)
                del flat
            yield block
            return
        (n0, s0), rest = ds[0], ds[1:]
        rest_span = span(rest)
        if rest_span <= limit and s0 > 0:
            rows = max(1, (limit - rest_span) // (s0 * item) + 1)
            for i in range(0, n0, rows):
                yield from walk(base + i * s0, [(min(rows, n0 - i), s0), *rest])
        else:
            for i in range(n0):
                yield from walk(base + i * s0, rest)

    total_span = span(dims)
    if logical and limit < total_span <= _WHOLE_SPAN and len(tensor.shape) > 0:
        # C order through a transposed view jumps across the whole span for every row: map the span
        # once and copy rows out of it, rather than re-reading it row by row.
        offset, _ = blobs.check_within(storage, tensor.storage_offset * item, total_span)
        with blobs.window(storage.file, offset, total_span) as view:
            flat = np.frombuffer(view, dtype=np_dtype, count=total_span // item)
            full = as_strided(flat, shape=tensor.shape, strides=[s * item for s in tensor.stride], writeable=False)
            row = max(1, math.prod(tensor.shape[1:]))
            rows = max(1, limit // (row * item))
            try:
                for i in range(0, tensor.shape[0], rows):
                    yield full[i : i + rows].copy().reshape(-1)
            finally:
                del full, flat
        return
    yield from walk(tensor.storage_offset, dims)


# ---------------------------------------------------------------- planning and running the scan


@dataclass
class _View:
    """One distinct contiguous float view of a storage; tied names share it."""

    storage: StorageInfo
    start: int  # byte offset within the storage
    nbytes: int
    dtype: str
    names: list[str]
    moments: _Moments = field(default_factory=_Moments)


@dataclass
class _Piece:
    storage_index: int
    chunk_index: int
    start: int  # within the storage
    length: int
    crc: bool
    views: list[_View]


def _plan(ckpt: Checkpoint, blobs: Blobs, findings: list[Finding], skipped: list[str]):
    by_storage: dict[str, list[TensorInfo]] = {}
    for t in ckpt.tensors:
        by_storage.setdefault(t.storage_key, []).append(t)
    storages: list[StorageInfo] = []
    pieces: list[_Piece] = []
    strided: list[tuple[StorageInfo, TensorInfo, list[str]]] = []
    views: list[_View] = []
    for key, storage in ckpt.storages.items():
        users = by_storage.get(key, [])
        names = ", ".join(t.name for t in users) or "(no tensor)"
        if storage.offset is None:
            if users:
                some = ", ".join(t.name for t in users[:3])
                skipped.append(f"{key}: bytes not addressable in {storage.file.name} ({some})")
            continue
        try:
            blobs.check_within(storage)
        except UnreadableStorage as exc:
            findings.append(Finding("CORRUPT", f"{exc}; tensors on it: {names}", users[0].name if users else None))
            continue
        contiguous: dict[tuple[int, int, str], _View] = {}
        for t in users:
            if t.dtype not in SCANNED_DTYPES or t.numel == 0:
                continue
            if t.byte_offset + t.span_bytes > storage.nbytes:
                message = f"{t.name} reaches past the end of its storage {key} ({storage.nbytes:,} bytes)"
                findings.append(Finding("CORRUPT", message, t.name))
                continue
            if t.is_contiguous:
                k = (t.byte_offset, t.nbytes, t.dtype)
                if k in contiguous:
                    contiguous[k].names.append(t.name)
                else:
                    contiguous[k] = _View(storage, t.byte_offset, t.nbytes, t.dtype, [t.name])
            else:
                strided.append((storage, t, [t.name]))
        want_crc = storage.crc32 is not None
        ranges = sorted(contiguous.values(), key=lambda v: v.start)
        views.extend(ranges)
        if want_crc:
            lo, hi = 0, storage.nbytes
        elif ranges:
            lo, hi = ranges[0].start, max(v.start + v.nbytes for v in ranges)
        else:
            continue
        index = len(storages)
        storages.append(storage)
        if hi == lo:
            pieces.append(_Piece(index, 0, lo, 0, want_crc, []))
        chunks = range(lo, hi, DEFAULT_CHUNK)
        for c, overlapping in enumerate(_views_by_chunk(ranges, lo, hi, len(chunks))):
            start = chunks[c]
            pieces.append(_Piece(index, c, start, min(start + DEFAULT_CHUNK, hi) - start, want_crc, overlapping))
    return storages, pieces, strided, views


def _views_by_chunk(ranges: list[_View], lo: int, hi: int, count: int) -> list[list[_View]]:
    """For each of the `count` chunks from `lo` (DEFAULT_CHUNK each, the last ending at `hi`), the views
    that have a byte in it, in the order of `ranges`. One pass over the views, not one per chunk: a 2 GiB
    flat buffer of 50,000 views has 256 chunks."""
    per_chunk: list[list[_View]] = [[] for _ in range(count)]
    for v in ranges:
        if v.start >= hi:
            continue
        first = (v.start - lo) // DEFAULT_CHUNK
        last = min(count - 1, (v.start + v.nbytes - 1 - lo) // DEFAULT_CHUNK)
        for c in range(first, last + 1):
            per_chunk[c].append(v)
    return per_chunk


def _units(pieces: list[_Piece]) -> Iterator[list[_Piece]]:
    """Batch small pieces so thousands of tiny tensors do not cost a future each."""
    batch: list[_Piece] = []
    size = 0
    for p in pieces:
        batch.append(p)
        size += p.length + 4096
        if size >= DEFAULT_CHUNK:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _run_pieces(blobs: Blobs, storages: list[StorageInfo], unit: list[_Piece]):
    """CRC and moments of each piece in one pass: block by block, so the numpy passes find the block in
    cache right after the CRC has read it from memory."""
    out = []
    for p in unit:
        storage = storages[p.storage_index]
        moments = [_Moments() for _ in p.views]
        crc = 0
        if p.length:
            with blobs.window(storage.file, storage.offset + p.start, p.length) as view:  # type: ignore[operator]
                for start in range(0, p.length, _BLOCK):
                    end = min(start + _BLOCK, p.length)
                    if p.crc:
                        crc = zlib.crc32(view[start:end], crc)
                    for i, v in enumerate(p.views):
                        a = max(v.start - p.start, start)
                        b = min(v.start + v.nbytes - p.start, end)
                        if a < b:
                            moments[i].merge(_moments_of_bytes(view[a:b], v.dtype))
        out.append((p, crc, list(zip(p.views, moments, strict=True))))
    return out


def _run_strided(blobs: Blobs, storage: StorageInfo, tensor: TensorInfo) -> _Moments:
    total = _Moments()
    for block in iter_view_blocks(blobs, storage, tensor, logical=False):
        total.merge(_moments_of_array(block, tensor.dtype))
    return total


def scan_values(ckpt: Checkpoint, progress: Progress | None = None) -> ScanResult:
    """CRC every storage whose CRC is known, and take min/max/mean/std/NaN/Inf/fp16-range of every float tensor.

    Memory stays at a few chunks per thread whatever the file size. Findings are returned, not added
    to `ckpt`; the caller decides where they go.
    """
    started = time.perf_counter()
    findings: list[Finding] = []
    skipped: list[str] = []
    stats: dict[str, TensorStats] = {}
    with Blobs() as blobs:
        with no_gc():  # ~150k small objects without cycles for a 50,000-tensor file
            storages, pieces, strided, views = _plan(ckpt, blobs, findings, skipped)
        total = sum(p.length for p in pieces) + sum(t.span_bytes for _, t, _ in strided)
        done = 0
        crc_parts: dict[int, dict[int, tuple[int, int]]] = {}
        strided_moments: dict[str, _Moments] = {}
        if progress:
            progress(0, total)

        def collect(kind: str, payload: Any, result: Any) -> None:
            nonlocal done
            if kind == "pieces":
                for p, crc, partial in result:
                    if p.crc:
                        crc_parts.setdefault(p.storage_index, {})[p.chunk_index] = (crc, p.length)
                    for v, m in partial:
                        v.moments.merge(m)
                    done += p.length
            else:
                storage, tensor, _ = payload
                strided_moments[tensor.name] = result
                done += tensor.span_bytes
            if progress:
                progress(done, total)

        jobs: list[tuple[str, Any]] = [("pieces", u) for u in _units(pieces)] + [("strided", s) for s in strided]
        workers = worker_count()

        def run(kind: str, payload: Any) -> Any:
            if kind == "pieces":
                try:
                    return _run_pieces(blobs, storages, payload)
                except (UnreadableStorage, OSError) as exc:  # the file changed under us since planning
                    findings.append(Finding("CORRUPT", f"{ckpt.path.name}: {exc}"))
                    return []
            try:
                return _run_strided(blobs, payload[0], payload[1])
            except UnreadableStorage as exc:
                findings.append(Finding("CORRUPT", f"{payload[1].name}: {exc}", payload[1].name))
                return _Moments()

        if workers == 1:
            for kind, payload in jobs:
                collect(kind, payload, run(kind, payload))
        else:
            with ThreadPoolExecutor(workers, thread_name_prefix="ckinspect-scan") as pool:
                pending: dict[Future[Any], tuple[str, Any]] = {}
                queue = iter(jobs)
                for kind, payload in queue:
                    pending[pool.submit(run, kind, payload)] = (kind, payload)
                    if len(pending) >= workers * 2:
                        finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                        for fut in finished:
                            collect(*pending.pop(fut), fut.result())
                for fut in list(pending):
                    collect(*pending.pop(fut), fut.result())

        crc_checked = 0
        users: dict[str, list[str]] = {}
        for t in ckpt.tensors:
            users.setdefault(t.storage_key, []).append(t.name)
        for index, storage in enumerate(storages):
            if storage.crc32 is None:
                continue
            crc = None
            for c in sorted(crc_parts.get(index, {})):
                part, length = crc_parts[index][c]
                crc = part if crc is None else crc32_combine(crc, part, length)
            crc = crc or 0
            crc_checked += 1
            if crc != storage.crc32:
                names = users.get(storage.key, [])
                member = storage.member or storage.key
                findings.append(
                    Finding(
                        "CORRUPT",
                        f"CRC mismatch in {member} (expected {storage.crc32:08x}, read {crc:08x}): the stored bytes "
                        f"of {', '.join(names) or 'an unused storage'} changed on disk; "
                        "torch.load would load them silently",
                        names[0] if names else None,
                    )
                )

    for v in views:
        s = v.moments.stats()
        for name in v.names:
            stats[name] = s
    for name, m in strided_moments.items():
        stats[name] = m.stats()

    order = {t.name: i for i, t in enumerate(ckpt.tensors)}
    dtypes = {t.name: t.dtype for t in ckpt.tensors}
    for name in sorted(stats, key=lambda n: order.get(n, 0)):
        s = stats[name]
        if s.nonfinite:
            inf = s.nonfinite - s.nan
            message = f"{name}: {s.nan:,} NaN and {inf:,} Inf among {s.count:,} values"
            findings.append(Finding("NONFINITE", message, name))
        if s.fp16_overflow and dtypes.get(name) in OVERFLOW_DTYPES:
            findings.append(
                Finding(
                    "FP16_OVERFLOW",
                    f"{name}: {s.fp16_overflow:,} of {s.count:,} values beyond float16's range "
                    f"(max |x| {s.max_abs:.6g} > 65504); a half-precision save turns them into inf",
                    name,
                )
            )
    return ScanResult(findings, stats, done, time.perf_counter() - started, crc_checked, skipped)


@contextlib.contextmanager
def terminal_progress(
    label: str = "scanning values", enabled: bool = True, min_bytes: int = 64 << 20
) -> Iterator[Progress | None]:
    """A progress callback drawing a rich bar on stderr, or None when stderr is not a terminal (CI, pipes).

    The bar appears only for work of at least `min_bytes`, so small files print nothing extra.
    """
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    state: dict[str, Any] = {"bar": None, "task": None, "last": 0.0}

    def update(done: int, total: int) -> None:
        if state["bar"] is None:
            if total < min_bytes:
                return
            from rich.console import Console
            from rich.progress import BarColumn, DownloadColumn, TextColumn, TimeRemainingColumn, TransferSpeedColumn
            from rich.progress import Progress as Bar

            bar = Bar(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            state["task"] = bar.add_task(label, total=total)
            bar.start()
            state["bar"] = bar
        now = time.monotonic()
        if done >= total or now - state["last"] > 0.1:
            state["last"] = now
            state["bar"].update(state["task"], completed=done, total=total)

    try:
        yield update
    finally:
        if state["bar"] is not None:
            state["bar"].stop()
