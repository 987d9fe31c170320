"""Catalogs shared through the fleet (issue 26 part 1, docs/catalogs.md and
docs/fleet.md): the listener's stream covers every worker's tools, prompts and templates.

Workers in one process on one real Valkey (module-scoped; each test its own
namespace), over a reference server: the listener's acknowledgment names the catalogs
it covers, a ``*/list_changed`` it hears is published on the fleet channel before its
own engine takes it in, and a follower covers a catalog exactly when it covers a URI.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import anyio
import pytest

from freshcache import FRESH, Catalog, FreshCache, Policy
from freshcache.acceptance import ReferenceServer
from freshcache.acceptance._steps import catalog_items
from tests.polling import reads_done
from tests.polling import until as eventually
from tests.test_fleet import URI, leader, workers
from tests.valkey_support import Valkey

pytestmark = pytest.mark.anyio

KINDS = ("tools", "prompts", "resource_templates")
SHARED = Policy(share_public=True)


@pytest.fixture(scope="module")
def valkey() -> Iterator[Valkey]:
    server = Valkey()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_valkey() -> Iterator[Valkey]:
    """A Valkey of its own, for the test that stops it."""
    server = Valkey()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py's client is asyncio only


@pytest.fixture
def namespace() -> str:
    return f"cat{secrets.token_hex(4)}"


def reference() -> ReferenceServer:
    server = ReferenceServer()
    server.set(URI, "v1", ttl_ms=60_000)
    for kind in KINDS:
        server.catalogs.set(kind, catalog_items(kind, "v1"))
    return server


def followers(caches: list[FreshCache]) -> list[FreshCache]:
    lead = leader(caches)
    return [c for c in caches if c is not lead]


def names(cache: FreshCache, kind: str) -> tuple[str, ...] | None:
    """The fresh catalog's names, ``None`` when it is not fresh."""
    status = cache.catalog_status(kind)
    return status.names if status.state == FRESH else None


async def catalog(cache: FreshCache, kind: str) -> object:
    match kind:
        case "tools":
            return await cache.tools()
        case "prompts":
            return await cache.prompts()
    return await cache.resource_templates()


async def test_a_followers_catalog_is_fresh_once_the_listeners_ack_names_it(
    valkey: Valkey, namespace: str
) -> None:
    server = reference()
    async with workers(server, valkey.url, 2, namespace) as caches:
        (follower,) = followers(caches)
        for kind in KINDS:
            assert follower.engine.catalogs.covers(kind)  # type: ignore[arg-type]
            first = await catalog(follower, kind)
            assert first.server_read  # type: ignore[attr-defined]
            lists = server.catalogs.lists[kind]
            hit = await catalog(follower, kind)
            assert not hit.server_read  # type: ignore[attr-defined]
            assert hit.names == first.names  # type: ignore[attr-defined]
            assert await catalog(follower, kind) is hit  # the same immutable catalog
            assert server.catalogs.lists[kind] == lists


async def test_a_catalog_the_listeners_ack_does_not_name_is_listed_before_each_use(
    valkey: Valkey, namespace: str
) -> None:
    server = reference()
    server.catalogs.list_changed_supported = False  # no toolsListChanged, promptsListChanged
    async with workers(server, valkey.url, 2, namespace) as caches:
        (follower,) = followers(caches)
        assert not follower.engine.catalogs.covers("tools")
        await follower.tools()
        lists = server.catalogs.lists["tools"]
        again = await follower.tools()
        assert again.state == FRESH and again.server_read
        assert server.catalogs.lists["tools"] == lists + 1


@pytest.mark.parametrize("kind", KINDS)
async def test_a_list_changed_the_listener_hears_reaches_every_worker_before_it_serves(
    valkey: Valkey, namespace: str, kind: str
) -> None:
    server = reference()
    async with workers(server, valkey.url, 3, namespace) as caches:
        old = catalog_items(kind, "v1")[0]["name"]
        new = catalog_items(kind, "v2")[0]["name"]
        for cache in caches:
            await catalog(cache, kind)
        assert all(old in (names(c, kind) or ()) for c in caches)
        lead = leader(caches)
        assert lead._fleet is not None
        server.set_catalog(kind, catalog_items(kind, "v2"))  # and notifies the listener
        # The listener's engine takes the change in only after it was published...
        await eventually(lambda: old not in (names(lead, kind) or ()))
        published = await lead._fleet.shared.sequence()
        for follower in followers(caches):
            fleet = follower._fleet
            assert fleet is not None
            # ...so a follower that has taken in the channel up to there has dropped it.
            await eventually(lambda f=fleet: f.channel.seq >= published)
            assert old not in (names(follower, kind) or ())
            served = await catalog(follower, kind)
            assert served.state == FRESH  # type: ignore[attr-defined]
            assert new in served.names  # type: ignore[attr-defined]


