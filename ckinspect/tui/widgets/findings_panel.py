"""Findings coloured by severity, worst first; choosing one with a tensor jumps to it, and an
interrupted save (LEFTOVER_TMP) leads to the repair plan."""

from __future__ import annotations

from rich.text import Text
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from ckinspect.fmt import terminal_safe
from ckinspect.model import Finding
from ckinspect.tui.core import severity_badges
from ckinspect.tui.widgets.palette import SEVERITY_COLOURS, themed
from ckinspect.vocab import SEVERITY_RANK


class FindingsPanel(OptionList):
    DEFAULT_CSS = """
    FindingsPanel { height: 1fr; border: round $panel-lighten-2; border-title-color: $foreground; }
    FindingsPanel:focus { border: round $accent; }
    """

    class JumpToTensor(Message):
        def __init__(self, tensor: str) -> None:
            super().__init__()
            self.tensor = tensor

    class RepairWanted(Message):
        """A LEFTOVER_TMP finding was chosen: its remedy is the repair plan of the folder."""

    def on_mount(self) -> None:
        self.border_title = "findings"

    def show(self, findings: list[Finding], note: str = "") -> None:
        self.findings = sorted(findings, key=lambda f: -SEVERITY_RANK.get(f.severity, 0))
        self.clear_options()
        self.border_title = "findings " + severity_badges(findings)
        if not self.findings:
            self.add_option(Option(Text("no findings" + (f" ({note})" if note else ""), style="italic"), disabled=True))
            return
        for index, finding in enumerate(self.findings):
            colour = SEVERITY_COLOURS.get(finding.severity, "")
            label = Text()
            label.append(
                {"error": "ERR  ", "warning": "WARN ", "info": "INFO "}.get(finding.severity, "     "),
                style=f"bold {colour}",
            )
            label.append(finding.code, style="bold")
            label.append(f" {terminal_safe(finding.message)}")
            if finding.tensor:
                label.append(" →", style="dim")
            elif finding.code == "LEFTOVER_TMP":
                label.append("\nEnter: plan the repair (R)", style="dim italic")
            self.add_option(Option(themed(label), id=str(index)))
        if note:
            self.add_option(Option(Text(note, style="italic"), disabled=True))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id is None:
            return
        finding = self.findings[int(event.option.id)]
        if finding.tensor:
            self.post_message(self.JumpToTensor(finding.tensor))
        elif finding.code == "LEFTOVER_TMP":
            self.post_message(self.RepairWanted())
