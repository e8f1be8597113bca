"""`ckinspect --report PATH...`: a headless report of every checkpoint the paths hold.

Exit 0 when no finding reaches --fail-on, 1 when one does, 2 for usage errors (a missing path, an
unwritable --output: one line, raised as CkinspectError and printed by the CLI).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ckinspect.analysis.inspect import inspect_path
from ckinspect.commands.emit import emit, render_ci, text_layout
from ckinspect.formats.discover import find_checkpoints
from ckinspect.formats.tree import no_gc
from ckinspect.io import folders
from ckinspect.lifetime import keep_to_the_end
from ckinspect.model import Checkpoint, fails
from ckinspect.vocab import EXIT_ERROR, EXIT_OK, NAMED_SUFFIXES, CkinspectError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def run(args: argparse.Namespace) -> int:
    from ckinspect.jobs.ranks import torchrun_world

    world = torchrun_world()
    if world is not None:
        return _run_ranks(args, *world)
    found = _find(args)
    if found is None:
        return EXIT_OK
    targets, orphans = found
    checkpoints = _list(targets, structure_only=args.quick)
    keep_to_the_end(checkpoints)  # the console script then never frees them one by one (lifetime)
    if not args.quick:
        from ckinspect.jobs.parallel import merge_scans, plan_units, scan_units

        units = plan_units(checkpoints)
        with _progress(args, checkpoints) as progress:
            merge_scans(checkpoints, units, scan_units(units, _jobs(args), progress))
    return _finish(checkpoints, orphans, args)


def _find(args: argparse.Namespace) -> tuple[list[Any], list[Checkpoint]] | None:
    """The targets and the saves that died before their file was written; None: nothing to do (exit 0)."""
    targets = find_checkpoints(args.paths)
    if getattr(args, "checkpoints_only", False):
        targets = [t for t in targets if _may_be_checkpoint(t)]
    orphans = _orphans(args.paths, targets)
    if not targets and not orphans:
        if getattr(args, "checkpoints_only", False):
            return None  # a commit of source files and pictures: nothing for us to say
        raise CkinspectError(f"no checkpoint found in {', '.join(map(str, args.paths))}")
    return targets, orphans


def _may_be_checkpoint(target: Any) -> bool:
    """--checkpoints-only keeps folders, sets and URLs (read to know), and local files that look like one."""
    return target.kind != "file" or not folders.on_disk(target.path) or is_checkpoint(target.path)


def _orphans(paths: list[str], targets: list[Any]) -> list[Checkpoint]:
    local = [p for p in paths if folders.on_disk(p)]  # an object store has no interrupted-save leftovers to find
    return unfinished_saves(local, known={Path(t.path) for t in targets}) if local else []


def _list(targets: list[Any], structure_only: bool = False) -> list[Checkpoint]:
    """Each target read, its layout recognised and checked: everything but the value scan (inspect_path).
    `structure_only` (--quick): no values follow, so DCP folders are listed from their .metadata. The collector is
    paused throughout, as each reader pauses it: the checks after a reader (a training checkpoint's parameter and
    optimizer-state tables) otherwise set off one full pass over every object the listing made, which finds
    nothing to free (0.30 of 2.28 CPU-s on a 160,000-tensor resume file, 1.06 of 11.6 at 640,000)."""
    with no_gc():
        return [inspect_path(target, quick=True, structure_only=structure_only) for target in targets]


def _finish(checkpoints: list[Checkpoint], orphans: list[Checkpoint], args: argparse.Namespace) -> int:
    for orphan in orphans:
        checkpoints.insert(_place(checkpoints, orphan.path), orphan)
    runs = run_views(args.paths, checkpoints, quick=args.quick, jobs=_jobs(args))
    emit(render(checkpoints, args, runs), args.output)
    findings = [f for ckpt in checkpoints for f in ckpt.findings]
    findings += [f for run in runs for f in run.findings]
    findings += [f for run in runs for ckpt in run.checkpoints for f in ckpt.findings]  # from the parts' records
    return 1 if fails(findings, args.fail_on) else 0


def _jobs(args: argparse.Namespace) -> int | None:
    jobs = getattr(args, "jobs", None)
    if jobs is None:  # the default: nothing to check, and the pool's module not imported for it
        return None
    from ckinspect.jobs.parallel import checked_jobs

    return checked_jobs(jobs)


def _progress(args: argparse.Namespace, checkpoints: list[Checkpoint]) -> Any:
    from ckinspect.analysis.scan import terminal_progress

    names = [Path(c.path).name for c in checkpoints if c.tensors]
    label = f"scanning {names[0]}" if len(names) == 1 else f"scanning {len(names)} checkpoints"
    return terminal_progress(label, enabled=not getattr(args, "no_progress", False))


def _run_ranks(args: argparse.Namespace, rank: int, world: int) -> int:
    """The report under torchrun (jobs.ranks): every rank lists and scans its share, rank 0 writes.
    Every rank reaches the same exchanges in the same order whatever fails, so none waits for ever."""
    from ckinspect.jobs.parallel import merge_scans
    from ckinspect.jobs.ranks import Ranks, share

    with Ranks(rank, world) as ranks:
        status = EXIT_ERROR
        try:
            found, checkpoints, units, jobs, plan = _rank_plan(args)
            ranks.agree(plan)
            gathered = ranks.gather(_rank_scan(share(units, rank, world), jobs))
            if gathered is not None:  # rank 0 writes the report
                by_part = {(r.checkpoint, r.part): r for r in gathered}
                merge_scans(checkpoints, units, [by_part[(u.checkpoint, u.part)] for u in units])
                status = EXIT_OK if found is None else _finish(checkpoints, found[1], args)
        except CkinspectError as exc:
            if rank == 0 or ranks.broken:  # rank 0 speaks for the job; a rank that lost it speaks for itself
                print(f"ckinspect: {exc}", file=sys.stderr)
            status = EXIT_ERROR
        except Exception as exc:  # a bug of ours: one line, and the other ranks are still told
            print(f"ckinspect: internal error on rank {rank}: {type(exc).__name__}: {exc}", file=sys.stderr)
            status = EXIT_ERROR
        return ranks.settle(status)


def _rank_plan(args: argparse.Namespace) -> tuple[Any, list[Checkpoint], list[Any], int | None, Any]:
    """What every rank lists (the same on each): (found, checkpoints, units, jobs, the plan the ranks agree
    on, or the error that stops them all)."""
    from ckinspect.jobs.parallel import plan_units

    found, checkpoints, units = None, [], []
    jobs: int | None = 1
    try:
        jobs = _jobs(args)
        found = _find(args)
        checkpoints = _list(found[0]) if found else []
        units = plan_units(checkpoints) if not args.quick else []
    except CkinspectError as exc:
        return found, checkpoints, units, jobs, str(exc)
    return found, checkpoints, units, jobs, ([str(c.path) for c in checkpoints], [u.key() for u in units])


def _rank_scan(units: list[Any], jobs: int | None) -> list[Any] | str:
    """This rank's share scanned, or what went wrong as one line (sent to rank 0, which says it)."""
    from ckinspect.jobs.parallel import scan_units

    try:
        return scan_units(units, jobs)
    except (CkinspectError, OSError) as exc:  # a file gone or unreadable on this rank's node
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - a bug of ours: sent to rank 0, which says it in one line
        return f"internal error: {type(exc).__name__}: {exc}"


