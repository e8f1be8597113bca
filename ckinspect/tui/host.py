"""What every screen may ask of the app it runs in, without importing the app (which imports the screens):
the app's type as the screens see it, and the one-line text of a failed worker.

`CkinspectApp` (tui/app.py) is a `Host`; a screen says `app: Host` for the type checker.
"""

from __future__ import annotations

from textual.app import App

from ckinspect.fmt import terminal_safe
from ckinspect.io.blobs import UnreadableStorage
from ckinspect.tui.core import Backend
from ckinspect.vocab import CkinspectError


class Host(App[int]):
    """The app's part that screens use: the one adapter to the layers below, and the --quick switch."""

    backend: Backend
    quick: bool  # --quick: structure only, no value scan
    cursor_blink_enabled: bool  # off in tests and snapshots: inputs and tables do not blink


def failure_text(error: BaseException | None) -> str:
    """One line for the UI: the message of an error the core raises on purpose, else its type too."""
    if isinstance(error, (CkinspectError, UnreadableStorage, OSError, ValueError)):
        return terminal_safe(f"failed: {error}")  # messages name files: no control sequence reaches the screen
    return terminal_safe(f"failed: {type(error).__name__}: {error}")