async def every_worker_lists_an_unheard_change_after_a_takeover(server, caches) -> None:  # type: ignore[no-untyped-def]
    """The tool list changes unheard, the listener leaves, another takes over: the new
    listener's acknowledgment proves nothing about before it, so every worker lists
    the change."""
    server.set_catalog("tools", catalog_items("tools", "v2"), notify=False)  # unheard
    await caches.leave(leader(caches))
    await eventually(lambda: sum(c.describe()["fleet"]["leading"] for c in caches) == 1)
    await eventually(lambda: all(c.stream_status == "live" for c in caches))
    for cache in caches:
        tools = await cache.tools()
        assert tools.state == FRESH and tools.names[0] == "search-v2", tools


async def test_the_listener_dies_and_a_change_made_meanwhile_is_listed_by_every_worker(
    valkey: Valkey, namespace: str
) -> None:
    server = reference()
    async with workers(server, valkey.url, 3, namespace) as caches:
        for cache in caches:
            await cache.tools()
        await every_worker_lists_an_unheard_change_after_a_takeover(server, caches)


async def test_a_lost_channel_makes_every_catalog_not_fresh(
    own_valkey: Valkey, namespace: str
) -> None:
    valkey = own_valkey
    server = reference()
    async with workers(server, valkey.url, 3, namespace) as caches:
        for cache in caches:
            for kind in KINDS:
                await catalog(cache, kind)
        assert all(names(c, k) for c in caches for k in KINDS)
        valkey.stop()
        try:
            await eventually(lambda: not any(names(c, k) for c in caches for k in KINDS))
        finally:
            valkey.start()
        await eventually(lambda: all(c.describe()["fleet"]["store"] == "up" for c in caches))


# ---------------------------------------------------------------------- shared walks


def public_reference() -> ReferenceServer:
    server = reference()
    server.catalogs.scope = "public"
    return server


async def test_n_workers_one_change_one_walk(valkey: Valkey, namespace: str) -> None:
    server = public_reference()
    async with workers(server, valkey.url, 4, namespace, policy=SHARED) as caches:
        for cache in caches:
            assert (await cache.tools()).state == FRESH
        counters = [c._fleet.counters for c in caches if c._fleet]
        # Each worker's first walk is its own: a principal takes another's walk only
        # once its own succeeded on that worker (no refusal's absence is proof).
        assert server.catalogs.lists["tools"] == 4, counters
        takes = sum(c._fleet.counters.catalog_takes for c in caches if c._fleet)
        assert takes == 0
        before = server.catalogs.lists["tools"]
        server.set_catalog("tools", catalog_items("tools", "v2"))  # and notifies
        # Every worker had asked for tools: each re-lists in the background.
        await eventually(lambda: all(names(c, "tools") == ("search-v2", "help") for c in caches))
        for cache in caches:
            tools = await cache.tools()
            assert tools.names[0] == "search-v2" and not tools.server_read
        counters = [c._fleet.counters for c in caches if c._fleet]
        assert server.catalogs.lists["tools"] - before == 1, counters


async def test_a_private_catalog_is_never_shared(valkey: Valkey, namespace: str) -> None:
    server = reference()  # private pages
    server.catalogs.page_size = 1
    server.catalogs.later_pages_scope = "private"
    server.catalogs.scope = "public"  # the first page public, a later one private
    async with workers(server, valkey.url, 3, namespace, policy=SHARED) as caches:
        for cache in caches:
            tools = await cache.tools()
            assert tools.state == FRESH and tools.server_read  # each walked it itself
        assert all(c._fleet.counters.catalog_takes == 0 for c in caches if c._fleet)
        fleet = caches[0]._fleet
        assert fleet is not None
        stored = [k async for k in fleet.redis.scan_iter(match=f"{namespace}:*:l:*:c:*")]
        assert stored == []


