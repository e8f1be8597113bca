"""README's Layout section is the tree as it is: every top-level module and package of ckinspect/ has its
line, and every module of the layers a newcomer must place a change in (io, formats, analysis and its runs,
jobs, ops) is named in its package's entry. Read from the files, nothing imported.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "ckinspect"
NAMED_MODULES = ("io", "formats", "analysis", "analysis/runs", "jobs", "ops")


def _layout_block() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```\n", 2)[1]


def _entries(block: str) -> dict[str, str]:
    """ckinspect/'s entries (two-space indent) -> their text (the entry's lines up to the next entry)."""
    entries: dict[str, str] = {}
    current = None
    for line in block.splitlines():
        entry = re.match(r"^  (\S+)", line)
        if entry:
            current = entry.group(1).rstrip("/")
            entries[current] = line
        elif current is not None and line.startswith("    "):
            entries[current] += "\n" + line
        else:
            current = None
    return entries


def _top_level() -> list[str]:
    return sorted(
        p.stem if p.suffix == ".py" else p.name
        for p in PACKAGE.iterdir()
        if (p.suffix == ".py") or (p.is_dir() and (p / "__init__.py").is_file())
    )


def test_every_top_level_module_and_package_has_its_line():
    entries = _entries(_layout_block())
    assert [name for name in _top_level() if name not in entries and f"{name}.py" not in entries] == []


def test_the_layers_name_each_of_their_modules():
    entries = _entries(_layout_block())
    missing = []
    for package in NAMED_MODULES:
        head = package.split("/")[0]
        text = entries.get(head, "")
        for path in sorted((PACKAGE / package).iterdir()):
            name = path.stem if path.suffix == ".py" else path.name
            if name.startswith("__") or not (path.suffix == ".py" or (path / "__init__.py").is_file()):
                continue
            if not re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", text):
                missing.append(f"{package}/{name}")
    assert missing == []


def test_the_checker_reads_entries_and_their_continuation_lines():
    block = "ckinspect/\n  io/      bytes: zipdir,\n           remote\n  cli.py   entry\ntrainer/  x\n"
    assert _entries(block) == {"io": "  io/      bytes: zipdir,\n           remote", "cli.py": "  cli.py   entry"}
