"""What every integration shares: judge each save off the training thread, report on the training thread.

    verifier = Verifier(fail_on="error")
    verifier.submit(path)        # right after the framework wrote the save; returns at once
    verifier.check()             # at the framework's next hook: logs finished verdicts, raises under fail_on
    verifier.wait()              # before the next save and at the end: every verdict in, then check()

One worker thread judges one save at a time (ckinspect.judge_checkpoint: only that save's files), so a
save is never judged while the next one is written over it, and the exception is raised where the
framework handles exceptions: on the training thread. No framework is imported here.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import Future, ThreadPoolExecutor

from ckinspect.api import Candidate, CheckpointRejected, judge_checkpoint, rejection
from ckinspect.vocab import CkinspectError

LOG = logging.getLogger("ckinspect")
FAIL_ON = ("error", "warning", None)


def check_fail_on(fail_on: str | None) -> str | None:
    if fail_on not in FAIL_ON:
        raise CkinspectError(f"fail_on={fail_on!r}: expected 'error', 'warning' or None")
    return fail_on


def verdict_line(candidate: Candidate) -> str:
    """One line per judged save, for the training log."""
    where = f"{candidate.path} (step {candidate.step})" if candidate.step is not None else str(candidate.path)
    if candidate.good:
        return f"ckinspect: {where}: good"
    return f"ckinspect: {where}: {candidate.verdict}: {'; '.join(candidate.reasons)}"


class Verifier:
    """Judges saves on a worker thread (`background`, the default) or at once, and reports verdicts in order.

    `verify`: the full value scan and CRCs (NaN/Inf weights are found); False: structure only (missing
    parts, truncated files, unsafe pickles). `verdicts` keeps every judged save's Candidate, oldest first.
    """

    def __init__(self, fail_on: str | None = "error", verify: bool = True, background: bool = True) -> None:
        self.fail_on = check_fail_on(fail_on)
        self.verify = verify
        self.background = background
        self.verdicts: list[Candidate] = []
        self._pending: list[tuple[str, Future[Candidate]]] = []
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, path: str | os.PathLike[str]) -> None:
        """Judge this save (a folder or a file the framework has just finished writing)."""
        name = os.fspath(path)
        if not self.background:
            self._pending.append((name, _done(self._judge, name)))
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="ckinspect-verify")
        self._pending.append((name, self._pool.submit(self._judge, name)))

    def check(self) -> None:
        """Report the verdicts that are in (in order of the saves); raise the first rejection under fail_on."""
        while self._pending and self._pending[0][1].done():
            self._report(*self._pending.pop(0))

    def wait(self) -> None:
        """Every verdict in, then `check()`."""
        while self._pending:
            name, future = self._pending.pop(0)
            future.exception()  # waits; what it raised is reported below
            self._report(name, future)

    def close(self) -> None:
        """Stop the worker (after the pending verdicts, which are dropped unreported)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        self._pending.clear()

    def _judge(self, name: str) -> Candidate:
        return judge_checkpoint(name, quick=not self.verify)

    def _report(self, name: str, future: Future[Candidate]) -> None:
        error = future.exception()
        if error is not None:
            LOG.error("ckinspect: %s: could not be judged: %s", name, error)
            if self.fail_on is not None:
                if isinstance(error, CkinspectError):
                    raise error
                raise CkinspectError(f"{name}: could not be judged: {error}") from error
            return
        candidate = future.result()
        self.verdicts.append(candidate)
        refused: CheckpointRejected | None = rejection(candidate, self.fail_on)
        if candidate.good and refused is None:
            LOG.info(verdict_line(candidate))
            return
        LOG.log(logging.ERROR if refused is not None else logging.WARNING, verdict_line(candidate))
        if refused is not None:
            raise refused


def _done(fn, name: str) -> Future[Candidate]:
    """A finished future holding fn(name) or what it raised: the foreground path of `submit`."""
    future: Future[Candidate] = Future()
    try:
        future.set_result(fn(name))
    except Exception as exc:  # noqa: BLE001 - reported by _report, as the worker's would be
        future.set_exception(exc)
    return future
