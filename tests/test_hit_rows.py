"""The hit path's time rule: which rows read the clock, and that none serves past ttlMs."""

from __future__ import annotations

import pytest

from freshcache import FreshCache, Policy
from freshcache._core import ReadResult, ResourceUpdated
from freshcache.acceptance import InMemorySource, ReferenceServer
from freshcache.sync import SyncFreshCache
from tests.polling import reads_done, until

U = "guide://shipping/approval"

pytestmark = pytest.mark.anyio


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        return self.now


async def test_a_row_within_ttl_is_checked_against_the_clock_at_every_hit():
    server = ReferenceServer()
    server.set(U, "v1", ttl_ms=10_000)
    clock = ManualClock()
    async with FreshCache(InMemorySource(server), listen=False, clock=clock) as cache:
        assert (await cache.read(U)).server_read
        assert (await cache.read(U)).server_read is False
        # No event, no timer: the deadline passing alone makes the next read go out.
        # The loop never ran between these lines, as if a task had blocked it.
        clock.now += 10.0
        late = await cache.read(U)
        assert late.state == "fresh" and late.server_read
        assert server.reads == 2
        clock.now += 9.999
        assert (await cache.read(U)).server_read is False


async def test_a_subscription_backed_row_reads_no_clock_and_an_event_removes_it():
    server = ReferenceServer()
    server.set(U, "v1", ttl_ms=1)
    clock = ManualClock()
    policy = Policy(subscription_backed=True)
    async with FreshCache(InMemorySource(server), select=[U], policy=policy, clock=clock) as cache:
        await until(lambda: cache.status(U).state == "fresh" and reads_done(cache))
        assert isinstance(cache.engine.hits[U], ReadResult)  # no time bound in the row
        calls = clock.calls
        for _ in range(3):
            assert (await cache.read(U)).server_read is False
        assert clock.calls == calls
        # An invalidation removes the row before `handle` returns.
        cache.engine.handle(ResourceUpdated(U, None))
        assert U not in cache.engine.hits
        assert cache.status(U).state != "fresh"


async def test_a_covered_row_with_ttl_keeps_its_time_bound_without_the_opt_in():
    server = ReferenceServer()
    server.set(U, "v1", ttl_ms=60_000)
    async with FreshCache(InMemorySource(server), select=[U]) as cache:
        await until(lambda: cache.status(U).state == "fresh" and reads_done(cache))
        row = cache.engine.hits[U]
        # Not the bare result: a row with a deadline, compared with the clock at each hit.
        assert not isinstance(row, ReadResult)
        assert row.expires_at < float("inf") and row.value is cache.status(U)


async def test_read_options_still_work_by_keyword():
    server = ReferenceServer()
    server.set(U, "v1", ttl_ms=60_000)
    async with FreshCache(InMemorySource(server), listen=False) as cache:
        assert (await cache.read(U, timeout=1.0)).state == "fresh"
        assert (await cache.read(U, principal="alice")).server_read
        assert (await cache.read(U, principal="alice", timeout=1.0)).server_read is False


def test_sync_status_of_a_fresh_uri_is_answered_in_the_calling_thread(monkeypatch):
    server = ReferenceServer()
    server.set(U, "v1", ttl_ms=60_000)
    with SyncFreshCache(InMemorySource(server), listen=False) as cache:
        assert cache.read(U).state == "fresh"
        crossed: list[object] = []
        call = cache._call
        monkeypatch.setattr(cache, "_call", lambda f: crossed.append(f) or call(f))
        assert cache.status(U).state == "fresh"
        assert crossed == []
        assert cache.status("guide://other").state == "awaiting_fresh_source"
        assert len(crossed) == 1
