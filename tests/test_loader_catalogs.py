"""`LoaderSource` catalogs (issue 26): a loader's ``catalogs=`` function lists tools,
prompts and resource templates; its change feed names their changes
(``TOOLS_CHANGED``, ``PROMPTS_CHANGED``; templates with ``LIST_CHANGED``). The engine
judges them as any server's: covered by the feed's stream until a change, else listed
before each use."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import anyio
import pytest

from freshcache import FreshCache, Loaded, LoaderSource
from freshcache.acceptance._steps import catalog_items
from tests.polling import until

pytestmark = pytest.mark.anyio
U = "guide://shipping/approval"


class Catalogs:
    """A loader's catalogs at a version, counting every listing."""

    def __init__(self) -> None:
        self.version = {"tools": "v1", "prompts": "v1", "resource_templates": "v1"}
        self.lists: dict[str, int] = {}
        self.fault: BaseException | None = None
        self.missing: set[str] = set()

    async def load(self, uri: str) -> Loaded:
        return Loaded("text", True, ttl_ms=60_000)

    async def catalogs(self, kind: str) -> Iterable[Mapping[str, Any]] | None:
        self.lists[kind] = self.lists.get(kind, 0) + 1
        if self.fault is not None:
            raise self.fault
        if kind in self.missing:
            return None
        return catalog_items(kind, self.version[kind])


async def feed_of(receive: anyio.abc.ObjectReceiveStream[object]) -> AsyncIterator[object]:
    async with receive:
        async for item in receive:
            yield item


async def test_feed_changes_relist_their_catalog_and_no_other() -> None:
    store = Catalogs()
    send, receive = anyio.create_memory_object_stream[object](10)
    source = LoaderSource(
        store.load, catalogs=store.catalogs, changes=feed_of(receive), default_ttl_ms=60_000
    )
    async with send, FreshCache(source, select=[U], read_timeout=5.0) as cache:
        await until(lambda: cache.stream_status == "live")
        first = await cache.tools()
        assert (first.state, first.names) == ("fresh", ("search-v1", "help"))
        hit = await cache.tools()  # covered by the feed: a hit, no listing
        assert hit.version == first.version and not hit.server_read
        assert store.lists["tools"] == 1
        assert (await cache.prompts()).names == ("summarize-v1", "explain")
        assert (await cache.resource_templates()).names == ("guide-v1", "note")
        listed = dict(store.lists)

        store.version["tools"] = "v2"
        await send.send(LoaderSource.TOOLS_CHANGED)
        await until(lambda: cache.catalog_status("tools").names == ("search-v2", "help"))
        assert (await cache.prompts()).names == ("summarize-v1", "explain")
        assert store.lists["prompts"] == listed["prompts"]  # another kind is untouched

        store.version["prompts"] = store.version["resource_templates"] = "v2"
        await send.send(LoaderSource.PROMPTS_CHANGED)
        await send.send(LoaderSource.LIST_CHANGED)  # templates change with the resources
        await until(lambda: cache.catalog_status("prompts").names == ("summarize-v2", "explain"))
        await until(
            lambda: cache.catalog_status("resource_templates").names == ("guide-v2", "note")
        )


async def test_without_a_feed_a_catalog_is_listed_before_each_use() -> None:
    store = Catalogs()
    source = LoaderSource(store.load, catalogs=store.catalogs, default_ttl_ms=60_000)
    async with FreshCache(source, read_timeout=5.0) as cache:
        first = await cache.tools()
        second = await cache.tools()
        assert first.state == second.state == "fresh"
        assert second.server_read and store.lists["tools"] == 2


async def test_a_missing_or_failing_catalog_is_an_explicit_state() -> None:
    store = Catalogs()
    store.missing.add("prompts")
    async with FreshCache(LoaderSource(store.load, catalogs=store.catalogs)) as cache:
        prompts = await cache.prompts()
        assert (prompts.state, prompts.items) == ("not_found", ())
        store.fault = PermissionError("not for you")
        tools = await cache.tools()
        assert (tools.state, tools.items) == ("denied", ())
        store.fault = ConnectionError("the catalog store is down")
        templates = await cache.resource_templates()
        assert (templates.state, templates.reason) == ("awaiting_fresh_source", "unreachable")
        call = await cache.call_tool("search-v1", {})
        assert (call.state, call.reason) == ("unavailable", "server_error")


async def test_a_tool_change_while_no_stream_is_open_reaches_the_next_reply() -> None:
    store = Catalogs()
    source = LoaderSource(store.load, catalogs=store.catalogs, default_ttl_ms=60_000)
    source._take(LoaderSource.TOOLS_CHANGED)  # the feed named it while no stream was open
    page = await source.list_catalog("tools", None, None)
    assert [(type(h).__name__, h.kind) for h in page.hints] == [("CatalogListChanged", "tools")]
    again = await source.list_catalog("tools", None, None)
    assert again.hints == ()  # handed over once


async def test_freshmcpserver_uses_a_loaders_catalog_only_when_it_has_one() -> None:
    pytest.importorskip("agents")
    from freshcache.integrations.openai_agents import _lists_catalogs

    store = Catalogs()
    async with FreshCache(LoaderSource(store.load, catalogs=store.catalogs)) as with_catalogs:
        assert _lists_catalogs(with_catalogs)
    async with FreshCache(LoaderSource(store.load)) as without:
        assert not _lists_catalogs(without)  # the wrapped server's own tools, as before
