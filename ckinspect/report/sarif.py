"""SARIF 2.1.0 (OASIS) of any command's findings, for GitHub code scanning and other SARIF readers.

One rule per finding code (texts from report.rules, default level from the code's severity); one result
per finding, located at its file (a URI relative to `root`, the repository checked out, when the file
lies inside it) and, when it is about one tensor, at the tensor's name as a logical location. Text from
the file (names, messages) goes through fmt.terminal_safe (tabs and newlines kept): JSON escaping is not
enough for a reader.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

from ckinspect.fmt import terminal_safe
from ckinspect.report.rules import all_codes, rule_text
from ckinspect.report.subjects import Subject
from ckinspect.vocab import VERSION

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
ROOT_ID = "%SRCROOT%"  # the uriBaseId of relative paths: the folder the report was made from
LEVEL = {"error": "error", "warning": "warning", "info": "note"}
# GitHub ranks security alerts by this (CVSS-like, 0-10); only codes tagged "security" carry one
SECURITY_SEVERITY = {"error": "9.0", "warning": "5.0", "info": "2.0"}


def render(subjects: Sequence[Subject], root: str | os.PathLike[str] | None = None) -> str:
    return json.dumps(document(subjects, root), indent=2, ensure_ascii=False)


def document(subjects: Sequence[Subject], root: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The SARIF log of these subjects' findings; paths are made relative to `root` (default: the current folder)."""
    base = Path(os.path.abspath(root if root is not None else os.getcwd()))
    codes = all_codes()
    for subject in subjects:  # a code no table knows (never expected) still gets a rule
        for finding in subject.findings:
            codes.setdefault(finding.code, finding.severity)
    index = {code: i for i, code in enumerate(codes)}
    results = []
    for subject in subjects:
        location = artifact_location(subject.path, base)
        seen: dict[tuple[str, str], int] = {}
        for finding in subject.findings:
            results.append(_result(finding, location, index[finding.code], seen))
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "ckinspect",
                "version": VERSION,
                "semanticVersion": VERSION,
                "rules": [_rule(code, severity) for code, severity in codes.items()],
            }
        },
        "originalUriBaseIds": {ROOT_ID: {"uri": _file_uri(base, directory=True)}},
        "columnKind": "unicodeCodePoints",
        "results": results,
    }
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def artifact_location(path: Path, base: Path) -> dict[str, str]:
    """{"uri": "runs/a.pth", "uriBaseId": "%SRCROOT%"} inside base; an absolute file URI outside it."""
    absolute = Path(os.path.abspath(path))
    try:
        relative = absolute.relative_to(base)
    except ValueError:
        return {"uri": _file_uri(absolute)}
    return {"uri": _quote(relative.as_posix()), "uriBaseId": ROOT_ID}


def _quote(posix: str) -> str:
    # bytes, so that a name with undecodable bytes (lone surrogates) is percent-encoded, never an error
    return quote(os.fsencode(posix), safe="/")


def _file_uri(path: Path, directory: bool = False) -> str:
    text = path.as_posix()
    if directory and not text.endswith("/"):
        text += "/"  # a base URI must end with a slash, or the last segment is dropped when resolving
    return "file://" + _quote(text if text.startswith("/") else "/" + text)


def _rule(code: str, severity: str) -> dict[str, Any]:
    text = rule_text(code)
    properties: dict[str, Any] = {"tags": ["checkpoint", *text.tags], "precision": "high"}
    if "security" in text.tags:
        properties["security-severity"] = SECURITY_SEVERITY.get(severity, "5.0")
    return {
        "id": code,
        "name": "".join(part.capitalize() for part in code.split("_")),
        "shortDescription": {"text": text.short},
        "fullDescription": {"text": text.help},
        "help": {"text": text.help, "markdown": f"**{code}** ({severity}): {text.help}"},
        "defaultConfiguration": {"level": LEVEL.get(severity, "note")},
        "properties": properties,
    }


def _result(finding: Any, location: dict[str, str], rule_index: int, seen: dict[tuple[str, str], int]) -> dict:
    tensor = terminal_safe(finding.tensor, keep_lines=True) if finding.tensor is not None else None
    physical = {"artifactLocation": dict(location), "region": {"startLine": 1}}  # GitHub requires a startLine
    where: dict[str, Any] = {"physicalLocation": physical}
    if tensor is not None:
        where["logicalLocations"] = [{"name": tensor, "fullyQualifiedName": tensor, "kind": "variable"}]
    # stable across runs (messages carry counts that change); the ordinal keeps repeated findings apart
    key = (finding.code, tensor or "")
    seen[key] = seen.get(key, 0) + 1
    ident = "\0".join([finding.code, location["uri"], tensor or "", str(seen[key])])
    return {
        "ruleId": finding.code,
        "ruleIndex": rule_index,
        "level": LEVEL.get(finding.severity, "note"),
        "message": {"text": terminal_safe(finding.message, keep_lines=True) or finding.code},
        "locations": [where],
        "partialFingerprints": {"ckinspectFinding/v1": hashlib.sha256(ident.encode("utf-8", "replace")).hexdigest()},
    }
