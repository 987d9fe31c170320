"""A follower re-reads lazily (issue 36 item 4): a change heard on the fleet channel
makes its copy not fresh at once, and costs it no store or server read until the URI is
read; that read returns the newest text (from the store the listener filled).

On a real Valkey (tests/valkey_support.py), with the workers of tests/test_fleet.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from freshcache import AWAITING_FRESH_SOURCE, FRESH, FreshCache
from tests.polling import reads_done
from tests.polling import until as eventually
from tests.test_fleet import Counting, leader, workers
from tests.valkey_support import Valkey

pytestmark = pytest.mark.anyio

URI = "doc://a"
CHANGES = 5


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py's client is asyncio only


def fleet(cache: FreshCache) -> Any:
    return cache._fleet


def store_and_server_reads(cache: FreshCache) -> int:
    """Every read this worker made through the fleet: answered by the store, sent to
    the server (to fill the store or directly), or waiting for another's fill."""
    c = fleet(cache).counters
    return int(c.store_replies + c.server_reads + c.fill_waits + c.direct_reads)


async def test_a_follower_reads_a_change_it_heard_only_when_it_is_read(valkey: Valkey) -> None:
    server = Counting()
    server.set(URI, "v1", ttl_ms=60_000)
    async with workers(server, valkey.url, 3, namespace="lazy") as caches:
        await eventually(lambda: all(c.status(URI).text == "v1" for c in caches))
        lead = leader(caches)
        followers = [c for c in caches if c is not lead]
        await eventually(lambda: all(reads_done(c) for c in caches))
        before = {id(c): store_and_server_reads(c) for c in followers}
        published = fleet(lead).counters.published
        for n in range(2, 2 + CHANGES):
            server.set(URI, f"v{n}", notify=True, ttl_ms=60_000)
            # One change at a time: the listener re-reads each one for the fleet.
            await eventually(lambda n=n: lead.status(URI).text == f"v{n}")  # type: ignore[misc]
        # The listener published each change before its engine took it in.
        assert fleet(lead).counters.published - published >= CHANGES
        seq = int(await fleet(lead).redis.get(fleet(lead).shared.seq_key) or 0)
        # Every follower took in every message, and any read it decided has landed.
        await eventually(
            lambda: all(fleet(c).channel.seq >= seq and reads_done(c) for c in followers)
        )
        settled = server.server_reads
        for cache in followers:
            # N changes heard, not one store or server read for them...
            assert store_and_server_reads(cache) == before[id(cache)]
            assert fleet(cache).counters.remote_invalidations >= CHANGES
            status = cache.status(URI)
            assert (status.state, status.reason, status.text) == (
                AWAITING_FRESH_SOURCE,
                "invalidated",
                None,
            )
        for cache in followers:
            # ...and the next read returns the newest text, from the listener's fill.
            got = await cache.read(URI)
            assert (got.state, got.text) == (FRESH, f"v{1 + CHANGES}")
            assert store_and_server_reads(cache) == before[id(cache)] + 1
            assert fleet(cache).counters.store_replies >= 1
        assert server.server_reads == settled  # the followers read no server
