"""A `MemoryStore` serves one cache (one engine).

The engine keeps a URI's record itself in its `MemoryStore` under the bare URI, and the
store reports what it drops to one listener. Two caches over two servers sharing one
store found each other's records under the same URI: a second cache whose own server
failed handed out the first cache's text (of the other server) as its stale copy. So
the first engine claims the store, and a second one is refused with what to do.
"""

from __future__ import annotations

import pytest

from freshcache import ConfigurationError, FreshCache, Policy
from freshcache._middleware._store import MemoryStore
from freshcache.acceptance import ReferenceServer
from freshcache.testing import InMemorySource
from tests.test_engine import U, make, read

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_second_cache_on_the_same_memory_store_is_refused() -> None:
    server_a, server_b = ReferenceServer(), ReferenceServer()
    server_a.set(U, "the text of server A", ttl_ms=3_600_000)
    server_b.set(U, "the text of server B", ttl_ms=3_600_000)
    store = MemoryStore()
    async with FreshCache(InMemorySource(server_a), store=store, listen=False) as cache_a:
        assert (await cache_a.read(U)).text == "the text of server A"
        with pytest.raises(ConfigurationError, match="its own MemoryStore"):
            FreshCache(
                InMemorySource(server_b),
                store=store,
                listen=False,
                policy=Policy(stale_on_error=("*",)),
            )
        assert (await cache_a.read(U)).text == "the text of server A"  # A is untouched
    async with FreshCache(InMemorySource(server_b), store=MemoryStore(), listen=False) as cache_b:
        assert (await cache_b.read(U)).text == "the text of server B"  # what to do instead


def test_a_second_engine_on_the_same_memory_store_is_refused() -> None:
    store = MemoryStore()
    first, _ = make(store=store)
    read(first, "first")
    with pytest.raises(ConfigurationError, match="its own MemoryStore"):
        make(store=store)
    assert first.lookup(U, None).text == "first"
