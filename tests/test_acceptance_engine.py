"""Every acceptance row, played against the engine level (in memory, virtual clock)."""

from __future__ import annotations

from pathlib import Path

import pytest

from freshcache._tables import EngineWorld, load_cases, play

TABLES = Path(__file__).resolve().parents[1] / "acceptance_tables"
CASES = load_cases([TABLES])


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
@pytest.mark.anyio
async def test_row_passes_on_the_engine(case):
    report = await play(case, EngineWorld())
    assert report.skipped is None, report.skipped
    assert report.passed, (
        f"{case.where}: expected {report.expected}, got {report.actual}: {report.failures}"
    )


def test_the_seed_cases_are_all_there_with_their_ids():
    ids = {c.id for c in CASES}
    assert {f"seed-{n}" for n in range(1, 10)} <= ids


def test_there_are_at_least_forty_cases_each_with_a_source():
    assert len(CASES) >= 40
    assert all(c.row.source.strip() for c in CASES)
