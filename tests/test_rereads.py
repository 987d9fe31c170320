"""Background re-reads: carried out by a few re-reader tasks, none lost to a give-up."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from freshcache import FreshCache, Policy
from freshcache._core import ReadReply, RequestFailed
from freshcache.acceptance import InMemorySource, ReferenceServer
from tests.polling import reads_done, until

U = "guide://shipping/approval"

pytestmark = pytest.mark.anyio


async def test_a_change_that_overtakes_a_re_reads_last_attempt_is_still_read():
    # One attempt per flight: the change heard while it flies makes it give up; the
    # re-read that change asked for must follow, or the URI would stay unread.
    server = ReferenceServer()
    server.set(U, "v1", ttl_ms=60_000)
    policy = Policy(max_rereads=1)
    async with FreshCache(InMemorySource(server), select=[U], policy=policy) as cache:
        await until(lambda: cache.status(U).state == "fresh" and reads_done(cache))
        server.hold_reads()
        server.set(U, "v2", notify=True)
        await until(lambda: server.reads_in_flight == 1)
        notified = cache.engine.counters.notifications
        server.set(U, "v3", notify=True)
        await until(lambda: cache.engine.counters.notifications > notified)
        server.release_reads()
        await until(lambda: cache.status(U).text == "v3")


async def test_a_burst_of_re_reads_runs_on_at_most_the_cap_of_tasks_and_sleeps_after():
    server = ReferenceServer()
    uris = [f"guide://burst/{n}" for n in range(200)]
    for uri in uris:
        server.set(uri, "v1", ttl_ms=60_000)
    async with FreshCache(InMemorySource(server), select=uris, max_concurrent_reads=4) as cache:
        await until(lambda: all(cache.status(u).state == "fresh" for u in uris))
        await until(lambda: reads_done(cache))
        flights = cache._flights
        peak = 0
        for uri in uris:
            server.set(uri, "v2", notify=True)
        with anyio.fail_after(10):
            while any(cache.status(u).text != "v2" for u in uris):
                peak = max(peak, len(flights))
                assert flights._background_running <= 4
                await anyio.sleep(0.001)
        assert 1 <= peak <= 4
        reads = server.reads
        await anyio.wait_all_tasks_blocked()  # at rest: the re-readers sleep
        assert server.reads == reads
        assert flights._background_running == len(flights._idle) <= 4


async def test_re_reads_still_run_when_a_tracer_shows_up_while_re_readers_sleep():
    server = ReferenceServer()
    server.set(U, "v1", ttl_ms=60_000)
    async with FreshCache(InMemorySource(server), select=[U], max_concurrent_reads=1) as cache:
        await until(lambda: cache.status(U).text == "v1" and reads_done(cache))
        server.set(U, "v2", notify=True)
        await until(lambda: cache.status(U).text == "v2")
        await anyio.wait_all_tasks_blocked()
        assert len(cache._flights._idle) == 1  # the one re-reader sleeps, holding the cap
        cache.telemetry._live = True  # as when an SDK provider is installed later
        server.set(U, "v3", notify=True)
        await until(lambda: cache.status(U).text == "v3")


class AnswersAtOnce(InMemorySource):
    """A source whose reads answer without yielding to the event loop (a loader
    serving from memory): only the re-readers' own turns remain."""

    async def read_resource(self, uri: str, principal: str | None) -> ReadReply | RequestFailed:
        return await self.server.read(uri, principal)


async def test_a_burst_of_re_reads_takes_one_loop_turn_per_batch_not_per_read():
    server = ReferenceServer()
    uris = [f"guide://batch/{n}" for n in range(256)]
    for uri in uris:
        server.set(uri, "v1", ttl_ms=60_000)
    source = AnswersAtOnce(server)
    async with FreshCache(source, select=uris, max_concurrent_reads=1) as cache:
        await until(lambda: all(cache.status(u).state == "fresh" for u in uris))
        await until(lambda: reads_done(cache))
        reads = server.reads
        for uri in uris:
            server.set(uri, "v2", notify=True)
        turns = 0
        with anyio.fail_after(10):
            while any(cache.status(u).text != "v2" for u in uris):
                await asyncio.sleep(0)  # one per turn of the loop
                turns += 1
        assert server.reads == reads + len(uris)  # one read each, none lost
        # A turn per read would be 256; a turn per batch of queued re-reads is a few.
        assert turns <= len(uris) // 16
