"""`ckinspect PATH`, `ckinspect diff A B`, `ckinspect drift PATH` without --report start the TUI here."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ckinspect.vocab import CkinspectError


def run(command: str, args: argparse.Namespace) -> int:
    if command == "diff":
        paths = [args.a, args.b]
    elif command == "drift":
        from ckinspect.formats.discover import model_folder_weights

        paths = [model_folder_weights(args.path) or args.path]  # a Hugging Face folder: its weights
    elif command == "watch":
        paths = [args.run_dir]
    else:
        paths = list(args.paths)
    from ckinspect.io.folders import known_missing

    for path in paths if command != "watch" else []:  # watch waits for a run folder not made yet
        if known_missing(path):  # a URL's absence is found (one line) when it is read
            raise CkinspectError(f"{path}: no such file or folder")

    from ckinspect.tui.app import create_app

    watch = None
    if command == "watch":
        from ckinspect.io.remote import WATCH_LOCAL_ONLY, refuse_remote

        refuse_remote(args.run_dir, WATCH_LOCAL_ONLY)
        if Path(args.run_dir).exists() and not Path(args.run_dir).is_dir():
            raise CkinspectError(f"{args.run_dir}: not a folder")
        watch = {
            "settle": args.settle,
            "interval": args.interval,
            "poll": args.poll,
            "jobs": args.jobs,
            "keep_bytes": args.keep << 20,
        }
    app = create_app(command, paths, quick=bool(getattr(args, "quick", False)), watch=watch, remember_theme=True)
    if command == "watch":
        from ckinspect.commands.watch import stopping_on_signals

        with stopping_on_signals(terminate=lambda: exit_soon(app)):  # runs until stopped, whatever was ignored
            app.run()
    else:
        app.run()
    return app.return_code or 0  # 1 when the app stopped on an unhandled error (Textual printed it)


def exit_soon(app: Any) -> None:
    """SIGTERM's handler: the app exits as from `q`. Called from a signal handler, a bare `app.exit()` only
    queued its message: an idle app (waiting in epoll for its next event) never read it, so the watch TUI
    kept running. Scheduled through the loop's self-pipe, it wakes the loop."""
    import asyncio

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # before the app's loop started or after it ended
        app.exit()
        return
    loop.call_soon_threadsafe(app.exit)
