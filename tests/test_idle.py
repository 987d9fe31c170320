"""Quiet at rest: an idle cache sleeps on every source (issue 21).

Four selected URIs fresh, the stream live, then an idle second: the stream driver's
run loop turns a handful of times at most, and so does the whole event loop (every
task that wakes costs it a turn, `tests/idle_support.WakeCounter`). A loop woken
"just in case" turns thousands of times a second instead. Counts, not timings: the
CPU figures are `benchmarks/idle.py`'s.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from freshcache.fleet import Fleet
from tests.idle_support import SOURCES, idle_cache, rest

pytestmark = [pytest.mark.anyio, pytest.mark.wire]

HANDFUL = 5
"""Event-loop turns an idle second may cost (the window's own sleep is one or two)."""


FLEET_TIMINGS = {"lease": 8.0, "selection_ttl": 8.0, "op_timeout": 2.0}
"""Long enough that a loaded machine does not make the one worker lose its lease (the
stream would then be replaced, which is work, not idleness)."""


def fleet_turns(window: float = 1.0) -> int:
    """A fleet worker's store rounds are due by its timings, not by any change: one
    heartbeat (one script: its selection registered, the lease renewed, the holder and
    the registry's version read) every third of the shorter of the lease and the
    selection expiry; its channel waits on the socket. A window holds at most the beats
    whose period fits in it, rounded up; a round trip is a few loop turns (send, wait
    for the answer, read it: five measured), ten allowed."""
    config = Fleet("redis://127.0.0.1:1/0", **FLEET_TIMINGS)
    beats = math.ceil(window / (min(config.lease, config.selection_ttl) / 3))
    return HANDFUL + 10 * beats


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # WakeCounter counts asyncio's selector


@pytest.mark.parametrize("source", SOURCES, ids=SOURCES)
async def test_an_idle_cache_sleeps_through_an_idle_second(source: str, tmp_path: Path) -> None:
    async with idle_cache(source, tmp_path, FLEET_TIMINGS) as cache:
        quiet = await rest(source, cache, 1.0)
    assert quiet.driver_turns <= 1, quiet
    limit = fleet_turns() if source == "fleet" else HANDFUL
    assert quiet.loop_turns <= limit, quiet
