"""Regenerate the README's screenshots of the TUI from the bundled samples.

    python docs/make_screenshots.py

Writes docs/screenshots/inspect.svg and docs/screenshots/diff.svg: the same app `ckinspect PATH`
and `ckinspect diff A B` start (one app factory), run headless at a fixed size, with paths relative
to the repository so nothing about this machine ends up in the pictures.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ckinspect.io.atomic import atomic_write_text  # noqa: E402
from ckinspect.tui.app import create_app  # noqa: E402

SIZE = (120, 34)
OUT = REPO / "docs" / "screenshots"
SHOTS = {
    "inspect": ("main", ["samples/stopped-30/tiny_resume.pth"], "model.layers.0.attn.wq.weight"),
    "diff": ("diff", ["samples/stopped-30/tiny_resume.pth", "samples/straight-60/tiny_resume.pth"], None),
}


async def shoot(name: str, command: str, paths: list[str], select: str | None, folder: Path = OUT) -> Path:
    """One screenshot, written to `folder` (a test writes to a scratch folder and compares)."""
    app = create_app(command, paths, cursor_blink=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        if select is not None:
            app.screen.jump_to(select)
            app.screen.action_value_stats()
            await pilot.pause()
            await app.workers.wait_for_complete()
        await pilot.pause(0.2)
        out = folder / f"{name}.svg"
        out.parent.mkdir(parents=True, exist_ok=True)
        svg = app.export_screenshot(title=f"ckinspect {' '.join(([command] if command != 'main' else []) + paths)}")
        atomic_write_text(out, svg)
    return out


def main() -> None:
    os.chdir(REPO)  # the paths on screen are relative to the repository
    for name, (command, paths, select) in SHOTS.items():
        missing = [p for p in paths if not Path(p).exists()]
        if missing:
            sys.exit(f"{missing[0]} is missing: run `python -m trainer samples` first")
        print(asyncio.run(shoot(name, command, paths, select)).relative_to(REPO))


if __name__ == "__main__":
    main()
