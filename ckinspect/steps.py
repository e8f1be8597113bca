"""What a long call on this thread is doing now, for whoever waits on it (the TUI's first paint of a file
with 200,000 tensors or a DCP folder of many ranks, which would otherwise show a bare "reading…").

    with steps.watching(lambda what, done, total: ...):    # this thread only, until the block ends
        inspect_path(path)                                   # the readers call steps.step(...) as they go

`what` says what is being read (`zip directory`, `storages`, `entries`), `done` how many so far and
`total` how many there are, when known (else None). Counts inside a loop are reported every EVERY items
and once at its end, so a reader's inner loop pays one modulo per item. Nothing is reported, and nothing
is paid beyond a lookup, when no one watches. Listeners run on the reporting thread and must be quick.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Listener = Callable[[str, int, "int | None"], object]  # (what, done, total or None); what it returns is ignored

EVERY = 4096  # items of a loop between two reports

_listeners: ContextVar[tuple[Listener, ...]] = ContextVar("ckinspect_step_listeners", default=())


def step(what: str, done: int, total: int | None = None) -> None:
    """Tell whoever watches this thread: `done` of `total` `what` read so far."""
    for listener in _listeners.get():
        listener(what, done, total)


@contextmanager
def watching(listener: Listener) -> Iterator[None]:
    """`listener` hears every step of this thread until the block ends (after any listener already
    watching it: a test can pause a real read where the screen has just drawn a step)."""
    token = _listeners.set((*_listeners.get(), listener))
    try:
        yield
    finally:
        _listeners.reset(token)
