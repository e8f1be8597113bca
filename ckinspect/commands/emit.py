"""Shared by every headless command: where the rendered result goes, and the JSON envelope."""

from __future__ import annotations

import sys

from ckinspect.io.atomic import atomic_write_text
from ckinspect.vocab import EXIT_FINDINGS, EXIT_OK, VERSION, CkinspectError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def emit(text: str, output: str | None) -> None:
    """Print, or write atomically to --output."""
    if not text.endswith("\n"):
        text += "\n"
    if output:
        try:
            atomic_write_text(output, text)
        except OSError as exc:
            raise CkinspectError(f"cannot write {output}: {exc.strerror or exc}") from exc
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


def text_layout(args: Any) -> tuple[int, bool]:
    """(width, colour) for a text report: the shared rule, colour only when stdout is a terminal."""
    from ckinspect.report.console import text_width

    terminal = not getattr(args, "output", None) and sys.stdout.isatty()
    return text_width(terminal), terminal


def render_ci(fmt: str, subjects: Any, args: Any, suite: str, fail_on: str | None = None) -> str:
    """SARIF or JUnit of these report.subjects; `fail_on` overrides --fail-on for JUnit's failures."""
    if fmt == "sarif":
        from ckinspect.report import sarif

        return sarif.render(subjects)
    from ckinspect.report import junit

    return junit.render(subjects, str(fail_on or getattr(args, "fail_on", "error")), suite)


def envelope(command: str, **body) -> dict:
    return {"schema": 1, "tool": "ckinspect", "version": VERSION, "command": command, **body}


def exit_for(needs_attention: bool, fail_on: str | None) -> int:
    """1 when something needs the user's attention, unless --fail-on never."""
    return EXIT_FINDINGS if needs_attention and fail_on != "never" else EXIT_OK
