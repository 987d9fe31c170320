"""Every acceptance row, played against the engine level (in memory, virtual clock)."""

from __future__ import annotations

import pytest

from freshcache.acceptance import EngineWorld, play
from tests.table_rows import CASES, check_engine_level_report, check_engine_level_skips


@pytest.mark.table_row("engine")
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
@pytest.mark.anyio
async def test_row_passes_on_the_engine(case):
    report = await play(case, EngineWorld())
    check_engine_level_report(case, report)


def test_the_engine_skips_only_the_wire_only_rows_and_says_why():
    check_engine_level_skips(EngineWorld().unplayable)


def test_the_seed_cases_are_all_there_with_their_ids():
    ids = {c.id for c in CASES}
    assert {f"seed-{n}" for n in range(1, 10)} <= ids


def test_there_are_at_least_forty_cases_each_with_a_source():
    assert len(CASES) >= 40
    assert all(c.row.source.strip() for c in CASES)
