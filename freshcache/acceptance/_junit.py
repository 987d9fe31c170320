"""``freshcache acceptance --junit PATH``: the run as JUnit XML, the shape CI systems read.

One ``<testsuite>`` per wire, one ``<testcase>`` per case (``classname`` is the wire
and the table file, ``name`` the case id, ``file``/``line`` where the row is). A failed
case carries ``<failure message=...>`` with expected, actual and every failure; a case
the wire cannot play, and a row known failing, carry ``<skipped message=...>``; the
timeline goes in ``<system-out>``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from ._runner import CaseReport


def timeline_lines(report: CaseReport) -> list[str]:
    """The case's timeline as lines: ``+12.3 ms  heard resources/updated selected``."""
    if report.timeline is None:
        return []
    return [f"{ms:+9.1f} ms  {what}" for ms, what in report.timeline.events]


def junit_xml(results: Sequence[tuple[str, CaseReport]], seconds: float) -> ET.ElementTree:
    """The JUnit document for ``results`` (wire, report) in the order played."""
    root = ET.Element("testsuites", name="freshcache acceptance")
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    for wire in dict.fromkeys(w for w, _ in results):
        mine = [r for w, r in results if w == wire]
        suite = ET.SubElement(root, "testsuite", name=wire)
        counts = {"tests": len(mine), "failures": 0, "skipped": 0}
        for report in mine:
            path, _, line = report.where.rpartition(":")
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"{wire}.{Path(path).stem}",
                name=report.id,
                file=path,
                line=line,
                time=f"{report.seconds:.4f}",
            )
            if report.skipped is not None:
                counts["skipped"] += 1
                ET.SubElement(
                    case, "skipped", message=f"cannot be played on {wire}: {report.skipped}"
                )
            elif report.not_played is not None:
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=f"not played: {report.not_played}")
            elif report.known_failure is not None:
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=f"known failing: {report.known_failure}")
            elif not report.passed:
                counts["failures"] += 1
                failure = ET.SubElement(
                    case, "failure", message="; ".join(report.failures), type="AssertionError"
                )
                failure.text = "\n".join(
                    [
                        f"{report.where}",
                        f"expected: {report.expected}",
                        f"actual:   {report.actual}",
                        *report.failures,
                    ]
                )
            if report.settle_gave_up:
                properties = ET.SubElement(case, "properties")
                ET.SubElement(
                    properties, "property", name="settle_gave_up", value=str(report.settle_gave_up)
                )
            lines = timeline_lines(report)
            if lines:
                ET.SubElement(case, "system-out").text = "\n".join(lines)
        suite_seconds = sum(r.seconds for r in mine)
        suite.attrib.update({k: str(v) for k, v in counts.items()})
        suite.set("errors", "0")
        suite.set("time", f"{suite_seconds:.3f}")
        for key in totals:
            totals[key] += counts[key]
    root.attrib.update({k: str(v) for k, v in totals.items()})
    root.set("errors", "0")
    root.set("time", f"{seconds:.3f}")
    tree = ET.ElementTree(root)
    ET.indent(tree)
    return tree


def write_junit(path: Path, results: Sequence[tuple[str, CaseReport]], seconds: float) -> None:
    """Write the JUnit report to ``path`` (UTF-8, with an XML declaration)."""
    junit_xml(results, seconds).write(path, encoding="utf-8", xml_declaration=True)
