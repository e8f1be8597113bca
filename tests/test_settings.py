"""Every `CKINSPECT_*` environment variable has one home (ckinspect.settings) and a line in README's Settings.

Read from the source with a regular expression, so a variable named anywhere in the package (a string, a
docstring, an f-string) must be one the settings module knows; reading the environment for one happens only
there.
"""

from __future__ import annotations

import re
from pathlib import Path

from ckinspect import settings

PACKAGE = Path(__file__).resolve().parents[1] / "ckinspect"
README = PACKAGE.parent / "README.md"
NAME = re.compile(r"CKINSPECT_[A-Z0-9_]+")
READ = re.compile(r"(os\.environ|getenv)[^\n]*CKINSPECT_")


def test_every_variable_named_in_the_package_is_a_setting():
    unknown = {
        f"{path.relative_to(PACKAGE.parent)}: {name}"
        for path in PACKAGE.rglob("*.py")
        for name in NAME.findall(path.read_text(encoding="utf-8"))
        if name not in settings.SETTINGS
    }
    assert unknown == set()


def test_only_the_settings_module_reads_them():
    readers = [
        f"{path.relative_to(PACKAGE.parent)}:{n}"
        for path in PACKAGE.rglob("*.py")
        if path.name != "settings.py" or path.parent != PACKAGE
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if READ.search(line)
    ]
    assert readers == []


def test_every_setting_is_in_the_readme():
    section = README.read_text(encoding="utf-8").split("\n## Settings\n", 1)
    assert len(section) == 2, "README has no '## Settings' section"
    body = section[1].split("\n## ", 1)[0]
    assert sorted(n for n in settings.SETTINGS if f"`{n}`" not in body) == []