def run_views(paths: list[str], checkpoints: list[Checkpoint], quick: bool, jobs: int | None = 1) -> list[Any]:
    """The run view of each folder that holds a run: several checkpoints, or one made of several files.
    The parts already read for the report are not read again."""
    named = [raw for raw in paths if folders.names_folder(raw)]
    if not named:
        return []  # files or objects only: no run (and the run modules not imported for none)
    from ckinspect.analysis.runs import Reader, collect, is_run, judge_run
    from ckinspect.io.remote import as_path
    from ckinspect.jobs.parallel import scanner

    runs = []
    reader = Reader(verify=not quick, scan_many=scanner(jobs))
    reader.cache.update({as_path(ckpt.path): ckpt for ckpt in checkpoints})
    for raw in named:
        run = collect(folders.target(raw, listed=True))  # a prefix find_checkpoints listed: not listed again
        if is_run(run):
            judge_run(run, reader, values=not quick)
            runs.append(run)
    return runs


def is_checkpoint(path: Path) -> bool:
    """A file to judge: a checkpoint's suffix (then whatever it holds is judged: a damaged `.pt` is CORRUPT), or
    content that sniffs as a checkpoint under any name (a pickle named `notes.txt` is still scanned). Anything
    else (a picture, a wheel, source) is not ours to judge."""
    from ckinspect.formats.sniff import sniff

    return path.suffix.lower() in NAMED_SUFFIXES or sniff(path) != "unknown"


