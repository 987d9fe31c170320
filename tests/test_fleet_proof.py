"""Issue 27, part 3: proof through the shared generation. After a sequence gap (or a
listener takeover) the workers wait, each within its deadline, for the entry the fleet
re-proves under the shared generation instead of each reading the server: one server
read fleet-wide for N workers.

Real Valkey (`tests/valkey_support.py`), workers in one process. Server reads are
counted by the reference server; no timing thresholds.
"""

from __future__ import annotations

import pytest

from freshcache import FRESH
from tests.polling import until
from tests.test_fleet import URI, Counting, leader, workers

pytestmark = pytest.mark.anyio

N = 5


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py's client is asyncio only


async def test_a_gap_every_worker_saw_costs_one_server_read_fleet_wide(valkey) -> None:
    from redis.asyncio import Redis

    server = Counting()
    server.set(URI, "v1", ttl_ms=60_000)
    async with workers(server, valkey.url, N) as caches:
        await until(lambda: all(c.status(URI).state == FRESH for c in caches))
        for cache in caches:
            assert (await cache.read(URI)).text == "v1"
        before = server.server_reads
        fleet = caches[0]._fleet
        assert fleet is not None
        redis = Redis.from_url(valkey.url, decode_responses=True)
        try:
            # Messages lost for the whole fleet: the sequence jumps and every worker sees
            # the gap at the next message (the change itself).
            await redis.incrby(fleet.shared.seq_key, 3)
            server.set(URI, "v2", ttl_ms=60_000)
            await fleet.shared.invalidate([URI], "nobody", "updated", 0)
        finally:
            await redis.aclose()
        await until(
            lambda: all(c._fleet is not None and c._fleet.counters.gaps == 1 for c in caches)
        )
        assert all(c.status(URI).text != "v1" for c in caches)  # failed closed at once
        await until(lambda: all(c.stream_status == "live" for c in caches))
        for cache in caches:
            result = await cache.read(URI)
            assert (result.state, result.text) == (FRESH, "v2")
        await until(lambda: all(c.status(URI).text == "v2" for c in caches))
        assert server.server_reads - before == 1


async def test_a_takeover_costs_one_server_read_fleet_wide(valkey) -> None:
    server = Counting()
    server.set(URI, "v1", ttl_ms=60_000)
    async with workers(server, valkey.url, N) as caches:
        await until(lambda: all(c.status(URI).text == "v1" for c in caches))
        before = server.server_reads
        was = {id(c): dict(c.describe()["fleet"]["counters"]) for c in caches}
        await caches.leave(leader(caches))
        await until(lambda: sum(c.describe()["fleet"]["leading"] for c in caches) == 1)
        await until(lambda: all(c.stream_status == "live" for c in caches))
        # The new listener's acknowledgment proves nothing about before it: the fleet
        # re-reads once, and every worker takes that entry.
        await until(lambda: all(c.status(URI).text == "v1" for c in caches))
        for cache in caches:
            assert (await cache.read(URI)).text == "v1"
        assert server.server_reads - before == 1, "\n".join(
            f"{c.describe()['fleet']['leading']} "
            + str({k: v - was[id(c)][k] for k, v in c.describe()["fleet"]["counters"].items()})
            for c in caches
        )
        server.set(URI, "v3", notify=True, ttl_ms=60_000)
        await until(lambda: all(c.status(URI).text != "v1" for c in caches))
        for cache in caches:  # a follower reads what it heard when it is read
            assert (await cache.read(URI)).text == "v3"
        assert server.server_reads - before == 2


async def test_a_takeover_seen_while_waiting_extends_the_proof_window_once() -> None:
    """The wait to be covered again after a lost listener lasts about a lease; a new
    listener taking the lease meanwhile still has to listen and be acknowledged, which
    on a starved machine took past that lease (each worker then read the server). Seen
    while the window is open, it extends it by a lease from then, once."""
    from types import SimpleNamespace

    import anyio

    from freshcache._fleet._reads import SharedReads
    from freshcache.fleet import Fleet

    reads = SharedReads(SimpleNamespace(config=Fleet("redis://x/0", lease=10.0)))  # type: ignore[arg-type]
    reads.took_over("w1")  # no window open: nothing to extend
    assert reads._regain_until == -float("inf")
    reads.expect_proof()
    opened = reads._regain_until
    await anyio.sleep(0.01)
    reads.took_over("w1")
    extended = reads._regain_until
    assert extended > opened
    await anyio.sleep(0.01)
    reads.took_over("w2")  # once per window: a holder that never announces is bounded
    assert reads._regain_until == extended
