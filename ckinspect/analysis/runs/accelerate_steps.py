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

Memo = dict[Path, "SaveSteps | None"]  # each save's steps, read once per run judged
Other = tuple[RunCheckpoint, SaveSteps]


def save_steps(ckpt: RunCheckpoint, reader: Reader, memo: Memo) -> SaveSteps | None:
    """s, e, n and total_steps of an Accelerate save with one optimizer and one scheduler (their listings
    read through the reader, cached); None where a part is missing, unreadable or records no step."""
    if ckpt.path not in memo:
        memo[ckpt.path] = _read_steps(ckpt, reader)
    return memo[ckpt.path]


def _read_steps(ckpt: RunCheckpoint, reader: Reader) -> SaveSteps | None:
    optimizer, scheduler = _listing(ckpt, "optimizer", reader), _listing(ckpt, "scheduler", reader)
    if optimizer is None or scheduler is None:
        return None
    step, epoch, total = optimizer_step(*optimizer), scheduler[1].get("last_epoch"), scheduler[1].get("total_steps")
    if step is None or not _count(epoch):
        return None
    return SaveSteps(step, epoch, ckpt.counts.get("rng", 0), total if _count(total) else None)


def _listing(ckpt: RunCheckpoint, role: str, reader: Reader) -> tuple[Checkpoint, Mapping[str, Any]] | None:
    """The one part of this role, listed, and its top-level mapping; None with several, none, or a corrupt one."""
    parts = [p for p in ckpt.parts if p.role == role]
    if len(parts) != 1:
        return None
    opened = parts[0].checkpoint or reader.inspect(parts[0].path)
    top = top_mapping(opened)
    return None if top is None or any(f.code == "CORRUPT" for f in opened.findings) else (opened, top)


def steps_disagree(ckpt: RunCheckpoint, saves: list[RunCheckpoint], reader: Reader, memo: Memo) -> Finding | None:
    """PARTS_DISAGREE when this save's scheduler and optimizer steps fit no relation the rest of its run
    keeps, and one of them is another save's (see the module's docstring)."""
    mine = save_steps(ckpt, reader, memo)
    if mine is None or _kept([mine]):
        return None
    others = _other_saves(ckpt, saves, reader, memo)
    kept = _kept([s for _, s in others])
    source = next((c for c, s in others if s.scheduler == mine.scheduler or s.optimizer == mine.optimizer), None)
    if len(others) < 2 or not kept or source is None:
        return None
    return Finding("PARTS_DISAGREE", _message(mine, kept[0], len(others), source, memo))


def _kept(saves: list[SaveSteps]) -> list[str]:
    """The relations every one of these saves satisfies."""
    return [said for said, expected in RELATIONS if all(s.scheduler == expected(s) for s in saves)]


def _other_saves(ckpt: RunCheckpoint, saves: list[RunCheckpoint], reader: Reader, memo: Memo) -> list[Other]:
    """The run's other Accelerate saves in the same folder, with their steps, where they record them."""
    peers = [c for c in saves if c is not ckpt and c.framework == ckpt.framework and c.path.parent == ckpt.path.parent]
    return [(c, s) for c in peers if (s := save_steps(c, reader, memo)) is not None]


def _message(mine: SaveSteps, said: str, count: int, source: RunCheckpoint, memo: Memo) -> str:
    theirs = memo[source.path]
    assert theirs is not None
    part = "scheduler.bin" if mine.scheduler == theirs.scheduler else "optimizer.bin"
    return (f"scheduler.bin records last_epoch {mine.scheduler} but optimizer.bin's per-parameter step is "
            f"{_plain(mine.optimizer)} ({mine.processes} processes); in the run's {count} other saves {said}, and "
            f"{source.path.name} records last_epoch {theirs.scheduler} at step {_plain(theirs.optimizer)}: "
            f"{part} comes from another save")  # fmt: skip


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _plain(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