def unfinished_saves(paths: list[str], known: set[Path]) -> list[Checkpoint]:
    """An entry for each checkpoint a save died before writing (ckinspect.analysis.leftovers.unfinished_saves):
    the missing path, format "unknown", no tensors, and one LEFTOVER_TMP per tmp saying what
    `ckinspect repair` would do with it."""
    from ckinspect.analysis.leftovers import unfinished_saves as find_unfinished

    unfinished = find_unfinished(paths, known)
    if not unfinished:
        return []
    from ckinspect.ops.repair import plan_repairs  # deferred: ~6 ms (datetime, signal) a clean folder never needs

    entries = []
    for entry_path, leftovers in unfinished.items():
        entry = Checkpoint(path=entry_path, format="unknown", file_bytes=0)
        for action in plan_repairs(leftovers[0].main).actions:
            explained = action.status.explain() if action.status else action.leftover.tmp.name
            entry.add("LEFTOVER_TMP", f"{explained}: {_repair_would(action)}")
            if action.status is not None and action.status.tmp_danger:
                entry.add("UNSAFE_PICKLE", f"leftover {action.leftover.tmp.name}: {action.status.tmp_danger}")
        entries.append(entry)
    return entries


def _place(checkpoints: list[Checkpoint], path: Path) -> int:
    """Where a missing checkpoint goes in the list: among the others of its folder, in name order."""
    same = [i for i, ckpt in enumerate(checkpoints) if Path(ckpt.path).parent == path.parent]
    later = [i for i in same if Path(checkpoints[i].path).name > path.name]
    return later[0] if later else same[-1] + 1 if same else len(checkpoints)


def _repair_would(action: Any) -> str:
    if action.action.startswith("promote"):
        main = action.leftover.main.name
        return f"the save died before its rename; `ckinspect repair --apply` would promote it to {main}"
    if action.action == "set-aside":
        return f"`ckinspect repair --apply` would move it to quarantine ({action.reason})"
    status = action.status
    if status is not None and not status.tmp_complete and not status.main_exists:
        tmp = action.leftover.tmp.name
        return f"nothing whole to promote; `ckinspect salvage {tmp} OUT` keeps the tensors it holds in full"
    return f"`ckinspect repair` would leave it alone: {action.reason}"


def render(checkpoints: list[Checkpoint], args: argparse.Namespace, runs: list[Any] | None = None) -> str:
    from ckinspect.report import json_report, subjects

    fmt = args.format
    if fmt in ("sarif", "junit"):
        found = subjects.merge(subjects.from_checkpoints(checkpoints), subjects.from_runs(runs or []))
        return render_ci(fmt, found, args, "ckinspect report")
    report = json_report.build(checkpoints)
    keep_to_the_end(report)
    if runs:
        report["runs"] = [run.to_json() for run in runs]
    if fmt == "json":
        return json_report.render(report)
    if fmt == "markdown":
        from ckinspect.report import markdown

        return markdown.render(report)
    from ckinspect.report import text

    return text.render(report, *text_layout(args), verbose=bool(getattr(args, "verbose", False)))
