"""The value scan: every stored byte checked against its CRC, every floating value checked for NaN/Inf
and for values half precision cannot hold. Streams bounded chunks on two threads; never imports torch.

One pass over memory: each chunk is mapped (an mmap window: page-cache pages are mapped, not copied;
a pread into a reused buffer cost more CPU than the page faults, measured) and walked in SCAN_BLOCK
blocks. The fast CRC-32 (`ckinspect.io.crc`) reads a block from memory, then the numeric passes
(`analysis.stats`) find it in cache. 1 MiB blocks measured best: 256 KiB blocks cost ~40% more CPU in
per-call overhead, 2 MiB ones sent OpenBLAS to its own threads. `python bench/bench_scan.py` compares
it with cat.

    result = scan_values(ckpt, progress)   # progress(done_bytes, total_bytes), called on this thread
    scan_values(ckpt, keep=Kept({"model.w"}, budget))   # also copy those tensors' raw elements out (see Kept)
    result.findings                        # CORRUPT (CRC mismatch / cut short), NONFINITE, FP16_OVERFLOW
    result.stats["model.tok_emb.weight"]   # TensorStats(min, max, mean, std, nonfinite, fp16_overflow, max_abs)
    scan_values(ckpt, mean_std=False)      # the same findings, one numeric pass per block instead of four
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from ckinspect import settings
from ckinspect.analysis.layouts import bookkeeping_meaning
from ckinspect.analysis.stats import OVERFLOW_DTYPES, SCANNED_DTYPES, Moments, TensorStats, moments_of_array
from ckinspect.formats.tree import no_gc
from ckinspect.io import folders
from ckinspect.io.blobs import Blobs, UnreadableStorage
from ckinspect.io.crc import crc32, crc32_combine
from ckinspect.io.values import iter_view_blocks, raw_numpy_dtype, to_native
from ckinspect.model import Checkpoint, Finding, StorageInfo, TensorInfo
from ckinspect.record import Record, field

Progress = Callable[[int, int], None]

SCAN_BLOCK = 1 << 20  # bytes per CRC + numeric pass: read from memory once by the CRC, then from cache
# bytes mapped at a time: each unmap of a window stops the other scanning thread for a TLB flush, so
# 8 MiB windows cost 0.26 CPU s per GB on two threads and 32 MiB ones 0.20, 9.5 GB/s against cat's 7.4
# (the CRC + check kernel alone, `python bench/bench_scan.py`); larger ones gained nothing more
SCAN_WINDOW = 32 << 20
SERIAL_BYTES = 2 * SCAN_BLOCK  # a scan this small runs on the calling thread: a pool's start costs more


def worker_count() -> int:
    """Two threads on the usual 2-core box; CKINSPECT_THREADS overrides (1 disables threading)."""
    return settings.threads() or max(1, min(2, os.cpu_count() or 1))


class Kept(Record):
    """Raw elements of some float tensors, copied out of the scan's own reads while they are in cache, so
    that a later use of their values (the watch's comparison with the next save, analysis.updates) needs
    no second read of the file. Only contiguous tensors the scan read whole, and only up to `budget` bytes
    (tensors in storage order; one that does not fit is left out and read from the file when needed)."""

    __hash__ = None  # type: ignore[assignment]  # filled by the scan

    names: set[str]  # the tensors wanted
    budget: int
    values: dict[str, Any] = field(default_factory=dict)  # name -> raw elements (io.values.raw_numpy_dtype), C order
    nbytes: int = 0  # held by `values` (tied names share one array)


class ScanResult(Record):
    __hash__ = None  # type: ignore[assignment]  # changed after it is built

    findings: list[Finding]
    stats: dict[str, TensorStats]
    bytes_scanned: int
    seconds: float = 0.0
    crc_checked: int = 0  # storages whose CRC was known and checked
    skipped: list[str] = field(default_factory=list)  # storages that could not be read directly, and why


# ---------------------------------------------------------------- planning and running the scan


class _View(Record):
    """One distinct contiguous float view of a storage; tied names share it."""

    __hash__ = None  # type: ignore[assignment]  # changed after it is built

    storage: StorageInfo
    start: int  # byte offset within the storage
    nbytes: int
    dtype: str
    names: list[str]
    moments: Moments = field(default_factory=Moments)
    kept: Any = None  # a numpy array the scan copies this view's raw elements into (Kept), or None
    copied: int = 0  # bytes copied into `kept` so far


class _Piece(Record):
    __hash__ = None  # type: ignore[assignment]  # changed after it is built

    storage_index: int
    chunk_index: int
    start: int  # within the storage
    length: int
    crc: bool
    views: list[_View]


class _Plan(Record):
    """What the scan will read: the storages read in pieces, the pieces, the views read one by one
    (strided views, and any view of a deflated member), and the contiguous views the pieces feed."""

    __hash__ = None  # type: ignore[assignment]  # filled while planning

    storages: list[StorageInfo] = field(default_factory=list)
    pieces: list[_Piece] = field(default_factory=list)
    strided: list[tuple[StorageInfo, TensorInfo, list[str]]] = field(default_factory=list)
    views: list[_View] = field(default_factory=list)
    chunk_of: dict[str, tuple[str, str]] = field(default_factory=dict)  # a chunk's storage key -> (tensor, where)


def _plan(ckpt: Checkpoint, blobs: Blobs, findings: list[Finding], skipped: list[str]):
    by_storage: dict[str, list[TensorInfo]] = {}
    for t in ckpt.tensors:
        by_storage.setdefault(t.storage_key, []).append(t)
    plan = _Plan()
    for key, storage in ckpt.storages.items():
        users = by_storage.get(key, [])
        if storage.extents is not None:
            _plan_extents(plan, storage, users, blobs, findings, skipped)
        elif _readable(storage, users, blobs, findings, skipped):
            _plan_pieces(plan, storage, _plan_views(plan, storage, users, findings))
    return plan


def _plan_extents(plan: _Plan, storage: StorageInfo, users: list[TensorInfo], blobs: Blobs, findings: list[Finding],
                  skipped: list[str]) -> None:  # fmt: skip
    """A tensor stored in chunks (model.Extents): each chunk planned as a storage of its own with one view,
    whose moments _gathered_stats folds into the tensor's."""
    ext = storage.extents
    assert ext is not None  # noqa: S101 - the caller checked
    whole = next((t for t in users if t.is_contiguous and not t.storage_offset and t.numel), None)
    if whole is None or whole.dtype not in SCANNED_DTYPES and storage.crc32 is None and all(c < 0 for c in ext.crc):
        return
    for i in range(len(ext)):
        part = ext.storage(i, storage.dtype, storage.key, whole.name)
        chunk = ext.chunk(i, whole.name, whole.dtype, storage.key)
        if not _readable(part, [chunk], blobs, findings, skipped):
            continue
        views = _plan_views(plan, part, [chunk], findings)
        plan.chunk_of[part.key] = (whole.name, ext.where(i))
        _plan_pieces(plan, part, views)


def _readable(storage: StorageInfo, users: list[TensorInfo], blobs: Blobs, findings: list[Finding],
              skipped: list[str]) -> bool:  # fmt: skip
    """Whether the storage's bytes can be read: in place, or streamed from a deflated member."""
    if storage.deflated is not None:
        return True
    if storage.offset is None:
        if users:
            some = ", ".join(t.name for t in users[:3])
            skipped.append(f"{storage.key}: bytes not addressable in {storage.file.name} ({some})")
        return False
    try:
        blobs.check_within(storage)
    except UnreadableStorage as exc:
        names = ", ".join(t.name for t in users) or "(no tensor)"
        findings.append(Finding("CORRUPT", f"{exc}; tensors on it: {names}", users[0].name if users else None))
        return False
    return True


def _plan_views(plan: _Plan, storage: StorageInfo, users: list[TensorInfo], findings: list[Finding]) -> list[_View]:
    """The storage's distinct contiguous float views, by start (tied names share one); strided views, and
    every view of a deflated member (streamed, so read on its own), go to `plan.strided`."""
    contiguous: dict[tuple[int, int, str], _View] = {}
    for t in users:
        if not _to_scan(t, storage, findings):
            continue
        if t.is_contiguous and storage.deflated is None:
            k = (t.byte_offset, t.nbytes, t.dtype)
            if k in contiguous:
                contiguous[k].names.append(t.name)
            else:
                contiguous[k] = _View(storage, t.byte_offset, t.nbytes, t.dtype, [t.name])
        else:
            plan.strided.append((storage, t, [t.name]))
    ranges = sorted(contiguous.values(), key=lambda v: v.start)
    plan.views.extend(ranges)
    return ranges


def _to_scan(t: TensorInfo, storage: StorageInfo, findings: list[Finding]) -> bool:
    """A float view with values, inside its storage; any view of a deflated member (read for its CRC)."""
    if t.numel == 0:
        return False
    if t.dtype not in SCANNED_DTYPES:
        return storage.deflated is not None
    if t.byte_offset + t.span_bytes > storage.nbytes:
        message = f"{t.name} reaches past the end of its storage {storage.key} ({storage.nbytes:,} bytes)"
        findings.append(Finding("CORRUPT", message, t.name))
        return False
    return True


def _plan_pieces(plan: _Plan, storage: StorageInfo, ranges: list[_View]) -> None:
    """The storage cut into SCAN_WINDOW pieces: all of it when its CRC is known, else the span its views cover.
    A deflated member has none: its views are streamed, and the stream checks its CRC."""
    if storage.deflated is not None:
        return
    want_crc = storage.crc32 is not None
    if want_crc:
        lo, hi = 0, storage.nbytes
    elif ranges:
        lo, hi = ranges[0].start, max(v.start + v.nbytes for v in ranges)
    else:
        return
    index = len(plan.storages)
    plan.storages.append(storage)
    if hi == lo:
        plan.pieces.append(_Piece(index, 0, lo, 0, want_crc, []))
    chunks = range(lo, hi, SCAN_WINDOW)
    for c, overlapping in enumerate(_views_by_chunk(ranges, lo, hi, len(chunks))):
        start = chunks[c]
        plan.pieces.append(_Piece(index, c, start, min(start + SCAN_WINDOW, hi) - start, want_crc, overlapping))


def _views_by_chunk(ranges: list[_View], lo: int, hi: int, count: int) -> list[list[_View]]:
    """For each of the `count` chunks from `lo` (SCAN_WINDOW each, the last ending at `hi`), the views
    that have a byte in it, in the order of `ranges`. One pass over the views, not one per chunk: a 2 GiB
    flat buffer of 50,000 views has 64 chunks."""
    per_chunk: list[list[_View]] = [[] for _ in range(count)]
    for v in ranges:
        if v.start >= hi:
            continue
        first = (v.start - lo) // SCAN_WINDOW
        last = min(count - 1, (v.start + v.nbytes - 1 - lo) // SCAN_WINDOW)
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
        if size >= SCAN_WINDOW:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _run_pieces(blobs: Blobs, storages: list[StorageInfo], unit: list[_Piece], mean_std: bool) -> list[Any]:
    """CRC and moments of each piece in one pass: block by block, so the numpy passes find the block in
    cache right after the CRC has read it from memory (and a kept view is copied out from there too)."""
    import numpy as np

    out = []
    with np.errstate(all="ignore"):  # signalling-NaN patterns in min/max: counted, not warned about
        for p in unit:
            storage = storages[p.storage_index]
            moments = [Moments(summed=mean_std) for _ in p.views]
            kinds = [(raw_numpy_dtype(v.dtype), v.dtype, v.dtype in OVERFLOW_DTYPES) for v in p.views]
            copied = [0] * len(p.views)
            crc = 0
            if p.length:
                with blobs.window(storage.file, storage.offset + p.start, p.length) as view:  # type: ignore[operator]
                    for start in range(0, p.length, SCAN_BLOCK):
                        end = min(start + SCAN_BLOCK, p.length)
                        if p.crc:
                            crc = crc32(view[start:end], crc)
                        for i, v in enumerate(p.views):
                            a = max(v.start - p.start, start)
                            b = min(v.start + v.nbytes - p.start, end)
                            if a < b:
                                raw, dtype, over = kinds[i]
                                values = np.frombuffer(view[a:b], raw)
                                if storage.big_endian:
                                    values = to_native(values, dtype)
                                moments[i].add_raw(values, dtype, over)
                                if v.kept is not None:  # disjoint ranges of one array: threads never overlap
                                    at = p.start + a - v.start
                                    memoryview(v.kept).cast("B")[at : at + b - a] = view[a:b]
                                    copied[i] += b - a
            out.append((p, crc, list(zip(p.views, moments, copied, strict=True))))
    return out


def _run_strided(blobs: Blobs, storage: StorageInfo, tensor: TensorInfo, mean_std: bool) -> Moments | None:
    import numpy as np

    if tensor.dtype not in SCANNED_DTYPES:  # a deflated member's integers: read through for its CRC only
        for _ in iter_view_blocks(blobs, storage, tensor, logical=False):
            pass
        return None
    total = Moments(summed=mean_std)
    with np.errstate(all="ignore"):
        for block in iter_view_blocks(blobs, storage, tensor, logical=False):
            total.merge(moments_of_array(block, tensor.dtype, mean_std))
    return total


def scan_values(
    ckpt: Checkpoint, progress: Progress | None = None, keep: Kept | None = None, mean_std: bool = True
) -> ScanResult:
    """CRC every storage whose CRC is known, and take min/max/mean/std/NaN/Inf/fp16-range of every float tensor.

    Memory stays at a few chunks per thread whatever the file size (plus, with `keep`, the kept values,
    at most its budget). Findings are returned, not added to `ckpt`; the caller decides where they go.
    `mean_std=False` runs the checks only: the same findings, but min, max, mean and std are None
    (max_abs is kept where values overflow float16), for one BLAS pass per block instead of four numpy
    passes (the CLI's report shows findings only; the TUI's details pane shows the statistics).
    """
    started = time.perf_counter()
    findings: list[Finding] = []
    skipped: list[str] = []
    with Blobs() as blobs:
        with no_gc():  # ~150k small objects without cycles for a 50,000-tensor file
            plan = _plan(ckpt, blobs, findings, skipped)
            storages, pieces, strided, views = plan.storages, plan.pieces, plan.strided, plan.views
            if keep is not None:
                _allocate_kept(views, keep)
        total = sum(p.length for p in pieces) + sum(t.span_bytes for _, t, _ in strided)
        scan = _Scan(ckpt, blobs, storages, findings, progress, total, mean_std, chunk_of=plan.chunk_of)
        if progress:
            progress(0, total)
        jobs: list[_Job] = [_PiecesJob(unit) for unit in _units(pieces)]
        jobs += [_StridedJob(storage, tensor) for storage, tensor, _ in strided]
        with blobs.planned(_piece_ranges(storages, pieces)):  # a remote file's small storages: few requests
            _run_jobs(scan, jobs)
        crc_checked = _check_crcs(scan)
    stats = _gathered_stats(views, scan.strided_moments, plan.chunk_of, mean_std)
    if keep is not None:
        _collect_kept(views, keep)
    findings += _value_findings(ckpt, stats)
    return ScanResult(findings, stats, scan.done, time.perf_counter() - started, crc_checked, skipped)


def _piece_ranges(storages: list[StorageInfo], pieces: list[_Piece]) -> dict[Path, list[tuple[int, int]]]:
    """The (offset, length) each piece reads, per file where each read is a request, in the order the jobs read
    them (a local file is read as asked: nothing to plan)."""
    files = {id(s.file): s.file for s in storages}  # a reader's storages share a few Path objects
    remote = {key for key, path in files.items() if not folders.on_disk(path)}
    out: dict[Path, list[tuple[int, int]]] = {}
    if not remote:
        return out
    for p in pieces:
        storage = storages[p.storage_index]
        if p.length and storage.offset is not None and id(storage.file) in remote:
            out.setdefault(storage.file, []).append((storage.offset + p.start, p.length))
    return out


def _gathered_stats(views: list[_View], strided: dict[str, Moments], chunk_of: dict[str, tuple[str, str]],
                    mean_std: bool) -> dict[str, TensorStats]:  # fmt: skip
    """Each tensor's statistics: tied names share their view's; a tensor stored in chunks has its chunks'
    moments merged (as if it were read whole), and the chunks holding NaN/Inf named."""
    stats: dict[str, TensorStats] = {}
    merged: dict[str, tuple[Moments, list[str]]] = {}
    for v in views:
        chunk = chunk_of.get(v.storage.key)
        if chunk is not None:
            total, where = merged.setdefault(chunk[0], (Moments(summed=mean_std), []))
            total.merge(v.moments)
            if v.moments.nan or v.moments.inf:
                where.append(chunk[1])
            continue
        s = v.moments.stats()
        for name in v.names:
            stats[name] = s
    for name, m in strided.items():
        stats[name] = m.stats()
    for name, (total, where) in merged.items():
        stats[name] = total.stats().replace(chunks=tuple(where))
    return stats


def _allocate_kept(views: list[_View], keep: Kept) -> None:
    """An array for each wanted view that fits the budget, which the pieces fill as they are read."""
    import numpy as np

    from ckinspect.io.values import raw_numpy_dtype

    room = keep.budget - keep.nbytes
    for v in views:
        if v.nbytes <= room and not v.storage.big_endian and any(name in keep.names for name in v.names):
            dtype = raw_numpy_dtype(v.dtype)
            v.kept = np.empty(v.nbytes // dtype.itemsize, dtype=dtype)
            room -= v.nbytes


def _collect_kept(views: list[_View], keep: Kept) -> None:
    """Hand over the arrays the scan filled whole; one a failed read left short is dropped (read again later)."""
    for v in views:
        if v.kept is None:
            continue
        if v.copied == v.nbytes:
            keep.nbytes += v.nbytes
            for name in v.names:
                if name in keep.names:
                    keep.values[name] = v.kept
        v.kept = None


class _Scan(Record):
    """What the jobs of one scan share: the open files, the planned storages, and what they gathered."""

    __hash__ = None  # type: ignore[assignment]  # changed after it is built

    ckpt: Checkpoint
    blobs: Blobs
    storages: list[StorageInfo]
    findings: list[Finding]
    progress: Progress | None
    total: int
    mean_std: bool
    done: int = 0
    chunk_of: dict[str, tuple[str, str]] = field(default_factory=dict)  # _Plan.chunk_of
    crc_parts: dict[int, dict[int, tuple[int, int]]] = field(default_factory=dict)  # storage -> chunk -> crc, length
    strided_moments: dict[str, Moments] = field(default_factory=dict)

    def advanced(self, nbytes: int) -> None:
        self.done += nbytes
        if self.progress:
            self.progress(self.done, self.total)


class _PiecesJob(Record):
    """Chunks of contiguous storage: partial moments of the views in them, and each chunk's CRC."""

    unit: list[_Piece]

    def run(self, scan: _Scan) -> Any:
        try:
            return _run_pieces(scan.blobs, scan.storages, self.unit, scan.mean_std)
        except (UnreadableStorage, OSError) as exc:  # the file changed under us since planning
            scan.findings.append(Finding("CORRUPT", f"{scan.ckpt.path.name}: {exc}"))
            return []

    def collect(self, scan: _Scan, result: Any) -> None:
        for p, crc, partial in result:
            if p.crc:
                scan.crc_parts.setdefault(p.storage_index, {})[p.chunk_index] = (crc, p.length)
            for v, m, copied in partial:
                v.moments.merge(m)
                v.copied += copied
        scan.advanced(sum(p.length for p, _, _ in result))


class _StridedJob(Record):
    """One non-contiguous float view, walked in element blocks."""

    storage: StorageInfo
    tensor: TensorInfo

    def run(self, scan: _Scan) -> Any:
        try:
            return _run_strided(scan.blobs, self.storage, self.tensor, scan.mean_std)
        except UnreadableStorage as exc:
            scan.findings.append(Finding("CORRUPT", f"{self.tensor.name}: {exc}", self.tensor.name))
            return Moments() if self.tensor.dtype in SCANNED_DTYPES else None

    def collect(self, scan: _Scan, result: Any) -> None:
        if result is not None:
            scan.strided_moments[self.tensor.name] = result
        scan.advanced(self.tensor.span_bytes)


_Job = _PiecesJob | _StridedJob


def _run_jobs(scan: _Scan, jobs: list[_Job]) -> None:
    """Run every job (on worker threads, at most two per worker queued) and collect each on this thread; a
    scan of less than SERIAL_BYTES runs here, in order (a thread pool per file cost more than it saved on each
    of a ZeRO-3 tag's 1,024 rank files of a few KB: 0.8 of 1.1 CPU-s)."""
    workers = worker_count()
    if workers == 1 or len(jobs) < 2 or scan.total < SERIAL_BYTES:
        for job in jobs:
            job.collect(scan, job.run(scan))
        return
    with ThreadPoolExecutor(workers, thread_name_prefix="ckinspect-scan") as pool:
        pending: dict[Future[Any], _Job] = {}
        for job in jobs:
            pending[pool.submit(job.run, scan)] = job
            if len(pending) >= workers * 2:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in finished:
                    pending.pop(fut).collect(scan, fut.result())
        for fut in list(pending):
            pending.pop(fut).collect(scan, fut.result())


def _check_crcs(scan: _Scan) -> int:
    """Combine each storage's chunk CRCs and compare with the zip directory's; how many were checked."""
    crc_checked = 0
    users: dict[str, list[str]] = {}
    for t in scan.ckpt.tensors:
        users.setdefault(t.storage_key, []).append(t.name)
    for index, storage in enumerate(scan.storages):
        if storage.crc32 is None:
            continue
        crc = _combined_crc(scan.crc_parts.get(index, {}))
        crc_checked += 1
        if crc != storage.crc32:
            chunk = scan.chunk_of.get(storage.key)
            names = [chunk[0]] if chunk is not None else users.get(storage.key, [])
            member = storage.member or storage.key
            scan.findings.append(
                Finding(
                    "CORRUPT",
                    f"CRC mismatch in {member} (expected {storage.crc32:08x}, read {crc:08x}): the stored bytes "
                    f"of {', '.join(names) or 'an unused storage'} changed on disk; "
                    "torch.load would load them silently",
                    names[0] if names else None,
                )
            )
    return crc_checked


def _combined_crc(parts: dict[int, tuple[int, int]]) -> int:
    """The CRC-32 of a storage from its chunks' (chunk index -> (CRC, length)), in chunk order."""
    crc = None
    for c in sorted(parts):
        part, length = parts[c]
        crc = part if crc is None else crc32_combine(crc, part, length)
    return crc or 0


def value_findings(ckpt: Checkpoint, stats: dict[str, TensorStats]) -> list[Finding]:
    """The NONFINITE and FP16_OVERFLOW findings of these stats, as scan_values makes them: public so that
    a scan split into parts (jobs.parallel) makes them once from the parts' merged stats."""
    return _value_findings(ckpt, stats)


def _value_findings(ckpt: Checkpoint, stats: dict[str, TensorStats]) -> list[Finding]:
    """NONFINITE and FP16_OVERFLOW, in checkpoint order (a family of like findings grouped into one)."""
    order = {t.name: i for i, t in enumerate(ckpt.tensors)}
    dtypes = {t.name: t.dtype for t in ckpt.tensors}
    counters = {t.name for t in ckpt.tensors if is_step_counter(t)}
    value_findings: list[Finding] = []
    for name in sorted(stats, key=lambda n: order.get(n, 0)):
        s = stats[name]
        if s.nonfinite:
            value_findings.append(_nonfinite_finding(ckpt, name, s))
        # a step counter is a count, not a weight: no half-precision save ever casts it, so 65,504 is no limit
        if s.fp16_overflow and dtypes.get(name) in OVERFLOW_DTYPES and name not in counters:
            value_findings.append(
                Finding(
                    "FP16_OVERFLOW",
                    f"{name}: {s.fp16_overflow:,} of {s.count:,} values beyond float16's range "
                    f"(max |x| {s.max_abs:.6g} > 65504); a half-precision save turns them into inf",
                    name,
                )
            )
    return group_by_family(value_findings)


def _nonfinite_finding(ckpt: Checkpoint, name: str, s: TensorStats) -> Finding:
    """NONFINITE, or BOOKKEEPING_SENTINEL where the layout says the value is a framework's sentinel."""
    meaning = bookkeeping_meaning(ckpt.layout, name)
    if meaning is not None:
        values = f"{s.nan:,} NaN and {s.nonfinite - s.nan:,} Inf among {s.count:,} values"
        return Finding("BOOKKEEPING_SENTINEL", f"{name}: {values}: {meaning}", name)
    inf = s.nonfinite - s.nan
    where = ""
    if s.chunks:  # a tensor stored in chunks: which of them (the first few) hold the values
        more = f" and {len(s.chunks) - _MAX_EXAMPLES} more" if len(s.chunks) > _MAX_EXAMPLES else ""
        where = f", in chunk{'s' if len(s.chunks) > 1 else ''} {'; '.join(s.chunks[:_MAX_EXAMPLES])}{more}"
    return Finding("NONFINITE", f"{name}: {s.nan:,} NaN and {inf:,} Inf among {s.count:,} values{where}", name)


STEP_COUNTER_NAMES = ("step", "steps", "num_steps", "iteration")


def is_step_counter(t: TensorInfo) -> bool:
    """An optimizer's per-parameter step (Adam's `optimizer.state.3.step`): one number that counts updates."""
    parts = t.name.split(".")
    return t.numel == 1 and parts[-1] in STEP_COUNTER_NAMES and (t.group == "optimizer" or "state" in parts[:-1])


_MAX_EXAMPLES = 3


def family(name: str) -> str:
    """The name with its indices as `*`: `layers.3.attn.wq.weight` -> `layers.*.attn.wq.weight`."""
    return ".".join("*" if part.isdigit() else part for part in name.split("."))


def group_by_family(findings: list[Finding]) -> list[Finding]:
    """Findings of one code over tensors of one family become one finding with a count and examples."""
    groups: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        groups.setdefault((f.code, family(f.tensor or "")), []).append(f)
    out: list[Finding] = []
    for (code, fam), members in groups.items():
        if len(members) == 1 or "*" not in fam:
            out.extend(members)
            continue
        shown = "; ".join(f.message for f in members[:_MAX_EXAMPLES])
        more = f"; and {len(members) - _MAX_EXAMPLES} more" if len(members) > _MAX_EXAMPLES else ""
        out.append(Finding(code, f"{len(members)} tensors named {fam}: {shown}{more}", members[0].tensor))
    return out


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
