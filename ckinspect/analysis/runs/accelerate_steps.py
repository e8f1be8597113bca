"""Accelerate's optimizer.bin and scheduler.bin held against each other across the saves of one run.

What relates the optimizer's per-parameter step s to the scheduler's last_epoch e is not saved: Accelerate's
AcceleratedScheduler (accelerate/scheduler.py) steps the wrapped scheduler once per optimizer step with
`split_batches`, num_processes times per optimizer step without it (a scheduler with `total_steps`, as
OneCycleLR, stops at that cap), and only when the user's code says with `step_scheduler_with_optimizer=False`
(a per-epoch schedule, say). So one save alone says nothing, and the run decides: the candidate relations
are e == s and e == min(n·s, total_steps), n the save's process count (its `random_states_K.pkl` files).
A save that satisfies neither, where at least two other saves of the run all satisfy the same one, and whose
e or s is another save's (one part is another save's), is PARTS_DISAGREE naming both values.

Not judged on this: a lone save or one with a single other, a run whose other saves follow no one relation
(per-epoch schedules, a resume with another process count), a save with several optimizers or schedulers,
and one whose mismatch matches no other save's part (the cause is not shown to be a copied part).
"""

from __future__ import annotations

from pathlib import Path

from ckinspect.analysis.layouts import optimizer_step, top_mapping
from ckinspect.analysis.runs.judge import Reader
from ckinspect.analysis.runs.model import RunCheckpoint
from ckinspect.model import Checkpoint, Finding
from ckinspect.record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, TypeGuard


class SaveSteps(Record):
    """What one Accelerate save records of its progress."""

    optimizer: float  # s: optimizer.bin's per-parameter step
    scheduler: int  # e: scheduler.bin's last_epoch
    processes: int  # n: its random_states_K.pkl files
    total_steps: int | None  # the scheduler's cap (OneCycleLR), where it has one


# (what the relation says, e as it gives it from a save's other records)
RELATIONS: tuple[tuple[str, Callable[[SaveSteps], float]], ...] = (
    ("the scheduler stepped once per optimizer step", lambda s: s.optimizer),
    ("the scheduler stepped once per process per optimizer step (Accelerate's default)",
     lambda s: min(s.processes * s.optimizer, s.total_steps if s.total_steps is not None else float("inf"))),
)  # fmt: skip

Other = tuple[Path, SaveSteps]  # another save of the run (its path) and its steps


def read_steps(ckpt: RunCheckpoint, reader: Reader | None = None) -> SaveSteps | None:
    """s, e, n and total_steps of an Accelerate save with one optimizer and one scheduler (their listings
    as judged, or read through the reader, which caches them); None where a part is missing, unreadable or
    records no step."""
    optimizer, scheduler = _listing(ckpt, "optimizer", reader), _listing(ckpt, "scheduler", reader)
    if optimizer is None or scheduler is None:
        return None
    step, epoch, total = optimizer_step(*optimizer), scheduler[1].get("last_epoch"), scheduler[1].get("total_steps")
    if step is None or not _count(epoch):
        return None
    return SaveSteps(step, epoch, ckpt.counts.get("rng", 0), total if _count(total) else None)


def _listing(ckpt: RunCheckpoint, role: str, reader: Reader | None) -> tuple[Checkpoint, Mapping[str, Any]] | None:
    """The one part of this role, listed, and its top-level mapping; None with several, none, or a corrupt one."""
    parts = [p for p in ckpt.parts if p.role == role]
    if len(parts) != 1:
        return None
    opened = parts[0].checkpoint
    if opened is None:
        if reader is None:
            return None
        opened = reader.inspect(parts[0].path)
    top = top_mapping(opened)
    return None if top is None or any(f.code == "CORRUPT" for f in opened.findings) else (opened, top)


def keeps_a_relation(steps: SaveSteps) -> bool:
    """This save's steps fit a relation by themselves: no other save can make it disagree."""
    return bool(_kept([steps]))


def steps_disagree(mine: SaveSteps, others: list[Other]) -> Finding | None:
    """PARTS_DISAGREE when this save's scheduler and optimizer steps fit no relation the rest of its run
    keeps (`others`: the run's other saves in its folder, newest first), and one of them is another save's
    (see the module's docstring)."""
    if keeps_a_relation(mine):
        return None
    kept = _kept([s for _, s in others])
    source = next(((p, s) for p, s in others if s.scheduler == mine.scheduler or s.optimizer == mine.optimizer), None)
    if len(others) < 2 or not kept or source is None:
        return None
    return Finding("PARTS_DISAGREE", _message(mine, kept[0], len(others), source))


def _kept(saves: list[SaveSteps]) -> list[str]:
    """The relations every one of these saves satisfies."""
    return [said for said, expected in RELATIONS if all(s.scheduler == expected(s) for s in saves)]


def _message(mine: SaveSteps, said: str, count: int, source: Other) -> str:
    path, theirs = source
    part = "scheduler.bin" if mine.scheduler == theirs.scheduler else "optimizer.bin"
    return (f"scheduler.bin records last_epoch {mine.scheduler} but optimizer.bin's per-parameter step is "
            f"{_plain(mine.optimizer)} ({mine.processes} processes); in the run's {count} other saves {said}, and "
            f"{path.name} records last_epoch {theirs.scheduler} at step {_plain(theirs.optimizer)}: "
            f"{part} comes from another save")  # fmt: skip


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _plain(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
