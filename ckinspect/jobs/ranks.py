"""`torchrun --nnodes N --nproc_per_node M -m ckinspect --report PATH...`: each rank scans its share of the
parts and rank 0 writes the one report, the same report one process writes.

Every rank lists the checkpoints itself (listing reads headers and pickles only), so no descriptor has to
travel; the ranks then check that they all see the same parts (a path missing on one node, or a node
that sees another copy, is an error, not a silent half report), split the units by size (largest first,
each to the rank with the least so far), scan their share, and gather the small `PartScan` records on
rank 0, which merges them in unit order exactly as `--jobs 1` does. Only rank 0 prints or writes; every
rank exits with rank 0's exit status, so the job's status (and torchrun's) is the report's.

torch is imported only here, and only when torchrun's environment is present (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT, with a world of 2 or more). A script that calls ckinspect from
inside a torchrun worker of its own (and so inherits that environment) sets CKINSPECT_DISTRIBUTED=0.
Collectives time out after CKINSPECT_RANK_TIMEOUT seconds (default 1800: a rank waits for the slowest
rank's share); a rank that fails or stops answering ends every rank with one line and exit 2, never a hang.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

from ckinspect import settings
from ckinspect.vocab import EXIT_ERROR, CkinspectError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ckinspect.jobs.parallel import PartScan, ScanUnit

TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def torchrun_world() -> tuple[int, int] | None:
    """(rank, world size) when torchrun started this process in a job of 2+ ranks, else None."""
    if settings.distributed_off() or not all(os.environ.get(k) for k in TORCHRUN_ENV):
        return None
    try:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except ValueError:
        return None
    return (rank, world) if world > 1 and 0 <= rank < world else None


def rank_timeout() -> float:
    return settings.rank_timeout()


def share(units: Sequence[ScanUnit], rank: int, world: int) -> list[ScanUnit]:
    """This rank's units: largest first, each to the rank with the fewest bytes so far (ties: lowest rank)."""
    load = [0] * world
    mine: list[ScanUnit] = []
    for unit in sorted(units, key=lambda u: (-u.nbytes, u.checkpoint, u.part)):
        least = min(range(world), key=lambda r: (load[r], r))
        load[least] += unit.nbytes
        if least == rank:
            mine.append(unit)
    return mine


def disagreement(plans: Sequence[Any]) -> str | None:
    """Why the ranks cannot go on: one failed before scanning (its error), or they see different parts."""
    for rank, plan in enumerate(plans):
        if isinstance(plan, str):
            return f"rank {rank}: {plan}"
    for rank, plan in enumerate(plans[1:], start=1):
        if plan != plans[0]:
            return (
                f"rank {rank} sees other checkpoints or parts than rank 0 "
                "(every node must see the same files: a shared filesystem, the same paths)"
            )
    return None


class Ranks:
    """The gloo process group of a torchrun job, for one report. Use as a context manager."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world
        self.broken = False  # a collective failed: the group cannot be used again
        self._dist: Any = None

    def __enter__(self) -> Ranks:
        from datetime import timedelta

        import torch.distributed as dist

        try:
            dist.init_process_group("gloo", timeout=timedelta(seconds=rank_timeout()))
        except (RuntimeError, ValueError, OSError) as exc:
            raise CkinspectError(f"torchrun: cannot join the process group: {_one_line(exc)}") from None
        self._dist = dist
        return self

    def __exit__(self, *exc: object) -> None:
        if self._dist is not None and self._dist.is_initialized():
            with contextlib.suppress(RuntimeError):
                self._dist.destroy_process_group()

    def agree(self, plan: list[tuple[str, int, str, int]] | str) -> None:
        """Every rank's plan (its units' keys, or the error it stopped at); CkinspectError on every rank
        when one failed or they differ."""
        plans: list[Any] = [None] * self.world
        self._collective(self._dist.all_gather_object, plans, plan)
        problem = disagreement(plans)
        if problem:
            raise CkinspectError(problem)

    def gather(self, results: list[PartScan] | str) -> list[PartScan] | None:
        """Every rank's results on rank 0 (rank by rank; the caller puts them in unit order), None elsewhere.
        A rank that failed sends its error instead, and rank 0 raises it."""
        gathered: list[Any] | None = [None] * self.world if self.rank == 0 else None
        self._collective(self._dist.gather_object, results, gathered, dst=0)
        if gathered is None:
            return None
        for rank, part in enumerate(gathered):
            if isinstance(part, str):
                raise CkinspectError(f"rank {rank} failed while scanning: {part}")
        return [result for part in gathered for result in part]

    def settle(self, status: int) -> int:
        """Rank 0's exit status, on every rank (EXIT_ERROR when the group is broken)."""
        if self.broken:
            return EXIT_ERROR
        box = [status]
        try:
            self._collective(self._dist.broadcast_object_list, box, src=0)
        except CkinspectError:
            return EXIT_ERROR
        return int(box[0])

    def _collective(self, op: Any, *args: Any, **kwargs: Any) -> None:
        if self.broken:
            raise CkinspectError("torchrun: an earlier exchange between the ranks failed")
        try:
            op(*args, **kwargs)
        except (RuntimeError, OSError, ValueError) as exc:  # gloo: a peer gone, or its timeout passed
            self.broken = True
            raise CkinspectError(f"torchrun: rank {self.rank} lost the other ranks: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] + ("..." if len(text) > 300 else "")
