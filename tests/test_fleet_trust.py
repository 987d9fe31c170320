"""The fleet trusts only what it can prove (docs/fleet.md, "What fails closed"): a store
restarted with its data, a store writer that deletes or alters what the fleet keeps,
a listener that cannot fence. Workers on a real Valkey or Redis started on loopback by
the tests; every read a test makes is counted: zero old text, zero denied text."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from freshcache import DENIED, FRESH, FreshCache, Policy, ReadResult
from freshcache._core import ListReply, RequestFailed, ResourceUpdated
from freshcache.acceptance import InMemorySource, ReferenceServer
from freshcache.acceptance._valkey import LocalStore
from freshcache.fleet import Fleet
from freshcache.testing import ReferenceCatalogs
from tests.polling import reads_done
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

    async def read(
        self, cache: FreshCache, uri: str = URI, principal: str | None = None
    ) -> ReadResult:
        result = await cache.read(uri, timeout=1.0, principal=principal)
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
    policy: Policy | None = None,
    config: Fleet | None = None,
    **options: Any,
) -> AsyncIterator[list[FreshCache]]:
    """One worker per principal (its cache's default partition), each in its own task."""
    caches: list[FreshCache] = []
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        for principal in principals:
            cache = FreshCache(
                InMemorySource(server),
                select=[URI] if select is None else select,
                fleet=config or fleet_of(url, "trust", lease),
                read_timeout=2.0,
                principal=principal,
                policy=policy or Policy(),
                **options,
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


class RefusingCatalogs(ReferenceCatalogs):
    """The reference catalogs, refused to the principals in ``refused``."""

    refused: set[str | None]

    def page(
        self, kind: str, cursor: str | None, principal: str | None, *, down: bool
    ) -> ListReply | RequestFailed:
        if principal in getattr(self, "refused", ()):
            self.lists[kind] = self.lists.get(kind, 0) + 1
            return RequestFailed("denied", f"principal {principal!r} may not list {kind}")
        return ReferenceCatalogs.page(self, kind, cursor, principal, down=down)


async def filled(cache: FreshCache, again: Callable[[], Awaitable[object]], counter: str) -> None:
    """Until ``cache`` has stored a fill for the fleet: on a loaded machine the first
    read may have gone to the server directly (the lease moved, the channel broke)."""
    deadline = anyio.current_time() + 30
    while cache.describe()["fleet"]["counters"][counter] < 1:
        info = cache.describe()["fleet"]
        assert anyio.current_time() < deadline, (info["leading"], info["counters"])
        await eventually(lambda: cache.stream_status == "live")
        cache.engine.invalidate_catalog("tools")
        await again()
        await anyio.sleep(0.05)


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
        # Every worker heard it (a follower reads it when it is read, just below).
        await eventually(lambda: all(c.status(URI).text != "v1" for c in caches))
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


# ---------------------------------------------------------------------- 2. nothing unsigned


@pytest.fixture
def valkey() -> Iterator[LocalStore]:
    store = start_store("valkey")
    try:
        yield store
    finally:
        store.stop()


@pytest.mark.parametrize("writer", ["deletes", "alters"])
async def test_a_store_writer_who_touches_the_denial_marker_gets_bob_no_shared_text(
    valkey: LocalStore, writer: str
) -> None:
    """Issue 36: bob was refused on one worker, alice's public entry is in the store; a
    process that can write the store deletes (or alters) bob's denial marker. Neither
    a worker that heard the denial nor a new worker for bob hands bob any text: the
    marker's absence proves nothing (bob's own read on that worker must succeed)."""
    from redis.asyncio import Redis

    server = Counting()
    server.set(URI, "v1", ttl_ms=60_000, cache_scope="public")
    server.denied_principals[URI] = {"bob"}
    reads = Reads()
    policy = Policy(share_public=True)
    async with fleet(server, valkey.url, [None, None], policy=policy) as (one, two):
        assert (await reads.read(one, principal="bob")).state == DENIED
        assert (await reads.read(one, principal="alice")).text == "v1"
        shared = one._fleet.shared  # type: ignore[union-attr]
        marker = shared.denial_key(URI, "bob")
        admin = Redis.from_url(valkey.url, decode_responses=True)
        try:
            public = shared.entry_key(URI, "public")
            deadline = anyio.current_time() + 30
            while not await admin.exists(public):  # filled by whichever worker read first
                assert anyio.current_time() < deadline
                one.engine.handle_hint(ResourceUpdated(URI, None))
                await reads.read(one, principal="alice")
                await anyio.sleep(0.05)
            assert await admin.exists(marker)
            if writer == "deletes":
                await admin.delete(marker)
            else:
                await admin.set(marker, "allowed")
        finally:
            await admin.aclose()
        async with fleet(server, valkey.url, ["bob"], policy=policy) as (late,):
            for cache in (late, two, one, late, two, late, late):
                await reads.read(cache, principal="bob")
    handed = [(r.state, r.text) for r in reads.results]
    assert handed[1] == (FRESH, "v1")  # alice's
    assert all(text is None for _, text in handed[:1] + handed[2:]), handed  # bob's: none


async def test_a_catalog_refused_to_bob_on_one_worker_is_not_shared_to_bob_on_another(
    valkey: LocalStore,
) -> None:
    """Issue 35: the server refused bob's ``tools/list`` on worker A; worker B, whose
    principal is bob, must not take alice's shared public catalog from the store: bob
    stays ``denied``, as one cache keeps him."""
    server = ReferenceServer()
    server.set(URI, "v1", ttl_ms=60_000)
    catalogs = RefusingCatalogs(scope="public")
    catalogs.refused = {"bob"}
    server.catalogs = catalogs
    policy = Policy(share_public=True)
    async with fleet(server, valkey.url, ["alice", "bob"], policy=policy) as (alice, bob_a):
        assert (await bob_a.tools(principal="bob")).state == DENIED
        assert (await alice.tools()).state == FRESH
        await filled(alice, alice.tools, "catalog_fills")
        async with fleet(server, valkey.url, ["bob"], policy=policy) as (bob_b,):
            walked = catalogs.lists.get("tools", 0)
            for _ in range(3):
                got = await bob_b.tools()
                assert (got.state, got.items) == (DENIED, ()), got
            assert catalogs.lists["tools"] > walked  # asked the server itself
            assert bob_b.describe()["fleet"]["counters"]["catalog_takes"] == 0


async def test_a_catalog_refusal_heard_from_another_worker_ends_the_walk_held_here(
    valkey: LocalStore,
) -> None:
    """Bob's own walk succeeded on worker B; the server then refuses bob, on worker A.
    Worker B hears of it: the walk it holds from before is not handed out, bob's next
    walk is his own, and he stays ``denied``."""
    server = ReferenceServer()
    server.set(URI, "v1", ttl_ms=60_000)
    catalogs = RefusingCatalogs(scope="public")
    catalogs.refused = set()
    server.catalogs = catalogs
    policy = Policy(share_public=True)
    async with fleet(server, valkey.url, ["bob", "bob"], policy=policy) as (one, two):
        assert (await two.tools()).state == FRESH
        catalogs.refused = {"bob"}
        assert (await one.tools()).state == DENIED  # its first walk: bob's own, refused
        await eventually(lambda: two.catalog_status("tools").state != FRESH)
        got = await two.tools()
        assert (got.state, got.items) == (DENIED, ()), got


async def test_a_live_announcement_a_store_writer_forged_or_altered_acknowledges_nobody(
    valkey: LocalStore,
) -> None:
    """An announcement is what acknowledges a follower (its URIs become covered): it is
    signed with the fleet's key; one written or edited by anyone else is no
    announcement, stored or heard on the channel."""
    import json

    from redis.asyncio import Redis

    from freshcache._fleet._store import SharedStore

    client = Redis.from_url(valkey.url, decode_responses=True)
    try:
        store = SharedStore(client, "t", "server", b"fleet key")
        payload = {"term": "t1", "holder": "w:t1", "requested": [URI], "covered": [URI]}
        await store.announce("w", "live", payload, 5_000)
        live = await store.live()
        assert live is not None and live["covered"] == [URI]
        assert store.sealed(live) is live
        # Another key (a worker of another fleet, or a guess) does not sign it.
        assert SharedStore(client, "t", "server", b"another key").sealed(live) is None
        for forged in (
            {**live, "covered": [URI, "doc://secret"]},  # altered
            {k: v for k, v in live.items() if k != "sig"},  # unsigned
        ):
            await client.set(store.live_key, json.dumps(forged))
            assert await store.live() is None
            assert store.sealed(forged) is None
    finally:
        await client.aclose()


# ---------------------------------------------------------------------- 3. no fence, no lead


async def test_a_listener_that_cannot_fence_its_lost_stream_stops_leading(
    valkey: LocalStore,
) -> None:
    """Issue 36: the listener's stream is lost while the store is frozen (SIGSTOP), so
    its fence and its ``down`` time out. It stops leading at once (no renewal while a
    fence is under way, none after it failed), keeps trying the fence until it lands
    after the store thaws, and no read after that hands out the old text.

    "At once" is what the timings tell apart. Its fence gives up when a store command
    times out (op_timeout, 0.4 s; 4 x op_timeout at most). A listener that went on
    leading would stop only once its renewals had failed long enough (the code before
    "no fence, no lead": half a lease, 4 s; its first renewal after the freeze came at
    most a quarter lease, 2 s, after the last good one and failed after op_timeout, the
    next a quarter lease after that, so never sooner than 2.8 s into the freeze; now
    three quarters of a lease). Nor can a re-listen's acknowledgment fail
    to publish and stop it: the server holds acknowledgments until the store thaws. The
    store stays frozen until the listener stopped or 5 x op_timeout (2 s) passed: the
    code before "no fence, no lead" was still leading then."""
    import os
    import signal

    from redis.asyncio import Redis

    server = Counting()
    server.set(URI, "v1", ttl_ms=60_000)
    config = Fleet(valkey.url, namespace="fence", lease=8.0, op_timeout=0.4)
    reads = Reads()
    async with fleet(server, valkey.url, [None, None], config=config) as caches:
        for cache in caches:
            assert (await reads.read(cache)).text == "v1"
        (lead,) = [c for c in caches if c.describe()["fleet"]["leading"]]
        lease = lead._fleet.lease  # type: ignore[union-attr]
        term = lease.term
        shared = lead._fleet.shared  # type: ignore[union-attr]
        admin = Redis.from_url(valkey.url, decode_responses=True)
        generation = await admin.get(f"{shared._uri(URI)}:g")
        pid = valkey.process.pid  # type: ignore[union-attr]
        os.kill(pid, signal.SIGSTOP)
        frozen_at = anyio.current_time()
        try:
            server.hold_acks()  # a re-listen is not acknowledged while the store is frozen
            server.drop_streams()  # the listener's stream is lost ...
            server.set(URI, "v2", ttl_ms=60_000)  # ... and the change it would carry
            # Its fence cannot land: it stops leading while the store is still frozen.
            stop_by = 5 * config.op_timeout
            while lease.leading is not None and anyio.current_time() - frozen_at < stop_by:
                await anyio.sleep(0.01)
            assert lease.leading is None and lease.term == term, "still leading, unfenced"
        finally:
            os.kill(pid, signal.SIGCONT)
            server.release_acks()
        try:
            # The fence lands once the store answers: the generation moved.
            async def fenced() -> bool:
                return await admin.get(f"{shared._uri(URI)}:g") != generation

            deadline = anyio.current_time() + 10
            while not await fenced():
                assert anyio.current_time() < deadline, "the fence never landed"
                await anyio.sleep(0.02)
        finally:
            await admin.aclose()
        await eventually(lambda: all(c.status(URI).text != "v1" for c in caches), 10)
        after = len(reads.results)
        deadline = anyio.current_time() + 3.0
        while anyio.current_time() < deadline:
            for cache in caches:
                await reads.read(cache)
            await anyio.sleep(0.05)
        await eventually(lambda: all(c.stream_status == "live" for c in caches), 20)
        for cache in caches:
            assert (await reads.read(cache)).text == "v2"
    texts = [r.text for r in reads.results[after:] if r.state == FRESH]
    assert "v1" not in texts and "v2" in texts, texts


# ---------------------------------------------------------------------- 5. counters


async def test_describe_and_the_metrics_tell_store_hits_from_server_reads(
    valkey: LocalStore,
) -> None:
    """A read a worker answers from the fleet's store is a store hit, not a server
    read: ``describe()["counters"]["server_reads"]`` adds up to the server's own count
    across the fleet, and the fleet's ``freshcache.fleet.reads`` metric says which."""
    from tests.telemetry_support import Recorder

    server = Counting()
    server.set(URI, "v1", ttl_ms=60_000)
    recorder = Recorder.make()
    try:
        async with fleet(server, valkey.url, [None, None, None], **recorder.kwargs()) as caches:
            for cache in caches:
                await cache.read(URI)
            await eventually(lambda: all(reads_done(c) for c in caches))
            for round in range(3):
                server.set(URI, f"v{round + 2}", notify=True, ttl_ms=60_000)
                await eventually(
                    lambda r=round: all(  # type: ignore[misc]
                        c.status(URI).text != f"v{r + 1}" for c in caches
                    )
                )
                for cache in caches:  # a follower reads what it heard when it is read
                    assert (await cache.read(URI)).text == f"v{round + 2}"
            await eventually(lambda: all(reads_done(c) for c in caches))
            counted = [c.describe()["counters"] for c in caches]
            sent = sum(c["server_reads"] for c in counted)
            assert sent == server.server_reads, (counted, server.server_reads)
            hits = sum(c["store_hits"] for c in counted)
            assert hits >= 3  # the re-reads after each change that took the fleet's fill
            fleet_counts = [c.describe()["fleet"]["counters"] for c in caches]
            assert sum(c["server_reads"] for c in fleet_counts) == server.server_reads
            assert sum(c["store_replies"] for c in fleet_counts) == hits
            metric = recorder.metrics()["freshcache.fleet.reads"]
            by_source: dict[str, int] = {}
            for attributes, value in metric:
                source = dict(attributes)["source"]
                by_source[source] = by_source.get(source, 0) + value
            assert by_source == {"store": hits, "server": server.server_reads}, by_source
    finally:
        recorder.shutdown()
