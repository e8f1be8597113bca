"""The value scan of many parts at once: each file of a sharded set or a DCP folder (and each checkpoint of a
folder) is one unit, scanned by a pool of worker processes (`--jobs N`) or by the ranks of a torchrun job
(`jobs.ranks`). The merged findings are the same whoever scanned which part:

    units = plan_units(checkpoints)                      # listing already done; nothing read yet
    results = scan_units(units, jobs=2)                  # PartScan records, one per unit, in unit order
    merge_scans(checkpoints, units, results)             # findings appended, as inspect_path would

A unit carries only descriptors (TensorInfo, StorageInfo) and comes back as a `PartScan`: the part's
CORRUPT findings and the stats of the tensors that hold NaN/Inf or values beyond float16. Tensors never
cross a process boundary. The NONFINITE and FP16_OVERFLOW findings are made once per checkpoint from the
merged stats (`scan.value_findings`), so a family of tensors spread over four shards is still one finding,
as in one process; the parts' own findings follow part order (a checkpoint's files in the order its
reader listed their storages), whatever order the workers finished in. `--jobs 1` runs the same units
one after another in this process, so its report is the reference the others are compared with.

Why forkserver (spawn where there is none): the parent has threads running when it starts the pool
(rich's progress refresher, torch's gloo threads under torchrun, the TUI's workers), and fork copies a
process whose other threads may hold locks that then stay held in the child forever (CPython 3.12
warns about exactly this), so fork is out whatever it costs. Of the two safe methods, forkserver forks
each worker from a clean single-threaded server that has imported this module and the scanner (numpy)
once, where spawn imports everything again in every worker. Measured for a 2-worker pool over two
tiny shards, seconds to both results (`python bench/bench_parallel.py --start-methods` runs it), on
the shared 2-core box at load average 7 to 9, so only the order means much: fork 1.06-1.20,
forkserver 1.39-1.85, spawn 2.27-3.53. Below `MIN_POOL_BYTES` of scanning the pool costs more than
it saves (one process scans with two threads already), so a default `--jobs` scans smaller work in
this process; an explicit `--jobs N` always uses N processes when there are 2+ units.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from ckinspect import settings
from ckinspect.io import folders
from ckinspect.model import Checkpoint, Finding, StorageInfo, TensorInfo
from ckinspect.record import Record, field
from ckinspect.vocab import CkinspectError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ckinspect.analysis.stats import TensorStats  # numpy and typing: only where values are scanned

Progress = Callable[[int, int], None]

VALUE_CODES = ("NONFINITE", "FP16_OVERFLOW")  # made from the merged stats of the whole checkpoint
MIN_POOL_BYTES = 1 << 30  # below this (default --jobs) one process finishes before a pool has started


class ScanUnit(Record):
    """One file's share of one checkpoint's value scan: descriptors only, no bytes."""

    __hash__ = None  # type: ignore[assignment]  # holds lists

    checkpoint: int  # index in the list of checkpoints being reported
    part: int  # index of this file among the checkpoint's files
    path: Path  # the checkpoint's path (messages name it, as a whole-checkpoint scan does)
    format: str
    file: str  # the data file this unit reads
    tensors: list[TensorInfo]
    storages: list[StorageInfo]
    nbytes: int  # the most this unit reads: its addressable storage bytes
    local: bool = True  # False: a URL, read by ranged requests in the process that opened it

    def key(self) -> tuple[str, int, str, int]:
        """What every rank must agree on before it takes its share."""
        return (str(self.path), self.part, self.file, self.nbytes)


class PartScan(Record):
    """What scanning one unit found: small records that cross a process boundary cheaply."""

    __hash__ = None  # type: ignore[assignment]  # holds lists

    checkpoint: int
    part: int
    findings: list[Finding]  # CORRUPT (CRC mismatch, cut short ...): every scan finding but the value ones
    flagged: dict[str, TensorStats]  # only tensors with NaN/Inf or values beyond float16
    bytes_scanned: int
    skipped: list[str] = field(default_factory=list)
    cpu_seconds: float = 0.0  # CPU time of the process that scanned it, while it did (benches; never reported)
    pid: int = 0  # the process that scanned it
    seconds: float = 0.0  # wall time of its scan in that process (benches; never reported)


def checked_jobs(jobs: int | None) -> int | None:
    """A --jobs value as given (None: the default), or CkinspectError (one line, exit 2) below 1."""
    if jobs is not None and jobs < 1:
        raise CkinspectError(f"--jobs must be 1 or more, not {jobs}")
    return jobs


def default_jobs() -> int:
    """The number of cores this process may use; under torchrun, its share of the node's cores."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1) if os.environ.get("TORCHELASTIC_RUN_ID") else 1
    return max(1, cores // max(1, per_node))


def plan_units(checkpoints: Sequence[Checkpoint]) -> list[ScanUnit]:
    """The units of every checkpoint that has tensors, in checkpoint order, each checkpoint's files in
    the order its storages were listed."""
    units: list[ScanUnit] = []
    for index, ckpt in enumerate(checkpoints):
        if ckpt.tensors:  # inspect_path scans only a checkpoint with tensors
            units.extend(_units_of(index, ckpt))
    return units


def _units_of(index: int, ckpt: Checkpoint) -> list[ScanUnit]:
    """One unit per file of a local checkpoint; one for a URL (its reads stay in the process whose session
    opened it)."""
    local = folders.on_disk(ckpt.path)
    by_file: dict[str, list[StorageInfo]] = {}
    for storage in ckpt.storages.values():
        if storage.extents is not None and local:
            for file, share in _shares_by_file(storage):
                by_file.setdefault(file, []).append(share)
        else:
            by_file.setdefault(str(storage.file) if local else str(ckpt.path), []).append(storage)
    files_of: dict[str, list[str]] = {}
    for file, storages in by_file.items():
        for s in storages:
            files_of.setdefault(s.key, []).append(file)
    tensors_of: dict[str, list[TensorInfo]] = {}
    for tensor in ckpt.tensors:
        for file in files_of.get(tensor.storage_key, [""]):  # a tensor in chunks: in each file that holds one
            tensors_of.setdefault(file, []).append(tensor)
    return [
        ScanUnit(
            index,
            part,
            ckpt.path,
            ckpt.format,
            file,
            tensors_of.get(file, []),
            storages,
            sum(s.nbytes for s in storages if s.offset is not None or s.extents is not None),
            local,
        )  # fmt: skip
        for part, (file, storages) in enumerate(by_file.items())
    ]


def _shares_by_file(storage: StorageInfo) -> Iterator[tuple[str, StorageInfo]]:
    """A storage in chunks (model.Extents) as one storage per file holding some of its chunks (same key)."""
    ext = storage.extents
    assert ext is not None  # noqa: S101 - the caller checked
    by_file: dict[int, list[int]] = {}
    for i, f in enumerate(ext.file):
        by_file.setdefault(f, []).append(i)
    for f, indices in by_file.items():
        share = ext.subset(indices)
        yield str(ext.files[f]), storage.replace(file=ext.files[f], extents=share,
                                                 nbytes=sum(share.length))  # fmt: skip


def scan_unit(unit: ScanUnit, progress: Progress | None = None) -> PartScan:
    """Scan one unit here (`scan.scan_values` over a checkpoint of this file's tensors and storages)."""
    from ckinspect.analysis.scan import scan_values

    part = Checkpoint(
        path=unit.path,
        format=unit.format,
        file_bytes=0,
        tensors=list(unit.tensors),
        storages={s.key: s for s in unit.storages},
    )
    cpu = time.process_time()
    result = scan_values(part, progress, mean_std=False)  # findings only, as the report path scans
    cpu = time.process_time() - cpu
    findings = [f for f in result.findings if f.code not in VALUE_CODES]
    # a tensor in chunks spread over files: every part's share, merged in merge_scans
    shared = {t.name for t in unit.tensors if part.storages[t.storage_key].extents is not None}
    flagged = {name: s for name, s in result.stats.items() if s.nonfinite or s.fp16_overflow or name in shared}
    return PartScan(
        unit.checkpoint,
        unit.part,
        findings,
        flagged,
        result.bytes_scanned,
        result.skipped,
        cpu,
        os.getpid(),
        result.seconds,
    )


def scan_units(units: Sequence[ScanUnit], jobs: int | None = None, progress: Progress | None = None) -> list[PartScan]:
    """Scan every unit: here one after another, or on `jobs` worker processes. Results in unit order.

    `jobs=None` is the default (the cores this process may use, and the pool only for work of at least
    MIN_POOL_BYTES); an explicit `jobs` > 1 always uses a pool when there are two units or more.
    """
    total = sum(u.nbytes for u in units)
    workers = default_jobs() if jobs is None else max(1, jobs)
    pooled = [u for u in units if u.local]
    use_pool = workers > 1 and len(pooled) > 1 and (jobs is not None or total >= MIN_POOL_BYTES)
    if not use_pool:
        return _scan_here(units, total, progress)
    return _scan_pooled(units, pooled, min(workers, len(pooled)), total, progress)


def _scan_pooled(
    units: Sequence[ScanUnit], pooled: list[ScanUnit], workers: int, total: int, progress: Progress | None
) -> list[PartScan]:
    """The remote units here first (their reads stay in this process), the local ones on the pool."""
    here = _scan_here([u for u in units if not u.local], total, progress)
    results = {(r.checkpoint, r.part): r for r in here}
    done = sum(r.bytes_scanned for r in here)
    for result in pool_scan(pooled, workers):
        results[(result.checkpoint, result.part)] = result
        done += result.bytes_scanned
        if progress:
            progress(min(done, total), total)
    return [results[(u.checkpoint, u.part)] for u in units]


def _scan_here(units: Sequence[ScanUnit], total: int, progress: Progress | None) -> list[PartScan]:
    out: list[PartScan] = []
    before = 0
    for unit in units:
        step = None
        if progress:

            def step(done: int, _of: int, before: int = before) -> None:
                progress(min(before + done, total), total)

        out.append(scan_unit(unit, step))
        before += out[-1].bytes_scanned
    return out


def pool_scan(units: Sequence[ScanUnit], workers: int, method: str | None = None) -> Iterator[PartScan]:
    """Each unit's PartScan as it finishes, on `workers` processes started by `method` (default:
    start_method()), largest units first so that the last to start is small."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    context = multiprocessing.get_context(method or start_method())
    if context.get_start_method() == "forkserver":
        context.set_forkserver_preload([__name__, "ckinspect.analysis.scan"])  # numpy and the scanner, once
    threads = _threads_per_worker(workers)
    order = sorted(units, key=lambda u: -u.nbytes)
    try:
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker, initargs=(threads,)) as pool:
            futures = [pool.submit(scan_unit, unit) for unit in order]
            for future in as_completed(futures):
                yield future.result()
    except BrokenProcessPool as exc:
        raise CkinspectError(f"a scan worker process died ({exc}); try --jobs 1") from None


def start_method() -> str:
    """forkserver where the platform has it, else spawn; never fork (see the module's docstring)."""
    import multiprocessing

    return "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def _threads_per_worker(workers: int) -> int:
    """Each worker's scan threads: the cores shared out, so N workers do not run 2N threads on N cores."""
    return settings.threads() or max(1, default_jobs() // workers)


def _start_worker(threads: int) -> None:
    settings.set_threads(threads)


def merge_scans(checkpoints: Sequence[Checkpoint], units: Sequence[ScanUnit], results: Sequence[PartScan]) -> None:
    """Append each checkpoint's scan findings: its parts' own, in part order, then the value findings of
    its merged stats (as one `scan_values` over the whole checkpoint makes them)."""
    from ckinspect.analysis.scan import value_findings
    from ckinspect.analysis.stats import merged_stats

    by_checkpoint: dict[int, list[PartScan]] = {}
    for unit, result in zip(units, results, strict=True):
        if (unit.checkpoint, unit.part) != (result.checkpoint, result.part):
            raise CkinspectError(f"scan results out of order at {unit.path} part {unit.part}")
        by_checkpoint.setdefault(unit.checkpoint, []).append(result)
    for index, parts in by_checkpoint.items():
        ckpt = checkpoints[index]
        flagged: dict[str, TensorStats] = {}
        for result in sorted(parts, key=lambda r: r.part):
            ckpt.findings.extend(result.findings)
            for name, stats in result.flagged.items():
                flagged[name] = merged_stats(flagged[name], stats) if name in flagged else stats
        ckpt.findings.extend(value_findings(ckpt, flagged))


def scanner(jobs: int | None) -> Callable[[list[Checkpoint]], None] | None:
    """What a run's Reader scans a checkpoint's parts with (`scan_many`): this pool, or None for `--jobs 1`
    (one after another in this process, as inspect does)."""
    if jobs == 1:
        return None
    return functools.partial(scan_checkpoints, jobs=jobs)


def scan_checkpoints(
    checkpoints: Sequence[Checkpoint], jobs: int | None = None, progress: Progress | None = None
) -> None:
    """The value scan of every checkpoint (listed, analyzed and checked already), findings appended."""
    units = plan_units(checkpoints)
    merge_scans(checkpoints, units, scan_units(units, jobs, progress))
