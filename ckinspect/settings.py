"""The one home of every `CKINSPECT_*` environment variable: its name, its default and how its text is read.

Each is listed in README ("Settings") from `SETTINGS` below, and a test holds the two together: a variable
read anywhere else in the package, or missing from the README, fails the suite. Values are read when asked
(not at import), so a test or a worker process that sets one sees it at once.

Plain functions over `os.environ`: importing this pulls in nothing.
"""

from __future__ import annotations

import os

from ckinspect.vocab import CkinspectError

THREADS = "CKINSPECT_THREADS"
DEBUG = "CKINSPECT_DEBUG"
DISTRIBUTED = "CKINSPECT_DISTRIBUTED"
RANK_TIMEOUT = "CKINSPECT_RANK_TIMEOUT"
REMOTE_TIMEOUT = "CKINSPECT_REMOTE_TIMEOUT"
REMOTE_RETRIES = "CKINSPECT_REMOTE_RETRIES"
CRC = "CKINSPECT_CRC"
PURE = "CKINSPECT_PURE"

# name -> what it does (README's "Settings" table is checked against these)
SETTINGS: dict[str, str] = {
    THREADS: "threads of one process's value scan (default: 2, or the cores when fewer; 1 disables threading)",
    DEBUG: "set (not 0): an internal error prints its traceback instead of one line",
    DISTRIBUTED: "0: ignore torchrun's environment (a ckinspect run inside a torchrun worker of its own)",
    RANK_TIMEOUT: "seconds torchrun ranks wait for each other before the job ends with exit 2 (default 1800)",
    REMOTE_TIMEOUT: "seconds one remote read may take before it is retried or fails (default 30, at least 0.1)",
    REMOTE_RETRIES: "retries of a remote read that failed for a transient reason (default 3)",
    CRC: "the CRC-32 backend to use when installed (io.crc's names); default: the fastest installed",
    PURE: "set (not 0): take the pure-Python paths even where the compiled fast paths (ckinspect._native) are built",
}

DEFAULT_RANK_TIMEOUT = 1800.0
DEFAULT_REMOTE_TIMEOUT = 30.0
DEFAULT_REMOTE_RETRIES = 3


def raw(name: str) -> str:
    """The variable's text ('' when unset): for the settings whose reading lives with their one user."""
    assert name in SETTINGS, f"{name}: add it to ckinspect.settings.SETTINGS (and README)"
    return os.environ.get(name, "")


def threads() -> int | None:
    """CKINSPECT_THREADS as a positive count, or None when unset or not one."""
    text = raw(THREADS)
    return int(text) if text.isdigit() and int(text) > 0 else None


def set_threads(count: int) -> None:
    """A worker process's share of the cores, read by its value scans (jobs' pool initialisers)."""
    os.environ[THREADS] = str(count)


def debug() -> bool:
    return raw(DEBUG) not in ("", "0")


def pure() -> bool:
    return raw(PURE) not in ("", "0")


def distributed_off() -> bool:
    return raw(DISTRIBUTED) == "0"


def rank_timeout() -> float:
    text = raw(RANK_TIMEOUT)
    try:
        value = float(text) if text else DEFAULT_RANK_TIMEOUT
    except ValueError:
        raise CkinspectError(f"{RANK_TIMEOUT}={text!r} is not a number of seconds") from None
    return value if value > 0 else DEFAULT_RANK_TIMEOUT


def remote_timeout() -> float:
    try:
        return max(0.1, float(raw(REMOTE_TIMEOUT) or DEFAULT_REMOTE_TIMEOUT))
    except ValueError:
        return DEFAULT_REMOTE_TIMEOUT


def remote_retries() -> int:
    text = raw(REMOTE_RETRIES) or str(DEFAULT_REMOTE_RETRIES)
    return int(text) if text.isdigit() else DEFAULT_REMOTE_RETRIES


def crc_backend() -> str:
    """The CRC backend asked for ('' when none); io.crc decides which names it knows."""
    return raw(CRC)
