"""The one app factory: the CLI (launch.py) and the snapshot tests build the app through `create_app`."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from textual.app import SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.theme import BUILTIN_THEMES, Theme

from ckinspect.io.folders import names_folder
from ckinspect.tui.core import Backend
from ckinspect.tui.host import Host
from ckinspect.tui.widgets.palette import BASE_THEMES, THEME_VARIABLES

THEMES = ("ckinspect-dark", "ckinspect-light")  # textual's own, with status colours that stay readable


def ckinspect_theme(name: str) -> Theme:
    """Textual's dark or light theme plus the colours the widgets name ($ck-error, $ck-model ...)."""
    base = BUILTIN_THEMES[BASE_THEMES[name]]
    return dataclasses.replace(base, name=name, variables={**base.variables, **THEME_VARIABLES[name]})


class CkinspectApp(Host):
    TITLE = "ckinspect"
    CSS_PATH = ["app.tcss", "inspect.tcss", "diff.tcss", "panels.tcss", "watch.tcss"]
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (140, "-wide")]  # below 140 the tables take the whole width
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "q",
            "back_or_quit",
            "Quit",
            tooltip="Quit; on a screen opened from another, q goes back to it (ctrl+q quits anywhere)",
        ),
        Binding("question_mark,f1", "help", "Help", key_display="?"),
        Binding("t", "toggle_theme", "Theme", tooltip="Switch between the dark and the light theme", show=False),
        Binding("ctrl+p", "command_palette", "Commands", show=False),
    ]

    def __init__(
        self,
        first_screen: Screen,
        *,
        backend: Backend | None = None,
        theme: str = THEMES[0],
        cursor_blink: bool = True,
        quick: bool = False,
        remember_theme: bool = False,
    ) -> None:
        super().__init__()
        for name in THEMES:
            self.register_theme(ckinspect_theme(name))
        self._first_screen = first_screen
        self.quick = quick  # --quick: structure only, no value scan
        self.backend = backend or Backend()
        self.cursor_blink_enabled = cursor_blink
        self.theme = theme
        self.remember_theme = remember_theme  # the CLI's app saves the theme chosen (tui/preferences.py)

    def on_mount(self) -> None:
        # the URL prefixes this app lists are its own (Backend.listings), for every screen and worker, until
        # a screen reads again (Backend.forget_listings); the app's end lets them go
        self._listings_scope = contextlib.ExitStack()
        self._listings_scope.enter_context(self.backend.listings.in_use())
        self.theme_changed_signal.subscribe(self, self._theme_changed)

    def on_unmount(self) -> None:
        self._listings_scope.close()

    def _theme_changed(self, theme: Theme) -> None:
        if self.remember_theme:  # `t` or the palette's theme picker: the next run opens in it
            from ckinspect.tui.preferences import save_theme

            save_theme(theme.name)

    def get_theme_variable_defaults(self) -> dict[str, str]:
        """Any other theme picked from the palette still has the colours the widgets name."""
        return dict(THEME_VARIABLES[THEMES[0]])

    def get_default_screen(self) -> Screen:
        return self._first_screen

    def action_screenshot(self, filename: str | None = None, path: str | None = None) -> None:
        self.deliver_screenshot(filename, path)

    def deliver_screenshot(self, filename: str | None = None, path: str | None = None, *args: Any, **kw: Any) -> None:
        """Textual saves screenshots to ~/Downloads and fails where there is none (its palette command too):
        then the current folder. The notice names the file, absolute, so it can be found."""
        if path is None:
            downloads = Path.home() / "Downloads"
            path = str(downloads if downloads.is_dir() else Path.cwd())
        try:
            saved = self.save_screenshot(filename, path)
        except OSError as exc:
            self.notify(f"screenshot not saved: {exc}", severity="error", markup=False)
            return
        self.notify(f"screenshot saved to {Path(saved).resolve()}", title="Screenshot", markup=False)

    async def action_back_or_quit(self) -> None:
        """`q` quits from the first screen; on one opened from another it backs out, as Esc does."""
        from ckinspect.tui.widgets.footer import BACK, is_stacked

        if is_stacked(self.screen) and hasattr(self.screen, f"action_{BACK}"):
            await self.screen.run_action(BACK)
        else:
            self.exit()

    def action_toggle_theme(self) -> None:
        self.theme = THEMES[1] if self.theme == THEMES[0] else THEMES[0]

    def action_help(self) -> None:
        from ckinspect.tui.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.screen))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Every key binding of the current screen and the app, each entry naming its key, plus each
        screen's extra commands."""
        seen: set[str] = {"command_palette"}
        for binding in [*getattr(screen, "BINDINGS", []), *self.BINDINGS]:
            if not isinstance(binding, Binding) or not binding.description or binding.action in seen:
                continue
            seen.add(binding.action)
            target = self if binding in self.BINDINGS else screen
            action = "quit" if binding.action == "back_or_quit" else binding.action  # the palette's Quit quits
            title = binding.description
            if binding.action.startswith("sort_by("):  # the footer says "s Size"; the palette, what it does
                title = f"Sort by {title.lower()}"
            yield SystemCommand(
                title,
                f"key {self.key_names(binding)}" + (f" · {binding.tooltip}" if binding.tooltip else ""),
                lambda target=target, action=action: self.call_later(target.run_action, action),
            )
        for title, help_text, action in getattr(screen, "palette_commands", lambda: [])():
            yield SystemCommand(title, help_text, lambda action=action: self.call_later(screen.run_action, action))
        titles = {b.description for b in self.BINDINGS if isinstance(b, Binding)}
        # Textual's own Quit and Theme would be listed a second time beside ours
        yield from (c for c in super().get_system_commands(screen) if c.title not in titles)

    def key_names(self, binding: Binding) -> str:
        """The binding's keys as the footer shows them (`?` or `f1`, `esc`, `m`)."""
        if binding.key_display:
            return binding.key_display
        keys = [k.strip() for k in binding.key.split(",") if k.strip()]
        return " or ".join(self.get_key_display(dataclasses.replace(binding, key=k)) for k in keys)


