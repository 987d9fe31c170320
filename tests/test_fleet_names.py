"""Issue 27, part 4: key and channel names reveal nothing. Principals, URIs and the
server's identity appear in the store's key names and channel names only as keyed
hashes (HMAC under a key derived from `Fleet.key`), so a user who can list one prefix
cannot enumerate (or confirm a guess of) another principal's resources.

Real Valkey (`tests/valkey_support.py`), workers in one process.
"""

from __future__ import annotations

import pytest

from freshcache import Policy
from freshcache._fleet._store import SharedStore
from tests.polling import until
from tests.test_fleet import URI, Counting, workers

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py's client is asyncio only


async def names_in(url: str) -> list[str]:
    """Every key name and every channel name (plain and sharded) the store holds now."""
    from redis.asyncio import Redis

    redis = Redis.from_url(url, decode_responses=True)
    try:
        keys = [str(k) async for k in redis.scan_iter("*", count=1000)]
        channels = [str(c) for c in await redis.execute_command("PUBSUB", "CHANNELS")]
        shard = [str(c) for c in await redis.execute_command("PUBSUB", "SHARDCHANNELS")]
        return keys + channels + shard
    finally:
        await redis.aclose()


async def test_no_key_or_channel_name_holds_a_uri_a_principal_or_the_server(valkey) -> None:
    server = Counting()
    server.set(URI, "salary", ttl_ms=60_000)
    server.denied_principals[URI] = {"mallory"}
    async with workers(server, valkey.url, 3, policy=Policy(share_public=True)) as caches:
        one, two, three = caches
        assert (await one.read(URI, principal="alice")).text == "salary"
        assert (await two.read(URI, principal="bob")).text == "salary"
        assert (await three.read(URI, principal="mallory")).state == "denied"
        await until(lambda: sum(c.describe()["fleet"]["counters"]["fills"] for c in caches) >= 2)
        server.set(URI, "raise", notify=True, ttl_ms=60_000)
        await until(lambda: (one.status(URI, principal="alice").text or "") != "salary")
        assert (await two.read(URI, principal="alice")).text == "raise"
        fleet = one._fleet
        assert fleet is not None
        server_id = fleet.shared._server_id
        names = await names_in(valkey.url)
    assert any(":u:" in n for n in names) and any(n.endswith(":changes") for n in names)
    assert any(":e:" in n for n in names) and any(":d:" in n for n in names)
    secrets = ["doc://", URI, "alice", "bob", "mallory", server_id]
    leaks = [(n, s) for n in names for s in secrets if s.lower() in n.lower()]
    assert leaks == []


async def test_names_depend_on_the_fleet_key(valkey) -> None:
    from redis.asyncio import Redis

    redis = Redis.from_url(valkey.url)
    try:
        a = SharedStore(redis, "t", "server", b"key-a")
        b = SharedStore(redis, "t", "server", b"key-b")
        assert a.channel != b.channel and a.seq_key != b.seq_key
        assert a.entry_key(URI, a.tag("alice")) != b.entry_key(URI, b.tag("alice"))
        assert a.tag("alice") != b.tag("alice") and a.tag(None) == b.tag(None) == "-"
        # Same key, same names: every worker of one fleet finds the others' keys.
        again = SharedStore(redis, "t", "server", b"key-a")
        assert again.entry_key(URI, again.tag("alice")) == a.entry_key(URI, a.tag("alice"))
    finally:
        await redis.aclose()


async def test_a_denial_on_one_worker_takes_the_principals_own_copy_on_another(valkey) -> None:
    """Denials are fleet-wide: alice's private copy, read on worker one before the server
    revoked her, is not handed out by worker one after worker two's own read of hers
    was refused (it was, within its ``ttlMs``, until the announcement took her row).
    Worker two reads the server because the store no longer holds the copy (evicted, as
    a Valkey at its ``maxmemory`` does)."""
    from redis.asyncio import Redis

    server = Counting()
    server.set(URI, "salary", ttl_ms=600_000)
    async with workers(server, valkey.url, 2) as caches:
        one, two = caches
        assert (await one.read(URI, principal="alice")).text == "salary"
        redis = Redis.from_url(valkey.url, decode_responses=True)
        try:
            entries = [k async for k in redis.scan_iter("*:e:*")]
            assert entries, "the fleet filled no entry to evict"
            await redis.delete(*entries)
        finally:
            await redis.aclose()
        server.denied_principals[URI] = {"alice"}
        assert (await two.read(URI, principal="alice")).state == "denied"
        fleet = one._fleet
        assert fleet is not None
        await until(lambda: fleet.standing(URI, "alice"))  # the announcement reached one
        again = await one.read(URI, principal="alice")
        assert again.state == "denied" and again.text is None, again
