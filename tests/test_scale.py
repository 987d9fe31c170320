"""Costs that must stay flat (DESIGN §6) and bounded bookkeeping (invariant 10).

These count work (server reads, reads in flight, records held), never time: timing
lives in ``benchmarks/scale.py``.
"""

from __future__ import annotations

import threading

import anyio
import pytest

from freshcache import BackoffSettings, FreshCache, MemoryStore
from freshcache._core._heard import MAX_REMEMBERED, ChangesHeard
from freshcache.acceptance import InMemorySource, ReferenceServer
from freshcache.sync import SyncFreshCache
from tests.polling import until

FAST = BackoffSettings(base=0.005, cap=0.02, quick_death=0.0)

pytestmark = pytest.mark.anyio


def uris(n: int, prefix: str = "guide://scale/") -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def reference(selected: list[str]) -> ReferenceServer:
    server = ReferenceServer()
    for uri in selected:
        server.set(uri, f"{uri} v1")
    return server


async def test_entering_reads_each_selected_uri_once():
    selected = uris(200)
    server = reference(selected)
    async with FreshCache(InMemorySource(server), select=selected, backoff=FAST) as cache:
        await until(lambda: all(cache.status(u).state == "fresh" for u in selected))
        assert server.reads == len(selected)
        assert sorted(server.read_log) == sorted(selected)


async def test_adding_one_uri_to_a_live_selection_costs_one_read():
    selected = uris(300)
    server = reference([*selected, "guide://scale/new"])
    async with FreshCache(InMemorySource(server), select=selected, backoff=FAST) as cache:
        await until(lambda: all(cache.status(u).state == "fresh" for u in selected))
        before = server.reads
        cache.select([*selected, "guide://scale/new"])
        await until(
            lambda: (
                cache.status("guide://scale/new").state == "fresh" and len(server.subscribers) == 1
            )
        )
        assert server.reads - before == 1
        assert all(cache.status(u).state == "fresh" for u in selected)


async def test_rereads_after_a_reconnect_are_capped_and_the_callers_read_goes_first():
    selected = uris(40)
    server = reference(selected)
    async with FreshCache(
        InMemorySource(server), select=selected, backoff=FAST, max_concurrent_reads=4
    ) as cache:
        await until(lambda: all(cache.status(u).state == "fresh" for u in selected))
        server.hold_reads()
        server.drop_streams()
        await until(lambda: server.reads_in_flight == 4)
        for _ in range(50):  # the queue does not overflow its cap while reads are held
            await anyio.lowlevel.checkpoint()
        assert server.reads_in_flight == 4
        assert cache.pending_reads == 4
        # The agent's own read of a queued URI is sent at once, past the cap.
        last = next(u for u in reversed(selected) if cache.status(u).state != "fresh")
        async with anyio.create_task_group() as tg:
            tg.start_soon(cache.read, last)
            await until(lambda: server.reads_in_flight == 5)
            assert server.read_log[-1] == last
            server.release_reads()
        await until(lambda: all(cache.status(u).state == "fresh" for u in selected))
        assert server.reads == 2 * len(selected)


async def test_per_uri_records_are_dropped_when_nothing_depends_on_them():
    server = ReferenceServer()
    readable = uris(2_000, "guide://many/")
    for uri in readable:
        server.set(uri, "x")
    store = MemoryStore(max_entries=20, max_bytes=1 << 20)
    async with FreshCache(InMemorySource(server), store=store, listen=False) as cache:
        for uri in readable:
            assert (await cache.read(uri)).state == "fresh"
        assert cache.store.entry_count <= 20
        assert cache.engine.tracked_uris <= 20
    async with FreshCache(InMemorySource(reference(["guide://scale/0"])), backoff=FAST) as cache:
        cache.select(["guide://scale/0"])
        await until(lambda: cache.stream_status == "live")
        for uri in uris(2_000, "guide://never-read/"):
            server_side = cache.source
            assert isinstance(server_side, InMemorySource)
            server_side.server.notify_updated(uri, raw=True)
        await until(lambda: cache.engine.counters.notifications >= 2_000)
        assert cache.engine.tracked_uris == 1


async def test_an_evicted_uri_read_again_never_lands_an_older_reply_as_fresh():
    """Generations never restart: a record dropped and made again gets a new one."""
    server = reference(["guide://a", "guide://b"])
    store = MemoryStore(max_entries=1, max_bytes=1 << 20)
    async with FreshCache(InMemorySource(server), store=store, listen=False) as cache:
        engine = cache.engine
        old = engine.begin_read("guide://a", None)
        engine.abandon_read(old)
        assert engine.tracked_uris == 0
        await cache.read("guide://a")
        await cache.read("guide://b")  # evicts a: its record goes
        assert engine.tracked_uris == 1
        # Evicted, not invalidated: `is_current` cannot tell and nothing changed, but
        # the reply itself is judged against the new record's generation.
        assert engine.is_current(old) is True
        from freshcache import ReadReply
        from freshcache._core import ResourceContents

        landed = engine.finish_read(old, ReadReply((ResourceContents("guide://a", text="old"),)))
        assert landed is None
        assert engine.lookup("guide://a", None) is None


async def test_a_private_principal_hit_uses_its_own_table():
    server = reference(["guide://p"])
    async with FreshCache(InMemorySource(server), listen=False) as cache:
        first = await cache.read("guide://p", principal="alice")
        assert first.server_read is True
        assert "guide://p" in cache.engine.hits_for("alice")
        assert "guide://p" not in cache.engine.hits
        again = await cache.read("guide://p", principal="alice")
        assert (again.state, again.server_read) == ("fresh", False)
        assert server.reads == 1
        assert (await cache.read("guide://p", principal="bob")).server_read is True


def test_a_sync_fresh_hit_is_answered_in_the_calling_thread():
    server = reference(["guide://s"])
    with SyncFreshCache(InMemorySource(server), listen=False) as cache:
        assert cache.read("guide://s").server_read is True
        crossings: list[str] = []
        real_call = cache._portal.call

        def counting_call(*args, **kwargs):
            crossings.append(threading.current_thread().name)
            return real_call(*args, **kwargs)

        cache._portal.call = counting_call  # type: ignore[method-assign]
        for _ in range(100):
            assert cache.read("guide://s").state == "fresh"
        assert crossings == []
        assert cache.read("guide://missing").state == "not_found"  # a miss crosses
        assert len(crossings) == 1


def test_changes_heard_are_remembered_within_a_bound_and_then_fail_closed():
    heard = ChangesHeard()
    for i in range(MAX_REMEMBERED + 500):
        heard.note(f"guide://changed/{i}")
    assert heard.remembered <= MAX_REMEMBERED
    # Past the bound every URI counts as changed: unknown-origin answers prove nothing.
    assert heard.changed("guide://changed/1")
    assert heard.changed("guide://never-changed")
    heard.proved("guide://never-changed", heard.count)
    assert not heard.changed("guide://never-changed")
