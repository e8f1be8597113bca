"""Waiting for a folder to change: the operating system's file events (watchfiles, on Rust's notify), or
polling where there are none (NFS, FUSE and other network filesystems, or watchfiles not installed).

    changes = Changes(Path("runs/"), interval=1.0)
    for _ in changes.wakeups(stop):     # after each batch of file events, or `interval` seconds of quiet
        look_again()
    changes.mode                        # "events" or "polling"

Either way the caller looks at the folder itself after every wake-up: an event only says "look now",
never what to conclude, so a lost or coalesced event costs at most `interval` seconds.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

EVENTS = "events"
POLLING = "polling"
# Filesystem types whose changes made on other machines raise no local event.
NO_EVENTS_FS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afs", "lustre", "gpfs", "ceph", "glusterfs")


class Changes:
    """Wake-ups for `root`: see the module docstring. `poll=True` forces polling."""

    def __init__(self, root: Path, interval: float = 1.0, poll: bool = False) -> None:
        self.root = root
        self.interval = max(0.05, interval)
        self.mode = POLLING if poll or not _events_work(root) else EVENTS
        self.why = "asked for" if poll else ("" if self.mode == EVENTS else _why_polling(root))

    def wakeups(self, stop: threading.Event) -> Iterator[str]:
        """Yield EVENTS after file events, POLLING after `interval` seconds; return once `stop` is set."""
        if self.mode == EVENTS:
            try:
                yield from self._events(stop)
                return
            except (OSError, RuntimeError) as exc:  # e.g. the inotify watch limit: poll instead
                self.mode, self.why = POLLING, f"file events failed ({exc})"
        while not stop.is_set():
            if stop.wait(self.interval):
                return
            yield POLLING

    def _events(self, stop: threading.Event) -> Iterator[str]:
        import watchfiles

        for changes in watchfiles.watch(
            self.root,
            watch_filter=None,
            debounce=200,
            step=20,
            stop_event=stop,
            rust_timeout=int(self.interval * 1000),
            yield_on_timeout=True,
            raise_interrupt=False,
        ):
            if stop.is_set():
                return
            yield EVENTS if changes else POLLING


def _events_work(root: Path) -> bool:
    try:
        import watchfiles  # noqa: F401
    except ImportError:
        return False
    return filesystem_type(root) not in NO_EVENTS_FS and not filesystem_type(root).startswith("fuse")


def _why_polling(root: Path) -> str:
    try:
        import watchfiles  # noqa: F401
    except ImportError:
        return "watchfiles is not installed (pip install 'ckinspect[watch]')"
    return f"{filesystem_type(root)} raises no file events for changes made elsewhere"


def filesystem_type(path: Path) -> str:
    """The type of the filesystem holding `path` (Linux: /proc/self/mountinfo), or "" when unknown."""
    try:
        real = os.path.realpath(path)
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return ""
    best, kind = "", ""
    for line in lines:
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        mount = fields[4].replace("\\040", " ")
        fstype = line.split(" - ", 1)[1].split()[0]
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, fstype
    return kind
