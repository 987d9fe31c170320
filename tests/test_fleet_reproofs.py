"""A follower's change feed carries the leader's cause (docs/fleet.md, invariant 18).

The listener's acknowledgment of a new stream and the loss of a stream only re-prove
what was read before them: nothing is known to have changed (`StateChange.reproof`).
Its followers hear both as channel messages; they must report them with the same
cause as the listener, not as a change heard (a proxy replica following the fleet
would tell its hosts "updated" for nothing).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from freshcache import FRESH, ChangesDropped, FreshCache, StateChange
from freshcache.acceptance import ReferenceServer
from tests.polling import until as eventually
from tests.test_fleet import URI, leader, workers
from tests.valkey_support import Valkey

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py's client is asyncio only


async def _collect(cache: FreshCache, into: list[Any], ready: anyio.Event) -> None:
    async with cache.changes() as feed:
        ready.set()
        async for change in feed:
            into.append(change)


async def test_a_lost_and_reacknowledged_stream_is_no_change_on_a_follower(
    valkey: Valkey,
) -> None:
    server = ReferenceServer()
    server.set(URI, "v1", ttl_ms=60_000)
    async with workers(server, valkey.url, 2, lease=4.0) as caches:
        await eventually(lambda: all(c.status(URI).state == FRESH for c in caches))
        lead = leader(caches)
        follower = next(c for c in caches if c is not lead)
        feeds: dict[str, list[Any]] = {"leader": [], "follower": []}
        async with anyio.create_task_group() as tg:
            for name, cache in (("leader", lead), ("follower", follower)):
                ready = anyio.Event()
                tg.start_soon(_collect, cache, feeds[name], ready)
                await ready.wait()
            acks = lead.engine.counters.acknowledgments
            server.drop_streams()  # the listener's stream breaks; nothing changed
            await eventually(lambda: lead.engine.counters.acknowledgments > acks, 10)
            await eventually(lambda: all(c.stream_status == "live" for c in caches), 10)
            await eventually(
                lambda: all(
                    c.status(URI).state == FRESH and c.status(URI).text == "v1" for c in caches
                ),
                10,
            )
            tg.cancel_scope.cancel()
        for name, feed in feeds.items():
            assert not any(isinstance(c, ChangesDropped) for c in feed), name
            moves = [c for c in feed if isinstance(c, StateChange) and c.uri == URI]
            assert any(c.cause is not None for c in moves), (name, moves)  # it did move
            heard = [c for c in moves if c.cause is not None and not c.reproof]
            assert heard == [], (name, heard)
