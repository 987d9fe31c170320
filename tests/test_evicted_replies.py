"""A reply the store evicts as soon as it is stored is still handed out, after one
server read: an eviction is not an invalidation (docs/freshness.md: a reply larger
than the store is "handed out ... just not kept"). A real invalidation between the reply and the
caller's wake-up still makes it not current (invariants 1, 8)."""

from __future__ import annotations

import dataclasses

import pytest

from freshcache import FreshCache
from freshcache._core import ReadReply, ResourceUpdated
from freshcache._middleware._store import MemoryStore
from freshcache.acceptance import ReferenceServer
from freshcache.testing import InMemorySource
from tests.test_engine import U, V, make, reply

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class CountingServer(ReferenceServer):
    def __init__(self) -> None:
        super().__init__()
        self.server_reads = 0

    async def read(self, uri, principal=None):  # type: ignore[no-untyped-def]
        self.server_reads += 1
        return await super().read(uri, principal)


async def test_a_reply_larger_than_the_store_is_handed_out_after_one_server_read() -> None:
    server = CountingServer()
    server.set("doc://huge", "x" * 5_000, ttl_ms=60_000)
    store = MemoryStore(max_entries=10_000, max_bytes=1_000)
    async with FreshCache(InMemorySource(server), store=store, read_timeout=1.0) as cache:
        result = await cache.read("doc://huge")
        assert store.entry_count == 0  # not kept
    assert (result.state, server.server_reads) == ("fresh", 1), (
        f"state {result.state} ({result.reason}) after {server.server_reads} server reads"
    )


async def test_a_reply_that_fits_a_batching_store_is_one_server_read() -> None:
    server = CountingServer()
    server.set("doc://small", "s", ttl_ms=60_000)
    server.set("doc://big", "x" * 63_600, ttl_ms=60_000)  # fits max_bytes=64,000 alone
    store = MemoryStore(max_entries=10_000, max_bytes=64_000)
    async with FreshCache(InMemorySource(server), store=store, read_timeout=1.0) as cache:
        await cache.read("doc://small")
        before = server.server_reads
        result = await cache.read("doc://big")
        reads = server.server_reads - before
    assert (result.state, reads) == ("fresh", 1), (
        f"state {result.state} ({result.reason}), {reads} server reads"
    )


async def test_a_context_larger_than_the_store_reads_each_uri_once() -> None:
    # Each reply evicts the other's entry (and record) before its waiter wakes.
    server = CountingServer()
    server.set("doc://a", "a", ttl_ms=60_000)
    server.set("doc://b", "b", ttl_ms=60_000)
    store = MemoryStore(max_entries=1)
    async with FreshCache(InMemorySource(server), store=store, read_timeout=1.0) as cache:
        step = await cache.context(["doc://a", "doc://b"])
    fresh = sorted(result.uri for result in step.fresh)
    assert (fresh, server.server_reads) == (["doc://a", "doc://b"], 2), step.withheld


def test_an_evicted_reply_stays_current_until_an_invalidation_lands() -> None:
    engine, _ = make(store=MemoryStore(max_entries=1))
    ticket = engine.begin_read(U, None)
    assert engine.finish_read(ticket, reply("u")) is not None
    engine.finish_read(engine.begin_read(V, None), reply("v", V))  # evicts U: record goes
    assert engine.tracked_uris == 1
    assert engine.is_current(ticket) is True  # evicted, not invalidated
    engine.handle(ResourceUpdated(U, None))  # a change of U heard of, with no record
    assert engine.is_current(ticket) is False


def test_a_remade_record_after_an_invalidation_is_not_current() -> None:
    engine, _ = make(store=MemoryStore(max_entries=1))
    ticket = engine.begin_read(U, None)
    engine.finish_read(ticket, reply("u"))
    engine.finish_read(engine.begin_read(V, None), reply("v", V))  # evicts U
    engine.handle(ResourceUpdated(V, None))  # an invalidation elsewhere: cannot tell
    later = engine.begin_read(U, None)  # U's record made again, a new generation
    assert later.generation != ticket.generation
    assert engine.is_current(ticket) is False
    assert engine.is_current(later) is True


class ChangeEveryRead(InMemorySource):
    """Every answer carries a change hint about another URI: the change count moves
    between each read and its caller's wake-up."""

    async def read_resource(self, uri, principal):  # type: ignore[no-untyped-def]
        answer = await super().read_resource(uri, principal)
        if isinstance(answer, ReadReply):
            answer = dataclasses.replace(answer, hints=(ResourceUpdated("doc://other", None),))
        return answer


async def test_a_read_whose_record_keeps_going_is_not_a_spin_against_the_server() -> None:
    # Evicted at once, and a change heard of every time: `is_current` cannot prove
    # the reply current, so the caller reads again, but a bounded number of times.
    server = CountingServer()
    server.set("doc://huge", "x" * 5_000, ttl_ms=60_000)
    store = MemoryStore(max_entries=10_000, max_bytes=1_000)
    async with FreshCache(ChangeEveryRead(server), store=store, read_timeout=2.0) as cache:
        result = await cache.read("doc://huge")
        bound = cache.engine.policy.max_rereads + 1
    assert result.state == "awaiting_fresh_source"
    assert result.reason != "timeout"
    assert server.server_reads <= bound, f"{server.server_reads} server reads"
