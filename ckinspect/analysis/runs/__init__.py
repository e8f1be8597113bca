"""Runs: a folder of checkpoints, each of one or more files, and the newest one a run can resume from.

    run = last_good("runs/")                  # the one entry point: run.last_good, every checkpoint's verdict
    run = last_good("runs/", quick=True)      # structure only (no value read): each values_checked False
    run = collect(Path("runs/"))              # group files into checkpoints (listing, and small JSON records)
    best = judge_run(run, Reader())           # read their records and parts (all, or newest first until one is good)

One recogniser per framework says which files a checkpoint is made of and which its records promise
(deepspeed, hf (HF Trainer and Accelerate), megatron; DCP folders, sharded sets and single files go
through the readers, which check their own index). A checkpoint is good when it is whole (every part its
records promise is there), intact (each part reads whole; `verify` adds the CRC and value scan), safe
(no part the framework loads names code-running globals), resumable (optimizer, step and RNG state), and
its values finite (read for the candidate the answer is about to name; `quick` skips it).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ckinspect.analysis.leftovers import main_for_tmp
from ckinspect.analysis.runs import deepspeed, hf, megatron
from ckinspect.analysis.runs.context import Peers, RunContext
from ckinspect.analysis.runs.judge import Reader, judge
from ckinspect.analysis.runs.model import GOOD, Run, RunCheckpoint, step_in_name, written_after_commit
from ckinspect.formats.discover import _is_checkpoint_file, _is_checkpoint_index, _shard_names, is_temporary
from ckinspect.io import folders
from ckinspect.model import Finding
from ckinspect.vocab import DCP_METADATA, QUARANTINE_DIR, TMP_SUFFIX, CkinspectError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ckinspect.analysis.runs.judge import ScanMany

__all__ = [
    "GOOD",
    "Reader",
    "Run",
    "RunCheckpoint",
    "check_values",
    "collect",
    "is_run",
    "judge",
    "judge_run",
    "last_good",
]

SKIP_DIRS = frozenset({QUARANTINE_DIR, ".git", "__pycache__"})
MAX_DEPTH = 6  # run/experiment/checkpoint-N/global_stepN/... is four


def last_good(
    run_dir: str | os.PathLike[str],
    verify: bool = False,
    everything: bool = False,
    quick: bool = False,
    scan_many: ScanMany | None = None,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> Run:
    """The run with its checkpoints judged, newest first until one is good (all with `everything`): the one
    entry point for last-good, the run views (TUI, `--report`) and the Python API. `run.last_good` is the
    answer, each checkpoint carries its verdict and reasons.

    "Good" has one definition: whole, intact, safe, resumable, and the values of the checkpoint about to
    be named finite (its CRCs and value scan read; only that candidate's, so the answer costs one
    checkpoint's bytes; a candidate with NaN/Inf is damaged and the next older one is tried). `quick`:
    structure only, no value read (each checkpoint's `values_checked` stays False). `verify`: every
    checkpoint judged gets the full scan, not only the candidate. `scan_many`: how the value scan of
    each checkpoint's parts runs side by side (jobs.parallel.scanner(jobs), a process pool; None: one by one
    here). A URL is a prefix in an object store (io.folders lists it
    once; parts are read by range requests). `progress(checkpoints judged, checkpoints)`: see judge_run."""
    path = folders.open_folder(run_dir)  # a URL: listed here (a missing or denied prefix: one line)
    if not folders.is_dir(path):  # a URL prefix is one once listed
        raise CkinspectError(f"{path}: not a folder" if path.exists() else f"{path}: no such file or folder")
    reader = Reader(verify=verify and not quick, scan_many=scan_many, structure_only=quick)
    run = collect(path)
    judge_run(run, reader, everything=everything, values=not quick, progress=progress)
    return run


MULTI_PART = ("deepspeed", "hf-trainer", "accelerate", "megatron")


def is_run(run: Run) -> bool:
    """Worth a run view: checkpoints made of several files (DeepSpeed, HF, Accelerate, Megatron, DCP), or a
    pointer (`latest`, the tracker) that says something."""
    # a folder of plain files keeps its file listing; checkpoints made of several files make it a run
    return any(c.framework in (*MULTI_PART, "dcp") for c in run.checkpoints) or bool(run.findings)


def collect(run_dir: Path, peers: bool = True) -> Run:
    """The run's checkpoints, grouped from the folder's listing, each with what its records promise;
    `peers`: each held against the other checkpoints of its framework and folder (MISSING_PARTS where it
    has fewer files of a kind; watch asks its own RunContext instead, see analysis.runs.context)."""
    run = Run(run_dir, [])
    try:
        _walk(run_dir, run, depth=0, visited=set())
    except OSError as exc:
        raise CkinspectError(f"{run_dir}: cannot list folder ({exc.strerror or exc})") from None
    if peers:
        _compare_with_peers(run)
    for ckpt in run.checkpoints:
        ckpt.measure()
    run.checkpoints.sort(key=order)
    return run


Progress = Callable[[int, int], None]  # (checkpoints judged or passed over, checkpoints)


def order(ckpt: RunCheckpoint) -> tuple[int, float, str]:
    """Oldest first: by the step its records give, then by time."""
    return (ckpt.step if ckpt.step is not None else -1, ckpt.time, str(ckpt.path))


def judge_run(
    run: Run,
    reader: Reader,
    everything: bool = True,
    values: bool = True,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> RunCheckpoint | None:
    """Judge the checkpoints; without `everything`, newest first until the newest good one is certain.
    With `values` (the default), a checkpoint is good only once its values were read and are finite:
    every one the reader verifies, else only each candidate for the answer (check_values).
    `progress(done, total)` on this thread, as each checkpoint is judged or passed over (newest first).

    A checkpoint whose step is not known before reading it is always read: it may be the newest.
    """
    newest_first = sorted(run.checkpoints, key=order, reverse=True)
    if everything:
        _judge_every_one(newest_first, reader, values, progress)
    else:
        _judge_until_the_answer(newest_first, reader, values, progress)
    progress(len(newest_first), len(newest_first))
    run.checkpoints.sort(key=order)
    return run.last_good


def _judge_until_the_answer(
    newest_first: list[RunCheckpoint], reader: Reader, values: bool, progress: Progress
) -> None:
    best: RunCheckpoint | None = None
    context = RunContext()
    for done, ckpt in enumerate(newest_first):
        progress(done, len(newest_first))
        if _before(ckpt, best):
            continue  # its records put it before a good one: it cannot be the answer
        _judge_in_run(ckpt, reader, newest_first, context)
        if _candidate(ckpt, best) and (not values or check_values(ckpt, reader).good):
            best = ckpt


def _judge_every_one(newest_first: list[RunCheckpoint], reader: Reader, values: bool, progress: Progress) -> None:
    context = RunContext()
    for done, ckpt in enumerate(newest_first):
        progress(done, len(newest_first))
        _judge_in_run(ckpt, reader, newest_first, context)
    if not values:
        return
    for ckpt in newest_first:  # every one judged by its structure: the answer is the newest whose values pass
        if ckpt.good and check_values(ckpt, reader).good:
            break


def _judge_in_run(ckpt: RunCheckpoint, reader: Reader, saves: list[RunCheckpoint], context: RunContext) -> None:
    """Judge it; then what the run's other saves tell of it (analysis.runs.context: an Accelerate save's steps
    against its peers', PARTS_DISAGREE; its model against the newest's, MIXED_RUN): judged again with those."""
    listed = order(ckpt)  # its place as listed, before its records are read (the one watch keeps too)
    judge(ckpt, reader)
    if ckpt.framework == "accelerate":  # its peers' steps, each read once (their listings cached for their judging)
        for peer in saves:
            if peer is not ckpt and peer.framework == ckpt.framework and peer.path.parent == ckpt.path.parent:
                context.put_steps(peer, order(peer), reader)
    context.put(ckpt, listed, reader)
    found = [f for f in context.findings(ckpt.path, peers=False) if f not in ckpt.findings]
    if found:
        ckpt.findings.extend(found)
        judge(ckpt, reader)  # its parts are cached: the verdict again, with them


def _candidate(ckpt: RunCheckpoint, best: RunCheckpoint | None) -> bool:
    """Good by its structure, and newer than the answer so far."""
    return ckpt.good and (best is None or order(ckpt) > order(best))


def check_values(ckpt: RunCheckpoint, reader: Reader) -> RunCheckpoint:
    """Judge a structurally good candidate again with its CRCs and values read (once): NaN/Inf in what the
    framework loads makes it damaged, as `--verify` and watch would call it."""
    if not ckpt.values_checked:
        judge(ckpt, reader.with_values())  # its parts as the structural pass listed them: not read again
    return ckpt


def _before(ckpt: RunCheckpoint, best: RunCheckpoint | None) -> bool:
    return best is not None and ckpt.step is not None and best.step is not None and ckpt.step < best.step


# ------------------------------------------------------------------------------------------------ walking


def _walk(folder: Path, run: Run, depth: int, visited: set[Path]) -> None:
    real = folders.real(folder)
    if real in visited or depth > MAX_DEPTH:
        return
    visited.add(real)
    names, dirs = _listing(folder)
    found = _folder_checkpoint(folder, names, dirs)
    if found is not None:
        _interrupted_saves(found, folder)
        run.checkpoints.append(found)
        return
    run.findings.extend(_pointer_findings(folder, names, dirs))
    _file_checkpoints(folder, names, run)
    for name in sorted(dirs):
        try:
            _walk(folder / name, run, depth + 1, visited)
        except OSError:
            continue  # an unreadable subfolder does not stop the search of the rest


def _listing(folder: Path) -> tuple[set[str], set[str]]:
    """(file names, subfolders worth walking) of a folder."""
    entries = folders.entries(folder)
    names = {e.name for e in entries if not e.is_dir}
    return names, {e.name for e in entries if e.is_dir and e.name not in SKIP_DIRS and not e.name.startswith(".")}


def _pointer_findings(folder: Path, names: set[str], dirs: set[str]) -> list[Finding]:
    """What the pointers beside the checkpoints (DeepSpeed's `latest`, Megatron's tracker) name that is not there."""
    problems = [_latest_problem(folder, names, dirs)]
    if megatron.TRACKER in names:
        problems.append(megatron.tracker_problem(folder, {d for d in dirs if megatron.ITER_FOLDER.match(d)}))
    return [Finding("MISSING_PARTS", problem) for problem in problems if problem]


def _latest_problem(folder: Path, names: set[str], dirs: set[str]) -> str | None:
    tags = {d for d in dirs if deepspeed.is_tag_folder(_files(folder / d))}
    if not tags and deepspeed.LATEST not in names:
        return None
    tag, problem = deepspeed.latest_findings(folder, tags)
    return problem if tags or tag is not None else None


def _file_checkpoints(folder: Path, names: set[str], run: Run) -> None:
    """The checkpoints this folder's files are: sharded sets by their index, single files, unfinished saves."""
    shards: set[str] = set()
    for name in names:
        if _is_checkpoint_index(name):
            shards |= _shard_names(folder / name)
    for name in sorted(n for n in names if not n.startswith(".")):
        path = folder / name
        if _is_checkpoint_index(name):
            ckpt = RunCheckpoint(path, "sharded", step_in_name(folder.name))
            ckpt.part(path, "model")
            run.checkpoints.append(ckpt)
        elif is_temporary(path):
            _unfinished_file(path, run)
        elif name not in shards and _is_checkpoint_file(path):
            ckpt = RunCheckpoint(path, "file")
            ckpt.part(path, "checkpoint")
            run.checkpoints.append(ckpt)


