"""The fleet trusts only what it can prove (docs/fleet.md, "What fails closed"): a store
restarted with its data, a store writer that deletes or alters what the fleet keeps,
a listener that cannot fence. Workers on a real Valkey or Redis started on loopback by
the tests; every read a test makes is counted: zero old text, zero denied text."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from freshcache import DENIED, FRESH, FreshCache, ReadResult
from freshcache.acceptance import InMemorySource, ReferenceServer
from freshcache.acceptance._valkey import LocalStore
from tests.polling import until as eventually
from tests.test_fleet import Counting, fleet_of
from tests.valkey_support import STORE_KINDS, start_store

pytestmark = pytest.mark.anyio

URI = "doc://a"
LEASE = 0.6


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py's client is asyncio only


PERSISTENCE = {
    "rdb": ("--dbfilename", "fleet.rdb"),
    "aof": ("--appendonly", "yes", "--appendfsync", "everysec"),
}


@pytest.fixture
def persisted(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalStore]:
    kind, mode = request.param
    store = start_store(kind)
    store.stop()
    store.extra_args = ("--dir", str(tmp_path), *PERSISTENCE[mode])
    store.start()
    try:
        yield store
    finally:
        store.stop()


class Reads:
    """Every read a test makes, and what it was handed."""

    def __init__(self) -> None:
        self.results: list[ReadResult] = []

    async def read(self, cache: FreshCache, uri: str = URI) -> ReadResult:
        result = await cache.read(uri, timeout=1.0)
        self.results.append(result)
        return result

    def texts(self, state: str = FRESH) -> list[str | None]:
        return [r.text for r in self.results if r.state == state]


async def _hold(cache: FreshCache, entered: anyio.Event, stop: anyio.Event) -> None:
    async with cache:
        entered.set()
        await stop.wait()


@asynccontextmanager
async def fleet(
    server: ReferenceServer,
    url: str,
    principals: list[str | None],
    *,
    lease: float = LEASE,
    select: list[str] | None = None,
) -> AsyncIterator[list[FreshCache]]:
    """One worker per principal (its cache's default partition), each in its own task."""
    caches: list[FreshCache] = []
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        for principal in principals:
            cache = FreshCache(
                InMemorySource(server),
                select=[URI] if select is None else select,
                fleet=fleet_of(url, "trust", lease),
                read_timeout=2.0,
                principal=principal,
            )
            entered = anyio.Event()
            tg.start_soon(_hold, cache, entered, stop)
            await entered.wait()
            caches.append(cache)
        try:
            await eventually(lambda: all(c.stream_status == "live" for c in caches), 20)
            yield caches
        finally:
            stop.set()


# ---------------------------------------------------------------------- 1. a restart


@pytest.mark.parametrize(
    "persisted",
    [(kind, mode) for kind in STORE_KINDS for mode in PERSISTENCE],
    indirect=True,
    ids=lambda p: "-".join(p),
)
async def test_a_store_restarted_from_its_own_data_serves_no_old_text(
    persisted: LocalStore,
) -> None:
    """The case of issue 36: both workers read v1, the store saves, U changes to v2 and
    every worker hears it, the store is killed and comes back from its RDB (or AOF)
    with the v1 entry, its epoch and the lease. No read after that hands out v1."""
    from redis.asyncio import Redis

    server = Counting()
    server.set(URI, "v1", ttl_ms=60_000)
    reads = Reads()
    async with fleet(server, persisted.url, [None, None]) as caches:
        for cache in caches:
            assert (await reads.read(cache)).text == "v1"
        admin = Redis.from_url(persisted.url, decode_responses=True)
        try:
            await admin.save()  # the v1 entry, its epoch and the lease on disk
        finally:
            await admin.aclose()
        server.set(URI, "v2", notify=True, ttl_ms=60_000)
        await eventually(lambda: all(c.status(URI).text == "v2" for c in caches))
        changed = len(reads.results)  # every read from here on must be v2 or nothing
        for cache in caches:
            assert (await reads.read(cache)).text == "v2"
        persisted.stop()
        persisted.start()  # from fleet.rdb (or the AOF), on the same port
        deadline = anyio.current_time() + 6 * LEASE
        while anyio.current_time() < deadline:
            for cache in caches:
                await reads.read(cache)
            await anyio.sleep(0.02)
        await eventually(lambda: all(c.stream_status == "live" for c in caches), 20)
        for cache in caches:
            assert (await reads.read(cache)).text == "v2"
    after = [r.text for r in reads.results[changed:] if r.state == FRESH]
    assert "v1" not in after, after
    assert after.count("v2") >= 4
