"""Acceptance rows end to end over stdio subprocesses.

Every row plays against the project's own fault-injecting stdio server (`StdioWorld`);
the seed rows also play against the official-SDK fixture served over stdio
(`SdkStdioWorld`, steered through its MCP tools). ``FRESHCACHE_SDK_ALL_ROWS=1`` plays
every row against the SDK server too (about 80 s).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from freshcache.acceptance import Case, StdioWorld, is_fleet_row, load_cases, play
from tests.table_rows import explain

from .sdk_stdio_world import SdkStdioWorld

TABLES = Path(__file__).resolve().parents[1] / "acceptance_tables"
CASES = [c for c in load_cases([TABLES]) if not is_fleet_row(c)]
SEEDS = [c for c in CASES if c.id.startswith("seed-")]
SDK_CASES = CASES if os.environ.get("FRESHCACHE_SDK_ALL_ROWS") else SEEDS

pytestmark = [pytest.mark.wire, pytest.mark.anyio]


# stdio has no keep-alives: the silent-stream rule is HTTP's (the HTTP world plays it).
STDIO_UNPLAYABLE = {
    "silent-after-keepalives": "keep-alive",
    # one authorization context per process: another principal cannot be denied
    "denied-principal-gets-no-public-copy": "authorization context",
    "denied-principal-own-read-ends-it": "authorization context",
}
STDIO_CASES = [c for c in CASES if c.id not in STDIO_UNPLAYABLE]


@pytest.mark.table_row("stdio")
@pytest.mark.parametrize("case", STDIO_CASES, ids=[c.id for c in STDIO_CASES])
async def test_row_passes_over_stdio(case: Case) -> None:
    world = StdioWorld()
    report = await play(case, world)
    assert report.skipped is None, report.skipped
    assert report.passed, explain(report, world)
    assert world.settle_timeouts == 0, f"settle gave up waiting for {world.last_busy}"


@pytest.mark.parametrize("case", SDK_CASES, ids=[c.id for c in SDK_CASES])
async def test_row_passes_over_stdio_against_the_official_sdk_server(case: Case) -> None:
    world = SdkStdioWorld()
    report = await play(case, world)
    assert report.skipped is None, report.skipped
    assert report.passed, explain(report, world)
    assert world.settle_timeouts == 0, f"settle gave up waiting for {world.last_busy}"


def test_every_seed_row_is_played_against_the_official_sdk_server() -> None:
    assert {c.id for c in SEEDS} >= {f"seed-{n}" for n in range(1, 10)}
    assert all(SdkStdioWorld().unplayable(c) is None for c in SEEDS)
    unplayable = {c.id: StdioWorld().unplayable(c) for c in CASES}
    assert {case_id for case_id, why in unplayable.items() if why} == set(STDIO_UNPLAYABLE)
    assert all(word in (unplayable[case_id] or "") for case_id, word in STDIO_UNPLAYABLE.items())
