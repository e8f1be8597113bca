"""What the TUI remembers between runs: the theme, in a small JSON file in the user's config folder
(`$XDG_CONFIG_HOME/ckinspect/tui.json`, else `~/.config/ckinspect/tui.json`). A file that cannot be read
or written is ignored: a preference never stops the app."""

from __future__ import annotations

import json
import os
from pathlib import Path


def preferences_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or ""
    root = Path(base) if Path(base).is_absolute() else Path.home() / ".config"  # XDG: a relative value is ignored
    return root / "ckinspect" / "tui.json"


def saved_theme(known: tuple[str, ...], default: str) -> str:
    try:
        theme = json.loads(preferences_path().read_text(encoding="utf-8")).get("theme")
    except (OSError, ValueError, AttributeError):
        return default
    return theme if theme in known else default


def save_theme(theme: str) -> None:
    from ckinspect.io.atomic import atomic_write_text

    path = preferences_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps({"theme": theme}) + "\n")
    except OSError:
        pass  # a read-only home: the theme is simply not remembered