async def test_a_shared_walk_from_before_a_takeover_is_not_taken_after_it(
    valkey: Valkey, namespace: str
) -> None:
    server = public_reference()
    async with workers(server, valkey.url, 3, namespace, policy=SHARED) as caches:
        for cache in caches:
            await cache.tools()
        assert server.catalogs.lists["tools"] == 3  # each its own first walk
        await every_worker_lists_an_unheard_change_after_a_takeover(server, caches)


async def test_a_relisten_for_a_selection_change_does_not_fence_every_catalog(
    valkey: Valkey, namespace: str
) -> None:
    """Review: every listener re-acknowledgment published a list change for every
    catalog it covered, so one worker's `select` re-walked every catalog fleet-wide."""
    server = reference()
    server.set("doc://b", "b1", ttl_ms=60_000)
    # A 2 s lease: the test watches one listener re-acknowledge; a 0.6 s lease can be
    # handed over while a loaded loop starves, and then it watches a takeover instead.
    async with workers(server, valkey.url, 2, namespace, lease=2.0) as caches:
        for cache in caches:
            for kind in KINDS:
                assert (await catalog(cache, kind)).state == FRESH
        generations = [c.engine.catalogs.pages["tools"].generation for c in caches]
        lists = dict(server.catalogs.lists)
        (follower,) = followers(caches)
        follower.select([URI, "doc://b"])  # the union grows: the listener listens again
        await eventually(lambda: all(c.engine.coverage.covers("doc://b") for c in caches))
        await eventually(lambda: all(reads_done(c) for c in caches))
        assert [c.engine.catalogs.pages["tools"].generation for c in caches] == generations
        for cache in caches:
            for kind in KINDS:
                assert names(cache, kind) is not None, (kind, cache.catalog_status(kind))
        assert dict(server.catalogs.lists) == lists


async def test_a_change_heard_alone_is_published_and_the_older_shared_walk_never_taken(
    valkey: Valkey, namespace: str
) -> None:
    server = public_reference()
    async with workers(server, valkey.url, 2, namespace, policy=SHARED) as caches:
        for cache in caches:
            assert (await cache.tools()).names[0] == "search-v1"
        assert server.catalogs.lists["tools"] == 2  # each its own first walk
        server.set_catalog("tools", catalog_items("tools", "v2"), notify=False)  # unheard
        alone, other = caches
        alone.invalidate_catalog("tools")  # the caller's word: only this worker knows
        tools = await alone.tools()
        assert tools.state == FRESH and tools.names[0] == "search-v2", tools
        # Published as a list change: the other worker's copy stops being fresh too,
        # and the walk stored before it is never taken again.
        await eventually(lambda: names(other, "tools") != ("search-v1", "help"))
        for cache in caches:
            tools = await cache.tools()
            assert tools.state == FRESH and tools.names[0] == "search-v2", tools


async def test_a_walk_that_raises_or_is_cancelled_frees_the_fill_lock(
    valkey: Valkey, namespace: str
) -> None:
    """Review: the fill lock stayed held when the lock holder's walk raised or was
    cancelled, and every other worker waited out `Fleet.fill_lock` for nothing."""
    server = public_reference()
    async with workers(server, valkey.url, 2, namespace, policy=SHARED) as caches:
        cache = caches[0]
        fleet = cache._fleet
        assert fleet is not None

        async def locks() -> list[object]:
            return [k async for k in fleet.redis.scan_iter(match=f"{namespace}:*:lock:*")]

        walking = anyio.Event()

        async def boom(done: object) -> Catalog:
            walking.set()
            assert await locks() != []  # it walks under the lock
            raise RuntimeError("the walk broke")

        async def stuck(done: object) -> Catalog:
            walking.set()
            await anyio.Event().wait()  # never set: only a cancel ends it
            raise AssertionError("not reached")

        done = cache.engine.begin_catalog("tools", cache.principal)
        with pytest.raises(RuntimeError, match="the walk broke"):
            await fleet.catalogs.walk(done, boom)
        assert walking.is_set() and await locks() == []
        walking = anyio.Event()
        async with anyio.create_task_group() as tg:
            done = cache.engine.begin_catalog("tools", cache.principal)
            tg.start_soon(fleet.catalogs.walk, done, stuck)
            await walking.wait()
            assert await locks() != []
            tg.cancel_scope.cancel()
        assert await locks() == []
        # The other worker takes the lock at once and walks (no wait for a fill).
        other = caches[1]
        assert (await other.tools()).state == FRESH
        assert other._fleet is not None and other._fleet.counters.fill_waits == 0
