"""JUnit XML of any command's findings, for CI test dashboards.

One testcase per subject (a checkpoint, or a leftover for repair); a <failure> per finding at or above
--fail-on (or, for last-good, per reason the checkpoint is no resume point); the other findings are
listed in the testcase's <system-out>. Counts follow the common
reading (Jenkins, GitLab, junitparser): `failures` counts <failure> elements.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence

from ckinspect.fmt import terminal_safe
from ckinspect.model import Finding, fails
from ckinspect.report.subjects import Subject


def render(subjects: Sequence[Subject], fail_on: str, suite: str) -> str:
    """`suite` names the command ("ckinspect report", "ckinspect diff A B", ...)."""
    suites = ET.Element("testsuites", name="ckinspect")
    testsuite = ET.SubElement(suites, "testsuite", name=terminal_safe(suite, keep_lines=True))
    failures = sum(_testcase(testsuite, subject, fail_on, suite) for subject in subjects)
    counts = {"tests": str(len(subjects)), "failures": str(failures), "errors": "0", "skipped": "0", "time": "0"}
    testsuite.attrib.update(counts)
    suites.attrib.update({k: counts[k] for k in ("tests", "failures", "errors", "time")})
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode")


def _testcase(testsuite: ET.Element, subject: Subject, fail_on: str, suite: str) -> int:
    """One subject's testcase: a failure per finding held against it, the others as its output. Returns
    how many failures it has."""
    name = terminal_safe(subject.name, keep_lines=True)
    case = ET.SubElement(
        testsuite, "testcase", name=name, classname=terminal_safe(suite, keep_lines=True), file=name, time="0"
    )
    held = subject.held_against
    failing = held if held is not None else [f for f in subject.findings if fails([f], fail_on)]
    for finding in failing:
        line = _line(finding)
        failure = ET.SubElement(case, "failure", message=line, type=finding.code)
        failure.text = line + (f"\ntensor: {terminal_safe(finding.tensor, keep_lines=True)}" if finding.tensor else "")
    below = [_line(f) for f in subject.findings if f not in failing]
    if below:
        ET.SubElement(case, "system-out").text = "\n".join(below)
    return len(failing)


def _line(finding: Finding) -> str:
    return f"{finding.code} ({finding.severity}): {terminal_safe(finding.message, keep_lines=True)}"
