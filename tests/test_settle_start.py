"""`World.settle_start`: the seed situation waits out a cache that is still starting.

Under load a cache's discovery can time out and its first stream come up after one
settle's limit; a row begun then counted the reads the acknowledgment caused as its
own (``hint-on-read-answer`` on http-2025: "server reads 3"). A start stuck any
other way still gives up after one limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from freshcache.acceptance._runner import Setup, World

pytestmark = pytest.mark.anyio


@dataclass
class _Status:
    stream_status: str


class _StartingWorld(World):
    """A world whose stream is ``status``, busy until its ``live_in``-th settle."""

    settle_limit = 0.05

    def __init__(self, status: str, live_in: int) -> None:
        self.view = _Status(status)
        self.live_in = live_in
        self.settles = 0

    async def settle(self) -> None:
        self.settles += 1
        await super().settle()

    def observed(self) -> Any:
        return self.view

    async def start(self, setup: Setup) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        return None

    async def act(self, step: Any) -> None:
        raise NotImplementedError

    async def _look(self) -> str | None:
        if self.settles < self.live_in:
            return "no acknowledged stream for the current selection yet"
        self.view.stream_status = "live"
        return None

    def server_reads(self) -> int:
        return 0


async def test_a_start_still_opening_its_first_stream_is_waited_for_past_one_limit() -> None:
    world = _StartingWorld("opening", live_in=3)  # two settles give up first
    with anyio.fail_after(5):
        await world.settle_start()
    assert world.last_busy is None
    assert world.settle_timeouts == 0
    assert world.settles == 3
    assert world.view.stream_status == "live"


@pytest.mark.parametrize("status", ["lost", "live", "unsupported"])
async def test_a_start_stuck_otherwise_gives_up_after_one_limit(status: str) -> None:
    world = _StartingWorld(status, live_in=10**9)
    await world.settle_start()
    assert world.last_busy is not None
    assert world.settle_timeouts == 1
    assert world.settles == 1  # one limit, as before: not the starting allowance


async def test_a_start_that_never_comes_up_gives_up_after_the_allowance() -> None:
    world = _StartingWorld("idle", live_in=10**9)
    with anyio.fail_after(5):
        await world.settle_start()
    assert world.last_busy is not None
    assert world.settle_timeouts == 1  # one give-up counted, however many looks again
    assert world.settles > 1