def _folder_checkpoint(folder: Path, names: set[str], dirs: set[str]) -> RunCheckpoint | None:
    """The checkpoint this folder is, if it is one (a DeepSpeed tag, an HF or Accelerate folder, ...)."""
    if deepspeed.is_tag_folder(names):
        return deepspeed.tag_checkpoint(folder)
    if hf.is_hf_folder(folder, names):
        return hf.hf_checkpoint(folder, names, dirs)
    if megatron.is_iter_folder(folder, dirs):
        return megatron.iter_checkpoint(folder, dirs)
    if hf.is_accelerate_folder(names):
        return hf.accelerate_checkpoint(folder, names)
    if DCP_METADATA in names or DCP_METADATA + TMP_SUFFIX in names or any(n.endswith(".distcp") for n in names):
        return _dcp_checkpoint(folder, names)
    return None


def _dcp_checkpoint(folder: Path, names: set[str]) -> RunCheckpoint:
    ckpt = RunCheckpoint(folder, "dcp", step_in_name(folder.name))
    ckpt.part(folder, "checkpoint")
    if DCP_METADATA in names:
        written_after_commit(ckpt, folder / DCP_METADATA, [folder / n for n in names if n.endswith(".distcp")])
    else:
        ckpt.add("MISSING_PARTS", f"{DCP_METADATA} is missing: DCP writes it last, after every rank's data; "
                                  "the save never finished")  # fmt: skip
    return ckpt


