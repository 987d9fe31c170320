"""Issue 22, defects 3 and 7: the engine alone decides whether a shared fleet copy may
serve a principal, and an entry is bound (keyed HMAC) to the key it is stored under.

Real Valkey (`tests/valkey_support.py`), workers in one process.
"""

from __future__ import annotations

import pytest

from freshcache import Policy
from tests.polling import reads_done, until
from tests.test_fleet import URI, Counting, workers

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py's client is asyncio only


def public_server() -> Counting:
    server = Counting()
    server.set(URI, "v1", cache_scope="public")
    server.denied_principals[URI] = {None, "bob"}  # no copy at the start: bob is refused first
    return server


async def test_a_denied_principal_never_gets_the_shared_public_copy_on_any_worker(valkey):
    server = public_server()
    async with workers(server, valkey.url, 2, policy=Policy(share_public=True)) as (one, two):
        assert (await one.read(URI, principal="bob")).state == "denied"
        alice = await one.read(URI, principal="alice")
        assert (alice.state, alice.text) == ("fresh", "v1")
        await until(lambda: one.describe()["fleet"]["counters"]["fills"] >= 1)
        for cache in (two, one, two):
            result = await cache.read(URI, principal="bob")
            assert (result.state, result.text) == ("denied", None), cache.describe()["fleet"]
        # Bob's own read succeeds once the server lets him: the denial ends fleet-wide.
        server.denied_principals[URI] = {None}
        mine = await two.read(URI, principal="bob")
        assert (mine.state, mine.text, mine.server_read) == ("fresh", "v1", True)
        assert not one.engine.denied(URI, "bob") or (await one.read(URI, principal="bob")).text


async def test_a_copy_from_the_store_is_not_a_server_read(valkey):
    server = public_server()
    server.denied_principals[URI] = {None}
    async with workers(server, valkey.url, 2, policy=Policy(share_public=True)) as (one, two):
        # Carol's first read on a worker is her own: no refusal's absence is proof.
        assert (await two.read(URI, principal="carol")).server_read
        server.set(URI, "v2", cache_scope="public", notify=True)
        await until(lambda: two.status(URI, principal="carol").state != "fresh")
        assert (await one.read(URI, principal="alice")).server_read
        await until(lambda: one.describe()["fleet"]["counters"]["fills"] >= 1)
        await until(lambda: reads_done(one) and reads_done(two))
        reads = server.server_reads
        copy = await two.read(URI, principal="carol")
        assert (copy.state, copy.text, copy.server_read) == ("fresh", "v2", False)
        assert server.server_reads == reads


async def test_an_entry_copied_under_another_principals_key_is_refused(valkey):
    server = Counting()
    server.set(URI, "alice's v1", cache_scope="private")
    async with workers(server, valkey.url, 2) as (one, two):
        assert (await one.read(URI, principal="alice")).text == "alice's v1"
        await until(lambda: one.describe()["fleet"]["counters"]["fills"] >= 1)
        shared = one._fleet.shared  # type: ignore[union-attr]
        raw = await shared.redis.get(shared.entry_key(URI, shared.tag("alice")))
        assert raw is not None
        # A process that can write the store copies alice's entry under bob's key.
        await shared.redis.set(shared.entry_key(URI, shared.tag("bob")), raw)
        reads = server.server_reads
        bob = await two.read(URI, principal="bob")
        assert bob.server_read and server.server_reads == reads + 1
        # Refused each time it is looked at (a read that waits on a fill looks again).
        assert two.describe()["fleet"]["counters"]["refused_copies"] >= 1
