"""The acceptance rows the single-cache tests play, and the ones only a wire can carry."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from freshcache.acceptance import Case, CaseReport, World, is_fleet_row, load_cases

TABLES = Path(__file__).resolve().parents[1] / "acceptance_tables"
CASES = [c for c in load_cases([TABLES]) if not is_fleet_row(c)]
"""Every row but the fleet's (those have their own world: tests/test_fleet_tables.py)."""

WIRE_ONLY = {
    "read-without-contents",
    "ttl-as-string",
    "ttl-as-bool",
    "unsupported-version-renegotiates",
    "listen-unsupported-version-relistens",
    "silent-after-keepalives",
}
"""What only a wire carries (JSON to break, protocol versions, stream bytes): the
engine-level worlds skip these rows and the HTTP and stdio worlds play them."""


CACHE_ONLY = {"context-part-changed-meanwhile", "first-ack-context-before-is-the-ack-read"} | {
    c.id for c in CASES if Path(c.path).name == "14-tool-calls.md"
}
"""What needs a `FreshCache` (its ``context()``, its ``call_tool``: table 14): the
bare-engine world skips these."""


def check_engine_level_report(
    case: Case, report: CaseReport, skipped: frozenset[str] | set[str] = WIRE_ONLY
) -> None:
    """An engine-level world's report on ``case``: a wire-only row is skipped with a
    reason, every other row is played and passes."""
    if case.id in skipped:
        assert report.skipped, "a wire-only row must say why the engine cannot play it"
        return
    assert report.skipped is None, report.skipped
    assert report.passed, (
        f"{case.where}: expected {report.expected}, got {report.actual}: {report.failures}"
    )


def check_engine_level_skips(
    unplayable: Callable[[Case], str | None], also: frozenset[str] | set[str] = frozenset()
) -> None:
    """An engine-level world skips exactly the wire-only rows (and ``also``), each
    saying why."""
    reasons = {c.id: unplayable(c) for c in CASES}
    assert {case_id for case_id, why in reasons.items() if why} == WIRE_ONLY | set(also)
    assert all("engine level" in (reasons[case_id] or "") for case_id in WIRE_ONLY)


def explain(report: CaseReport, world: World | None = None) -> str:
    """A failed row's message: where, what was expected and seen, what its last settle
    that gave up still waited for, and its whole timeline (a row that fails once in many
    loaded runs must be diagnosable from its log)."""
    lines = [f"{report.where}: expected {report.expected}, got {report.actual}: {report.failures}"]
    if report.settle_gave_up:
        waiting = getattr(world, "last_busy", None)
        lines.append(f"  {report.settle_gave_up} settles gave up (last waiting for: {waiting})")
    if report.timeline is not None:
        lines += [f"  {ms:10.1f} ms  {what}" for ms, what in report.timeline.events]
    return "\n".join(lines)
