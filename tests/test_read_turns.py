"""Turns of the event loop a cold miss takes before its read is sent (issue 38, item 2).

A read over a transport that waits on something (a socket, a pipe: here a future) runs
in a task of its own (`ReadFlights.launch_now`: it must be able to outlive its caller).
The task starts after everything already queued on the loop, which is its one turn;
nothing else is waited for before the read is sent.
"""

from __future__ import annotations

import asyncio

from freshcache import FreshCache, Partition, ReadReply, RequestFailed
from freshcache.testing import InMemorySource, ReferenceServer

URI = "doc://turns/a"


class _Ticker:
    """Counts turns of the asyncio loop: a callback that schedules itself again."""

    def __init__(self) -> None:
        self.turns = 0
        self._loop = asyncio.get_running_loop()
        self._running = True
        self._loop.call_soon(self._tick)

    def _tick(self) -> None:
        self.turns += 1
        if self._running:
            self._loop.call_soon(self._tick)

    def stop(self) -> None:
        self._running = False


class _WaitingSource(InMemorySource):
    """Reads as a real transport does: waiting on a future another callback resolves."""

    ticker: _Ticker | None = None
    sent_at: list[int]

    async def read_resource(self, uri: str, principal: Partition) -> ReadReply | RequestFailed:
        if self.ticker is not None:
            self.sent_at.append(self.ticker.turns)
        answered = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(answered.set_result, None)
        await answered
        return await super().read_resource(uri, principal)


def test_a_cold_miss_over_a_waiting_transport_is_sent_after_one_turn():
    async def main() -> tuple[int, str]:
        server = ReferenceServer()
        for n in range(3):
            server.set(f"{URI}{n}", f"text {n}", ttl_ms=3_600_000)
        source = _WaitingSource(server)
        source.sent_at = []
        async with FreshCache(source, listen=False) as cache:
            await cache.read(f"{URI}0")  # the first read: the cache learns how it waits
            ticker = source.ticker = _Ticker()
            await asyncio.sleep(0)  # (the ticker runs)
            asked_at = ticker.turns
            result = await cache.read(f"{URI}1")
            ticker.stop()
        return source.sent_at[0] - asked_at, result.state

    turns, state = asyncio.run(main())
    assert state == "fresh"
    assert turns <= 1
