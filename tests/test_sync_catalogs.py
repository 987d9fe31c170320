"""`SyncFreshCache` catalogs: ``tools()``, ``prompts()``, ``resource_templates()``,
``catalog_status`` and ``call_tool`` from plain threads, with `FreshCache`'s semantics.
Real HTTP on loopback: the reference server runs on its own event loop thread."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal

from freshcache import HttpSource, Loaded, LoaderSource, MethodNotFoundError, Policy
from freshcache.acceptance import InMemorySource, ReferenceServer
from freshcache.acceptance._http_server import ReferenceHttpServer
from freshcache.acceptance._steps import catalog_items
from freshcache.sync import SyncFreshCache
from tests.polling import until_sync

U = "guide://shipping/approval"


@contextmanager
def served() -> Iterator[tuple[ReferenceServer, BlockingPortal, SyncFreshCache]]:
    """The reference server on 127.0.0.1, driven from its own loop thread, and a sync
    cache over HTTP to it (a loop thread of its own)."""
    server = ReferenceServer()
    server.set(U, "v1")
    for kind in ("tools", "prompts", "resource_templates"):
        server.catalogs.set(kind, catalog_items(kind, "v1"))
    with start_blocking_portal("asyncio") as portal:
        http = ReferenceHttpServer(server)
        with (
            portal.wrap_async_context_manager(http),
            SyncFreshCache(
                HttpSource(http.url, timeout=5.0), select=[U], read_timeout=5.0
            ) as cache,
        ):
            yield server, portal, cache


def test_sync_catalogs_are_fresh_hits_and_follow_a_change_heard() -> None:
    with served() as (server, portal, cache):
        assert cache.catalog_status("tools").reason == "not_cached"  # no I/O
        until_sync(lambda: cache.stream_status == "live")
        first = cache.tools()
        assert (first.state, first.names) == ("fresh", ("search-v1", "help"))
        lists = portal.call(lambda: server.catalogs.lists["tools"])
        hit = cache.tools()
        assert hit.version == first.version and not hit.server_read
        assert cache.tools() is hit  # a hit in the calling thread: the same immutable object
        assert portal.call(lambda: server.catalogs.lists["tools"]) == lists
        assert cache.prompts().names == ("summarize-v1", "explain")
        assert cache.resource_templates().names == ("guide-v1", "note")

        portal.call(lambda: server.set_catalog("tools", catalog_items("tools", "v2")))
        until_sync(lambda: cache.catalog_status("tools").names == ("search-v2", "help"))
        again = cache.tools()
        assert (again.state, again.names) == ("fresh", ("search-v2", "help"))
        cache.invalidate_catalog("tools")
        assert cache.catalog_status("tools").reason == "invalidated"


def test_sync_call_tool_re_lists_once_and_says_a_dropped_tool_is_gone() -> None:
    with served() as (server, portal, cache):
        until_sync(lambda: cache.stream_status == "live")
        assert cache.tools().names == ("search-v1", "help")
        answered = cache.call_tool("help", {})
        assert answered.ok and answered.text == "help called with {}"
        renamed = catalog_items("tools", "v2")
        portal.call(lambda: server.set_catalog("tools", renamed, notify=False))
        gone = cache.call_tool("search-v1", {"q": "x"})
        assert gone.state == "unknown_tool" and not gone.retried
        assert gone.catalog is not None and gone.catalog.names == ("search-v2", "help")
        assert portal.call(lambda: list(server.tool_calls)) == ["help", "search-v1"]


def test_sync_catalogs_of_a_loader_without_them_are_an_explicit_state() -> None:
    async def load(uri: str) -> Loaded:
        return Loaded("text", True, ttl_ms=60_000)

    with SyncFreshCache(LoaderSource(load)) as cache:
        tools = cache.tools()
        assert (tools.state, tools.reason, tools.items) == (
            "awaiting_fresh_source",
            "server_error",
            (),
        )
        assert tools.detail is not None and "catalog" in tools.detail
        call = cache.call_tool("search", {})
        assert (call.state, call.reason) == ("unavailable", "server_error")


def test_a_shared_public_catalog_is_a_hit_in_the_calling_thread() -> None:
    """Review: the sync hit looked only at the caller's own row, never the shared public
    one, so with ``share_public`` every `tools()` went through the loop thread."""
    server = ReferenceServer()
    server.set(U, "v1")
    server.catalogs.set("tools", catalog_items("tools", "v1"))
    server.catalogs.scope = "public"
    with SyncFreshCache(
        InMemorySource(server), select=[U], policy=Policy(share_public=True)
    ) as cache:
        until_sync(lambda: cache.stream_status == "live")
        first = cache.tools(principal="alice")
        assert first.state == "fresh"
        trips: list[object] = []
        through_loop = cache._portal.call

        def counted(*args: Any) -> Any:
            trips.append(args)
            return through_loop(*args)

        cache._portal.call = counted  # type: ignore[method-assign]
        hit = cache.tools(principal="alice")
        assert hit.version == first.version and not hit.server_read
        assert cache.tools(principal="bob") is hit  # the same public walk
        assert trips == []  # both hits answered in the calling thread
        cache._portal.call = through_loop  # type: ignore[method-assign]


def test_sync_get_prompt_is_passed_through() -> None:
    # The reference server has no prompts/get: said as for a catalog it lacks.
    with (
        served() as (_, _portal, cache),
        pytest.raises(MethodNotFoundError, match="prompts/get"),
    ):
        cache.get_prompt("nothing-here", {"a": "b"})


def test_sync_complete_is_passed_through() -> None:
    # The reference server declares no completions: nothing is sent, said the same way.
    with (
        served() as (_, _portal, cache),
        pytest.raises(MethodNotFoundError, match="declares no completions"),
    ):
        cache.complete({"type": "ref/prompt", "name": "p"}, {"name": "a", "value": ""})
