"""A catalog item without what the schema requires of it (a tool without ``name`` or
``inputSchema``) is left out, never a crash: `catalog_reply` drops it (the protocol
layer, one place), and each framework integration skips an item it cannot use even
when a catalog reaches it some other way (review finding 8)."""

from __future__ import annotations

from typing import Any

import pytest

from freshcache import Catalog, FreshCache, HttpSource
from freshcache._core._frozen import frozen
from freshcache._protocol._wire import catalog_reply
from freshcache.acceptance import ReferenceServer
from freshcache.acceptance._http_server import ReferenceHttpServer
from freshcache.integrations.langchain import load_tools
from freshcache.integrations.openai_agents import FreshMCPServer
from freshcache.integrations.pydantic_ai import FreshToolset
from tests.polling import until

pytestmark = pytest.mark.anyio

U = "guide://shipping/approval"
SEARCH = {"name": "search", "inputSchema": {"type": "object", "properties": {}}}
BAD_TOOLS = [{"description": "no name", "inputSchema": {"type": "object"}}, {"name": "x"}]


def test_catalog_reply_leaves_out_items_the_schema_refuses() -> None:
    page = catalog_reply("tools", {"tools": [*BAD_TOOLS, SEARCH, {"name": "", "inputSchema": {}}]})
    assert not isinstance(page, Exception) and [i["name"] for i in page.items] == ["search"]
    templates = catalog_reply(
        "resource_templates",
        {"resourceTemplates": [{"name": "t"}, {"name": "u", "uriTemplate": "file:///{p}"}]},
    )
    assert not isinstance(templates, Exception)
    assert [i["name"] for i in templates.items] == ["u"]
    prompts = catalog_reply("prompts", {"prompts": [{"name": 3}, {"name": "p"}]})
    assert not isinstance(prompts, Exception) and [i["name"] for i in prompts.items] == ["p"]


async def test_a_server_listing_a_nameless_tool_leaves_every_integration_running() -> None:
    server = ReferenceServer()
    server.set(U, "v1")
    server.set_catalog("tools", [*BAD_TOOLS, SEARCH], notify=False)
    async with (
        ReferenceHttpServer(server) as http,
        FreshCache(HttpSource(http.url), select=[U], read_timeout=2.0) as cache,
    ):
        await until(lambda: cache.stream_status == "live")
        assert (await cache.tools()).names == ("search",)
        assert [t.name for t in await load_tools(cache)] == ["search"]
        assert list(await FreshToolset(cache).get_tools(None)) == ["search"]  # type: ignore[arg-type]
        fresh = FreshMCPServer(_unused_server(), cache)
        assert [t.name for t in await fresh.list_tools()] == ["search"]


class _ListingSource:
    identity = "stub"

    async def list_catalog(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover
        raise AssertionError("not called: the stub hands out its catalog")


class _StubCache:
    """A catalog that reached an integration without `catalog_reply` (the reviewer's)."""

    source = _ListingSource()

    async def tools(self, **_: Any) -> Catalog:
        items = frozen([{"name": "ok", "inputSchema": {"type": "object"}}, {"description": "x"}])
        return Catalog("tools", "fresh", items=items)


def _unused_server() -> Any:
    from agents.mcp import MCPServerStreamableHttp

    return MCPServerStreamableHttp({"url": "http://127.0.0.1:9/unused"}, name="guides")


async def test_langchain_load_tools_skips_a_nameless_tool() -> None:
    tools = await load_tools(_StubCache())  # type: ignore[arg-type]
    assert [t.name for t in tools] == ["ok"]


async def test_pydantic_ai_toolset_skips_a_nameless_tool() -> None:
    tools = await FreshToolset(_StubCache()).get_tools(None)  # type: ignore[arg-type]
    assert list(tools) == ["ok"]


async def test_agents_sdk_server_skips_a_tool_the_sdk_refuses() -> None:
    fresh = FreshMCPServer(_unused_server(), _StubCache())  # type: ignore[arg-type]
    assert [t.name for t in await fresh.list_tools()] == ["ok"]