def create_app(
    command: str,
    paths: Sequence[str | Path],
    *,
    backend: Backend | None = None,
    theme: str = THEMES[0],
    cursor_blink: bool = True,
    quick: bool = False,
    watch: dict[str, Any] | None = None,
    remember_theme: bool = False,
) -> CkinspectApp:
    """`main` PATH... (a file, or folders to choose from), `diff` A B, `drift` PATH, or `watch` RUN_DIR
    (`watch`: the WatchScreen's settle, interval and poll)."""
    from ckinspect.io.remote import as_path

    targets = [as_path(p) for p in paths]  # a URL stays a URL: read by range requests
    screen: Screen
    if command == "diff":
        from ckinspect.tui.screens.diff import DiffScreen

        screen = DiffScreen(targets[0], targets[1])
    elif command == "watch":
        from ckinspect.tui.screens.watch import WatchScreen

        screen = WatchScreen(targets[0], **(watch or {}))
    elif command == "drift":
        from ckinspect.tui.screens.drift import DriftScreen

        screen = DriftScreen(targets[0])
    elif len(targets) == 1 and not names_folder(targets[0]):  # a prefix (a URL ending in /): the folder screen
        from ckinspect.tui.screens.inspect import InspectScreen

        screen = InspectScreen(targets[0])
    else:
        from ckinspect.tui.screens.folder import FolderScreen

        screen = FolderScreen(targets)
    if remember_theme:
        from ckinspect.tui.preferences import saved_theme

        theme = saved_theme(THEMES, theme)
    return CkinspectApp(
        screen, backend=backend, theme=theme, cursor_blink=cursor_blink, quick=quick, remember_theme=remember_theme
    )
