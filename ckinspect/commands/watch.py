"""`ckinspect watch RUN_DIR --report`: follow a run headless, one line per checkpoint event.

Text by default, JSON lines with `--format json`. `--fail-on error|warning` exits 1 right after the first
event with a finding at or above that severity; `--once` judges what is there now and exits (0, or 1 when
something reached --fail-on). Without --once it runs until interrupted (Ctrl-C exits 0 when nothing
reached --fail-on). Without --report the live TUI screen opens instead (ckinspect.tui).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from pathlib import Path

from ckinspect.io.remote import WATCH_LOCAL_ONLY, refuse_remote
from ckinspect.vocab import EXIT_FINDINGS, EXIT_OK, CkinspectError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

    from ckinspect.jobs.watch import Event


@contextlib.contextmanager
def stopping_on_signals(terminate: Callable[[], object] | None = None) -> Iterator[None]:
    """Watch runs until it is stopped, so SIGINT and SIGTERM must stop it whatever its parent left them as:
    a background job, nohup and many CI runners start it with SIGINT ignored, and ignored handlers are
    inherited across exec. Both end the follow loop as Ctrl-C does (the follower's processes are closed);
    the TUI passes `terminate` (its app's exit) for SIGTERM, so that the terminal is restored. The
    handlers found are put back on leaving (a test calling `main` in-process keeps its own)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers (a test driving `follow` from a thread)
        return
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt if terminate is None else lambda signum, frame: terminate())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    with stopping_on_signals():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    refuse_remote(args.run_dir, WATCH_LOCAL_ONLY)
    run_dir = check_run_dir(args.run_dir)
    from ckinspect.jobs.watch import Follower
    from ckinspect.model import fails

    follower = Follower(run_dir, settle=args.settle, verify=not args.quick, jobs=args.jobs, keep_bytes=args.keep << 20)
    out = open_output(args.output)
    try:
        write = line_writer(args.format, str(run_dir), out)
        if args.once:
            failed = False
            for event in follower.poll_each(once=True):
                write(event)
                failed = failed or fails(event.findings, args.fail_on)
            return EXIT_FINDINGS if failed else EXIT_OK
        return follow(follower, write, args.fail_on, interval=args.interval, poll=args.poll)
    finally:
        follower.close()
        if out is not sys.stdout:
            out.close()


def follow(
    follower: Any,
    write: Callable[[Event], None],
    fail_on: str,
    interval: float = 1.0,
    poll: bool = False,
    stop: threading.Event | None = None,
) -> int:
    """Poll after every wake-up until `stop` is set (or Ctrl-C); exit 1 at the first event reaching fail_on."""
    from ckinspect.io.changes import Changes
    from ckinspect.model import fails

    stop = stop or threading.Event()
    changes = Changes(follower.run_dir, interval=interval, poll=poll)
    if changes.mode == "polling" and changes.why and changes.why != "asked for":
        print(f"ckinspect: watching by polling every {changes.interval:g} s: {changes.why}", file=sys.stderr)
    try:
        for event in follower.poll_each():
            write(event)
            if fails(event.findings, fail_on):
                return EXIT_FINDINGS
        for _ in changes.wakeups(stop):
            for event in follower.poll_each():
                write(event)
                if fails(event.findings, fail_on):
                    return EXIT_FINDINGS
    except KeyboardInterrupt:
        return EXIT_OK
    return EXIT_OK


def check_run_dir(path: str) -> Path:
    run_dir = Path(path)
    if not run_dir.is_dir():
        raise CkinspectError(f"{path}: not a folder" if run_dir.exists() else f"{path}: no such file or folder")
    return run_dir


def open_output(output: str | None) -> Any:
    """Lines are appended as they happen: --output is a log, not an atomically replaced report."""
    if not output:
        return sys.stdout
    try:
        return open(output, "a", encoding="utf-8")
    except OSError as exc:
        raise CkinspectError(f"cannot write {output}: {exc.strerror or exc}") from exc


def line_writer(fmt: str, run_dir: str, out: Any) -> Callable[[Event], None]:
    from ckinspect.report.watch_report import json_line, text_line

    def write(event: Event) -> None:
        data = event.to_json()
        out.write((json_line(data) if fmt == "json" else text_line(data, run_dir)) + "\n")
        out.flush()

    return write