def _interrupted_saves(ckpt: RunCheckpoint, folder: Path) -> None:
    """A tmp inside a checkpoint's own folder: the save that made this checkpoint was interrupted."""
    for root, files in folders.walk(folder, skip=SKIP_DIRS):
        for name in files:
            if name.endswith(TMP_SUFFIX):
                tmp = (root / name).relative_to(folder)
                ckpt.add("LEFTOVER_TMP", f"{tmp}: a save into this checkpoint was interrupted")


def _unfinished_file(tmp: Path, run: Run) -> None:
    """A tmp whose file was never written: the save of that checkpoint died before its rename."""
    leftover = main_for_tmp(tmp)
    if leftover is None or folders.exists(leftover.main):
        return  # a tmp beside a whole file: that file's own LEFTOVER_TMP says what it is
    ckpt = RunCheckpoint(leftover.main, "file")
    ckpt.add("LEFTOVER_TMP", f"{tmp.name}: the save died before its rename; {leftover.main.name} was never written "
                             "(`ckinspect repair` says whether the tmp is whole)")  # fmt: skip
    run.checkpoints.append(ckpt)


def _compare_with_peers(run: Run) -> None:
    """A rank file that no record names but every other checkpoint of the same run and framework has."""
    groups: dict[tuple[str, Path], list[RunCheckpoint]] = {}
    for ckpt in run.checkpoints:
        if ckpt.counts:
            groups.setdefault((ckpt.framework, ckpt.path.parent), []).append(ckpt)
    for members in groups.values():
        peers = Peers([m.counts for m in members])
        for ckpt in members:
            ckpt.findings.extend(peers.findings(ckpt.counts))


def _files(folder: Path) -> set[str]:
    try:
        return {e.name for e in folders.entries(folder) if not e.is_dir}
    except OSError:
        return set()
