"""Acceptance rows end to end against the reference server speaking only MCP 2025-11-25.

Every row plays over HTTP (`HttpWorld(revision="2025-11-25")`: sessions, the GET
stream, ``resources/subscribe``) and over stdio (`StdioWorld(revision="2025-11-25")`),
with the row's ``on 2025-11-25`` outcome where DESIGN §6 makes it differ. The rows that
are not played are not generated; the last test pins which they are and that each
says why, so none is dropped silently.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from freshcache.acceptance import (
    Case,
    HttpWorld,
    StdioWorld,
    World,
    is_fleet_row,
    load_cases,
    play,
)
from tests.table_rows import explain

TABLES = Path(__file__).resolve().parents[1] / "acceptance_tables"
CASES = [c for c in load_cases([TABLES]) if not is_fleet_row(c)]  # fleet rows: their own wire
REVISION = "2025-11-25"

pytestmark = [pytest.mark.wire, pytest.mark.anyio]


def skip_reason(case: Case, world: World) -> str | None:
    """Why ``world`` does not play ``case`` on 2025 (the table's or the world's word)."""
    expect, text = case.expect_on(REVISION)
    return text if expect is None else world.unplayable(case)


HTTP = HttpWorld(revision=REVISION)
STDIO = StdioWorld(revision=REVISION)
HTTP_CASES = [c for c in CASES if skip_reason(c, HTTP) is None]
STDIO_CASES = [c for c in CASES if skip_reason(c, STDIO) is None]


@pytest.mark.table_row("http-2025")
@pytest.mark.parametrize("case", HTTP_CASES, ids=[c.id for c in HTTP_CASES])
async def test_row_passes_over_http_against_a_2025_server(case: Case) -> None:
    world = HttpWorld(revision=REVISION)
    report = await play(case, world)
    assert report.skipped is None, report.skipped
    assert report.passed, explain(report, world)
    assert world.settle_timeouts == 0, f"settle gave up waiting on: {world.last_busy}"


@pytest.mark.table_row("stdio-2025")
@pytest.mark.parametrize("case", STDIO_CASES, ids=[c.id for c in STDIO_CASES])
async def test_row_passes_over_stdio_against_a_2025_server(case: Case) -> None:
    world = StdioWorld(revision=REVISION)
    report = await play(case, world)
    assert report.skipped is None, report.skipped
    assert report.passed, explain(report, world)
    assert world.settle_timeouts == 0, f"settle gave up waiting for {world.last_busy}"


NOT_IN_2025 = {
    "hint-unknown-subscription-id": "no subscription id",
    "unknown-subscription-invalidates": "no subscription id",
    "unknown-subscription-other-untouched": "no subscription id",
    "pushed-body-unknown-subscription": "no subscription id",
    "pushed-body-unknown-subscription-rereads": "no subscription id",
    "input-rounds-every-read": "requestState",
    "input-rounds-followed": "requestState",
    "input-rounds-not-cached": "requestState",
    "ttl-as-bool": "no ttlMs",
    "ttl-as-string": "no ttlMs",
    "unsupported-version-renegotiates": "-32022",
    "listen-unsupported-version-relistens": "-32022",
    "inflight-caller-read-overtaken": "no TTL",
    "inflight-notification-same-text": "no TTL",
    "single-flight-three-readers": "no TTL",
    "denied-principal-gets-no-public-copy": "cacheScope",
    "denied-principal-own-read-ends-it": "cacheScope",
    "tool-call-input-required-own-outcome": "round-trip",
}
"""Rows the 2025 wires skip, with a word each reason must contain."""


@pytest.mark.parametrize("world", [HTTP, STDIO], ids=["http-2025", "stdio-2025"])
def test_the_2025_wires_skip_only_rows_whose_subject_2025_lacks_and_say_why(world: World) -> None:
    reasons = {c.id: skip_reason(c, world) for c in CASES}
    skipped = {case_id: why for case_id, why in reasons.items() if why is not None}
    expected = set(NOT_IN_2025)
    if world is STDIO:
        expected.add("silent-after-keepalives")  # no keep-alives on stdio, either revision
        # the stdio world settles on "every request answered", which a held unsubscribe
        # never is; tests/test_one_judge.py plays the rule over stdio
        expected.add("resubscribe-after-late-unsubscribe")
    assert set(skipped) == expected
    for case_id, word in NOT_IN_2025.items():
        assert word in (skipped[case_id] or ""), (case_id, skipped[case_id])
    assert all(c.id.startswith("seed-") is False for c in CASES if c.id in skipped)
