"""Two suspected fleet paths to old text, each driven deterministically on a real Valkey.

1. The store comes back with the listener's last ``live`` announcement still in it (its
   ``down`` could not be written while the store was away): a follower must not be
   acknowledged against that announcement, nor serve the shared entry read before it.
2. A ``lost`` notice sent between a follower stream's `ListenStarted` and its
   registration must still end that stream: it is never acknowledged while the
   channel cannot vouch for the worker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import anyio
import pytest

from freshcache import FRESH, FreshCache
from freshcache._core import ListenAcknowledged, ListenStarted, StreamLost
from freshcache._middleware._setup import FLEET_BACKOFF
from freshcache.acceptance import InMemorySource, ReferenceServer
from freshcache.acceptance._store_proxy import StoreRelay
from freshcache.fleet import Fleet
from tests.polling import until as eventually
from tests.valkey_support import Valkey

pytestmark = pytest.mark.anyio

URI = "doc://a"
LEASE = 6.0
"""Long enough that the old lease (and its announcement) outlives the outage by seconds."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py's client is asyncio only


async def _hold(cache: FreshCache, entered: anyio.Event, stop: anyio.Event) -> None:
    async with cache:
        entered.set()
        await stop.wait()


@asynccontextmanager
async def relayed_workers(
    server: ReferenceServer, valkey: Valkey, n: int, lease: float
) -> AsyncIterator[tuple[list[FreshCache], list[StoreRelay]]]:
    """``n`` workers, each reaching the store through a relay of its own (cut together:
    the store goes away with its keys kept)."""
    caches: list[FreshCache] = []
    stop = anyio.Event()
    async with AsyncExitStack() as stack:
        relays = [
            await stack.enter_async_context(StoreRelay("127.0.0.1", valkey.port)) for _ in range(n)
        ]
        async with anyio.create_task_group() as tg:
            for relay in relays:
                fleet = Fleet(
                    f"redis://127.0.0.1:{relay.port}/0",
                    namespace="suspects",
                    lease=lease,
                    op_timeout=0.5,
                    selection_ttl=3.0,
                )
                cache = FreshCache(
                    InMemorySource(server),
                    select=[URI],
                    fleet=fleet,
                    read_timeout=2.0,
                    backoff=FLEET_BACKOFF,
                )
                entered = anyio.Event()
                tg.start_soon(_hold, cache, entered, stop)
                await entered.wait()
                caches.append(cache)
                await eventually(lambda c=cache: c.stream_status == "live")  # type: ignore[misc]
            try:
                yield caches, relays
            finally:
                for relay in relays:
                    relay.resume()
                stop.set()


def _fleet(cache: FreshCache):  # type: ignore[no-untyped-def]
    fleet = cache._fleet
    assert fleet is not None
    return fleet


async def test_a_live_announcement_left_from_before_the_outage_acknowledges_nobody(
    valkey: Valkey,
) -> None:
    from redis.asyncio import Redis

    server = ReferenceServer()
    server.set(URI, "v1", ttl_ms=60_000)
    async with relayed_workers(server, valkey, 2, LEASE) as (caches, relays):
        listener, follower = caches
        assert _fleet(listener).leading is not None
        for cache in caches:
            assert (await cache.read(URI)).text == "v1"  # the shared entry holds v1
        for relay in relays:
            await relay.sever()
        await eventually(lambda: not any(_fleet(c).usable for c in caches))
        # The listener hears the change but cannot publish it: it stops listening.
        server.set(URI, "v2", notify=True, ttl_ms=60_000)
        await eventually(lambda: _fleet(listener).leading is None)
        for relay in relays:
            relay.resume()
        await eventually(lambda: all(_fleet(c).usable for c in caches))
        admin = Redis.from_url(valkey.url, decode_responses=True)
        shared = _fleet(follower).shared
        try:
            # The old lease and its "live" announcement may still be in the store (the
            # listener keeps trying its fence and its "down": it may have landed by now).
            for cache in (follower, listener):
                with anyio.move_on_after(1.5):
                    # Acknowledged against the old announcement, a worker would
                    # serve the v1 entry read before the outage as fresh.
                    # (the window is move_on_after's: the wait itself outlasts it)
                    await eventually(lambda c=cache: c.stream_status == "live", 60.0)  # type: ignore[misc]
                result = await cache.read(URI, timeout=1.0)
                assert not (result.state == FRESH and result.text == "v1"), cache.describe()
                assert result.text in (None, "v2")
            if await admin.pttl(shared.lease_key) <= 0:
                pytest.skip("the machine was too slow: the old lease ran out before the reads")
        finally:
            await admin.aclose()
        # Once the old lease runs out, a new listener covers the fleet again.
        await eventually(lambda: all(c.stream_status == "live" for c in caches), 3 * LEASE)
        for cache in caches:
            assert (await cache.read(URI)).text == "v2"


async def test_a_lost_notice_before_a_follower_registers_still_ends_its_stream(
    valkey: Valkey,
) -> None:
    from tests.test_fleet import a_follower

    async with a_follower(valkey, lease=2.0) as (follower, fleet):
        stream = fleet.followers.follow("extra", frozenset({URI}), False)
        try:
            with anyio.fail_after(10):
                assert isinstance(await anext(stream), ListenStarted)
                # The channel fails closed (a sequence gap, the store still answering)
                # in the gap between the stream's start and its registration.
                fleet.channel.fail_closed("missed fleet messages (test)")
                event = await anext(stream)
            assert not isinstance(event, ListenAcknowledged), "acknowledged while unvouched"
            assert isinstance(event, StreamLost)
        finally:
            await stream.aclose()
        await eventually(lambda: follower.stream_status == "live")


async def test_a_follower_with_a_full_notice_buffer_does_not_keep_a_lost_from_the_others(
    valkey: Valkey,
) -> None:
    from tests.test_fleet import a_follower

    async with a_follower(valkey, lease=2.0) as (follower, fleet):
        holder = fleet.lease.leader
        stuck = fleet.followers.follow("stuck", frozenset({URI}), False)
        reading = fleet.followers.follow("reading", frozenset({URI}), False)
        try:
            with anyio.fail_after(10):
                assert isinstance(await anext(stuck), ListenStarted)
                assert isinstance(await anext(stuck), ListenAcknowledged)
                for _ in range(1000):  # nobody reads "stuck": its buffer fills
                    fleet.followers.notify("tick", holder)
                assert isinstance(await anext(reading), ListenStarted)
                assert isinstance(await anext(reading), ListenAcknowledged)
                fleet.followers.notify("lost", "the store did not answer (test)")  # no raise
                event = await anext(reading)
                assert isinstance(event, StreamLost)
                assert event.detail == "the store did not answer (test)"
                # The stuck one missed the "lost": it ends as soon as it reads again.
                event = await anext(stuck)
                assert isinstance(event, StreamLost)
        finally:
            await stuck.aclose()
            await reading.aclose()
        await eventually(lambda: follower.stream_status == "live")
