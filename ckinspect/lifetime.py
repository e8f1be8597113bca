"""What a command's results cost when the process ends, and how the console script skips that cost.

A report of 50,000 tensors leaves about a million small objects. Freed one by one as the command returns, they cost
a twentieth of the whole process, for memory the process is about to give back anyway. When the process ends with
the command (the console script, `python -m ckinspect`: cli.main says so through `ends_with_the_command`), what the
command hands to `keep_to_the_end` stays referenced from a cycle that cli.main's `gc.freeze()` puts out of the
collector's reach: nothing of it is freed, the OS takes the memory back at exit. Anywhere else (the Python API, the
TUI, the tests' in-process CLI) nothing is kept. Only plain results are kept: nothing whose finalizer must run.
"""

from __future__ import annotations

_kept: list[object] = []
_ending = False


def ends_with_the_command() -> None:
    """The process ends when the command returns (cli.main's console-script path)."""
    global _ending
    _ending = True


def keep_to_the_end(*results: object) -> None:
    """Keep `results` referenced until the process ends, if it ends with this command; else do nothing."""
    if _ending:
        if not _kept:
            _kept.append(_kept)  # a cycle: at exit only the collector could free it, and gc.freeze() stops it
        _kept.extend(results)
