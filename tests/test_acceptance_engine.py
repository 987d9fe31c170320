"""Every acceptance row, played against the engine level (in memory, virtual clock)."""

from __future__ import annotations

import pytest

from freshcache.acceptance import EngineWorld, play
from tests.table_rows import CASES, WIRE_ONLY


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
@pytest.mark.anyio
async def test_row_passes_on_the_engine(case):
    report = await play(case, EngineWorld())
    if case.id in WIRE_ONLY:
        assert report.skipped, "a wire-only row must say why the engine cannot play it"
        return
    assert report.skipped is None, report.skipped
    assert report.passed, (
        f"{case.where}: expected {report.expected}, got {report.actual}: {report.failures}"
    )


def test_the_engine_skips_only_the_wire_only_rows_and_says_why():
    world = EngineWorld()
    reasons = {c.id: world.unplayable(c) for c in CASES}
    assert {case_id for case_id, why in reasons.items() if why} == WIRE_ONLY
    assert all("engine level" in (reasons[case_id] or "") for case_id in WIRE_ONLY)


def test_the_seed_cases_are_all_there_with_their_ids():
    ids = {c.id for c in CASES}
    assert {f"seed-{n}" for n in range(1, 10)} <= ids


def test_there_are_at_least_forty_cases_each_with_a_source():
    assert len(CASES) >= 40
    assert all(c.row.source.strip() for c in CASES)
