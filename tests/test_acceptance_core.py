"""Every acceptance row, played on the bare engine: `FreshnessEngine` and
`ListenSupervisor` driven synchronously with virtual clocks, no event loop (DESIGN §3's
engine level; `tests/test_acceptance_engine.py` plays the same rows on `FreshCache`)."""

from __future__ import annotations

import pytest

from freshcache.acceptance._core_world import CoreWorld, play_core
from freshcache.acceptance._runner import Setup
from freshcache.acceptance._steps import ServerChange
from tests.table_rows import (
    CACHE_ONLY,
    CASES,
    WIRE_ONLY,
    check_engine_level_report,
    check_engine_level_skips,
)


@pytest.mark.table_row("core")
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_row_passes_on_the_bare_engine(case):
    report = play_core(case)
    check_engine_level_report(case, report, WIRE_ONLY | CACHE_ONLY)


def test_the_bare_engine_skips_only_the_wire_only_rows_and_says_why():
    check_engine_level_skips(CoreWorld().unplayable, also=CACHE_ONLY)


def test_the_bare_engine_world_runs_no_event_loop_and_never_sleeps(monkeypatch):
    import time

    import anyio

    def forbidden(*args, **kwargs):
        raise AssertionError("the bare-engine world must not sleep or run a loop")

    for module, name in ((time, "sleep"), (anyio, "run"), (anyio, "sleep")):
        monkeypatch.setattr(module, name, forbidden)
    reports = [play_core(case) for case in CASES]
    assert all(r.passed for r in reports), [r.id for r in reports if not r.passed]


def test_a_dropped_stream_is_live_again_after_one_settle_the_backoff_skipped():
    world = CoreWorld()
    world.start(Setup())
    assert (world.stream_status, world.supervisor.attempts, world.stream_clock) == ("live", 1, 0.0)
    world.act(ServerChange("drop_stream"))
    world.settle()
    assert (world.stream_status, world.supervisor.attempts) == ("live", 2)
    assert world.stream_clock > 0.0  # moved to the retry time, not waited for
    world.stop()
