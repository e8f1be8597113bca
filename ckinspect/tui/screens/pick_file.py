"""Choose the second checkpoint for a diff: the ones beside the current file, or type a path."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList
from textual.widgets.option_list import Option
from textual.worker import Worker, WorkerState

from ckinspect.fmt import terminal_safe
from ckinspect.io.folders import known_missing, on_disk, user_path
from ckinspect.io.remote import as_path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ckinspect.tui.host import Host

FOLDER = "folder:"  # a listed completion that is a folder: chosen, it is typed on rather than opened
COMPLETIONS_LISTED = 200  # a folder of 50,000 files lists its first ones; typing more narrows them


def complete_path(typed: str) -> tuple[str, list[Path]]:
    """Shell-style Tab completion: the text extended as far as every match agrees (a folder gains its
    `/`), and the matching paths. Hidden entries only when the typed name starts with a dot."""
    import os

    head, _, stem = typed.rpartition("/")
    folder = Path(head + "/" if head or typed.startswith("/") else ".").expanduser()
    try:
        with os.scandir(folder) as entries:
            names = sorted(
                (e.name, e.is_dir())
                for e in entries
                if e.name.startswith(stem) and (stem[:1] == "." or e.name[:1] != ".")
            )
    except OSError:
        return typed, []
    if not names:
        return typed, []
    common = os.path.commonprefix([name for name, _ in names])
    if len(names) == 1 and names[0][1]:
        common += "/"
    prefix = typed[: len(typed) - len(stem)]
    return prefix + common, [folder / name for name, _ in names[:COMPLETIONS_LISTED]]


class PathInput(Input):
    """The typed path; Tab completes it (Shift+Tab still moves on)."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("tab", "complete", "Complete", show=False)]

    class Completed(Message):
        def __init__(self, matches: list[Path]) -> None:
            super().__init__()
            self.matches = matches

    def action_complete(self) -> None:
        completed, matches = complete_path(self.value)
        if completed != self.value:
            self.value = completed
            self.cursor_position = len(completed)
        self.post_message(self.Completed(matches))


class PickFileScreen(ModalScreen[Path | None]):
    app: Host  # for the type checker: textual types `app` as App[Any]
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    class Candidates(Message):
        def __init__(self, paths: list[Path]) -> None:
            super().__init__()
            self.paths = paths

    def __init__(self, current: Path) -> None:
        super().__init__()
        self.current = as_path(current)

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(Text(f"Compare {terminal_safe(self.current)} with:"))
            yield PathInput(
                value="", placeholder="type a path (Tab completes), or choose one below (Enter)", id="path",
                select_on_focus=False,
            )  # fmt: skip
            yield OptionList(id="candidates")

    def on_mount(self) -> None:
        self.query_one(Input).cursor_blink = self.app.cursor_blink_enabled
        self.query_one(OptionList).add_option(Option("looking beside it…", disabled=True))
        self.query_one(OptionList).focus()
        self.look_around()

    @work(thread=True, exclusive=True, exit_on_error=False, group="pick", description="checkpoints nearby")
    def look_around(self) -> None:
        # a remote checkpoint has no folder here to look in: offer what lies in the working folder
        folder = self.current.parent if on_disk(self.current) else Path.cwd()
        paths = [p for p in self.app.backend.find([folder]) if p != self.current]
        self.post_message(self.Candidates(paths))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            options = self.query_one(OptionList)
            options.clear_options()
            options.add_option(Option("cannot list the folder; type a path above", disabled=True))

    def on_pick_file_screen_candidates(self, message: Candidates) -> None:
        options = self.query_one(OptionList)
        options.clear_options()
        for path in message.paths:
            options.add_option(Option(str(path), id=str(path)))
        if not message.paths:
            options.add_option(Option("no other checkpoint beside it; type a path above", disabled=True))
            self.query_one(Input).focus()
        else:
            options.highlighted = 0

    @on(PathInput.Completed)
    def _completed(self, event: PathInput.Completed) -> None:
        """Several matches: they are listed below, to choose from or to narrow down by typing on."""
        if len(event.matches) < 2:
            return
        options = self.query_one(OptionList)
        options.clear_options()
        for path in event.matches:
            folder = path.is_dir()  # chosen, it goes into the box to complete further
            options.add_option(Option(str(path) + ("/" if folder else ""), id=(FOLDER if folder else "") + str(path)))

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        if event.option.id and event.option.id.startswith(FOLDER):
            box = self.query_one(PathInput)
            box.value = event.option.id.removeprefix(FOLDER).removeprefix("./") + "/"
            box.cursor_position = len(box.value)
            box.focus()
        elif event.option.id:
            self.dismiss(as_path(event.option.id))

    @on(Input.Submitted)
    def _typed(self, event: Input.Submitted) -> None:
        typed = event.value.strip()
        path = user_path(typed)
        if not known_missing(path):  # a URL is read (and a missing object reported) by the diff screen
            self.dismiss(path)
        else:
            self.notify(terminal_safe(f"{path}: no such file or folder"), severity="error", markup=False)

    def on_key(self, event) -> None:
        """Typing while the list has focus starts a path: the keys go to the box above."""
        box = self.query_one(Input)
        if not box.has_focus and event.character and event.character.isprintable() and event.character != " ":
            box.focus()
            box.insert_text_at_cursor(event.character)
            event.stop()
            event.prevent_default()

    def action_cancel(self) -> None:
        self.dismiss(None)
