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


def footer_place(key: str, binding: Binding, screens_own: bool, stacked: bool, own: set[str]) -> str:
    """Where a binding goes: "back" (esc Back, first), "always", "more" (while it fits) or "" (not drawn).
    `screens_own`: bound by the screen itself, not the app; `own`: the actions of the screen's BINDINGS."""
    if not drawable(key, binding, screens_own, stacked):
        return ""
    if binding.action == BACK and screens_own:
        return "back" if leads_back(key, binding, stacked) else ""
    if binding.show:
        return "always"
    return "more" if screens_own and binding.action in own else ""


def drawable(key: str, binding: Binding, screens_own: bool, stacked: bool) -> bool:
    """Described, not the palette (drawn on its own, at the right), and not the app's q on a screen opened
    from another (q backs out there: "esc Back" says it)."""
    hidden_q = key == "q" and stacked and not screens_own
    return bool(binding.description) and binding.action != "command_palette" and not hidden_q


def leads_back(key: str, binding: Binding, stacked: bool) -> bool:
    """Esc is drawn as Back on a screen opened from another (or where the screen shows it anyway)."""
    return key == "escape" and (stacked or binding.show)


class KeysFooter(Footer):
    def __init__(self) -> None:
        super().__init__()
        self._shown_width = -1

    def chosen(self, width: int) -> list[tuple[Binding, bool]]:
        """(binding, enabled) to draw at this width, in the order the screen declares them."""
        screen = self.screen
        always, more = self._sorted(screen, is_stacked(screen))
        room = width - PALETTE_WIDTH - sum(key_width(self.app.get_key_display(b), b.description) for b, _ in always)
        order = [*getattr(screen, "FOOTER_MORE", ()), QUIT.action, *more]
        picked: list[str] = []  # in the screen's order of importance, after the keys always shown
        for action in dict.fromkeys(a for a in order if a in more):
            binding = more[action][0]
            need = key_width(self.app.get_key_display(binding), binding.description)
            if need <= room:
                room -= need
                picked.append(action)
        return always + [more[a] for a in picked]

    @staticmethod
    def _sorted(screen: Screen, stacked: bool) -> tuple[list[tuple[Binding, bool]], dict[str, tuple[Binding, bool]]]:
        """The keys always shown ("esc Back" first where it leads back) and the others, by action, that
        are shown while they fit; one key per action (`?` and f1 are one Help)."""
        always: list[tuple[Binding, bool]] = []
        more: dict[str, tuple[Binding, bool]] = {}
        back: list[tuple[Binding, bool]] = []
        own = {b.action for b in getattr(type(screen), "BINDINGS", []) if isinstance(b, Binding)}  # not Tab, ^c
        drawn: set[str] = set()
        for key, (node, binding, enabled, _tooltip) in screen.active_bindings.items():
            place = "" if binding.action in drawn else footer_place(key, binding, node is screen, stacked, own)
            if place == "back":
                back = [(Binding(key, BACK, "Back", key_display=binding.key_display), enabled)]
            elif place == "always":
                always.append((binding, enabled))
                drawn.add(binding.action)
            elif place == "more":
                more.setdefault(binding.action, (binding, enabled))
        if stacked:
            more.setdefault(QUIT.action, (QUIT, True))
        return back + always, more

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
