"""The footer every screen shows: its main keys always, more of them as the terminal widens, and
"esc Back" first on a screen opened from another one (where `q` backs out too; ctrl+q quits).

Which keys: the bindings with `show=True` always; then the screen's other described bindings, in the
order of its `FOOTER_MORE` (action names, most useful first; then the rest of its own BINDINGS in their
order), each while it still fits left of the palette key, drawn after the keys always shown.
Widths are computed from the text the keys draw, so nothing is ever cut off.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from textual.binding import Binding
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

if TYPE_CHECKING:
    from textual.app import ComposeResult
    from textual.events import Resize
    from textual.screen import Screen

BACK = "back"  # the action every screen that can be left names its Esc binding
QUIT = Binding("ctrl+q", "app.quit", "Quit")  # on a stacked screen q backs out: this is how to quit there
PALETTE_WIDTH = 15  # "│ ^p Commands " docked right: its border, paddings and text


def is_stacked(screen: Screen) -> bool:
    """Opened from another screen (Esc and q lead back to it), not the first one nor a dialog."""
    from textual.screen import ModalScreen

    stack = screen.app.screen_stack
    return screen in stack and screen is not stack[0] and not isinstance(screen, ModalScreen)


def key_width(key_display: str, description: str) -> int:
    """What a FooterKey draws: ` key ` then `description `."""
    return len(key_display) + 2 + len(description) + 1


class KeysFooter(Footer):
    def __init__(self) -> None:
        super().__init__()
        self._shown_width = -1

    def chosen(self, width: int) -> list[tuple[Binding, bool]]:
        """(binding, enabled) to draw at this width, in the order the screen declares them."""
        screen = self.screen
        stacked = is_stacked(screen)
        active = screen.active_bindings
        always: list[tuple[Binding, bool]] = []
        more: dict[str, tuple[Binding, bool]] = {}
        back: tuple[Binding, bool] | None = None
        own = {b.action for b in getattr(type(screen), "BINDINGS", []) if isinstance(b, Binding)}  # not Tab, ^c
        drawn: set[str] = set()  # one key per action (`?` and f1 are one Help)
        for key, (node, binding, enabled, _tooltip) in active.items():
            if not binding.description or binding.action in drawn or binding.action == "command_palette":
                continue
            if binding.action == BACK and node is screen:
                if key == "escape" and (stacked or binding.show):
                    back = (Binding(key, BACK, "Back", key_display=binding.key_display), enabled)
            elif key == "q" and stacked and node is not screen:
                continue  # the app's q backs out here: "esc Back" says it
            elif binding.show:
                always.append((binding, enabled))
                drawn.add(binding.action)
            elif node is screen and binding.action in own:
                more.setdefault(binding.action, (binding, enabled))
        if back is not None:
            always.insert(0, back)
        if stacked:
            more.setdefault(QUIT.action, (QUIT, True))
        room = width - PALETTE_WIDTH - sum(key_width(self.app.get_key_display(b), b.description) for b, _ in always)
        order = [*getattr(screen, "FOOTER_MORE", ()), QUIT.action, *more]
        picked: list[str] = []  # in the screen's order of importance, after the keys always shown
        for action in order:
            if action in more and action not in picked:
                binding = more[action][0]
                need = key_width(self.app.get_key_display(binding), binding.description)
                if need <= room:
                    room -= need
                    picked.append(action)
        return always + [more[a] for a in picked]

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        self._shown_width = self.size.width
        yield from self._keys(self.chosen(self.size.width or self.app.size.width))
        palette = self.screen.active_bindings.get(self.app.COMMAND_PALETTE_BINDING)
        if self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE and palette is not None:
            _node, binding, enabled, _tooltip = palette
            yield FooterKey(
                binding.key,
                self.app.get_key_display(binding),
                binding.description,
                binding.action,
                classes="-command-palette",
                disabled=not enabled,
                tooltip=binding.tooltip or binding.description,
            )

    def _keys(self, chosen: list[tuple[Binding, bool]]) -> Iterator[FooterKey]:
        for binding, enabled in chosen:
            yield FooterKey(
                binding.key,
                self.app.get_key_display(binding),
                binding.description,
                binding.action,
                disabled=not enabled,
                tooltip=binding.tooltip,
            ).data_bind(compact=Footer.compact)

    def on_resize(self, event: Resize) -> None:
        if event.size.width != self._shown_width and self._bindings_ready:
            self.call_after_refresh(self.recompose)
