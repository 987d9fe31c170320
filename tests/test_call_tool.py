"""`FreshCache.call_tool`: an "unknown tool" answer revalidates the tool catalog
(issue 26 part 3); a call runs at most once, against the definition the caller saw
(issue 34). Real HTTP on loopback against the reference server, whose ``tools/call``
answers a tool it lists and refuses any other with ``-32602``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from freshcache import ConfigurationError, FreshCache, HttpSource, RequestFailed
from freshcache._protocol._tools import ToolReply, refused_as_unknown
from freshcache.acceptance import InMemorySource, ReferenceServer, _protocol
from freshcache.acceptance._http_server import ReferenceHttpServer
from freshcache.sync import SyncFreshCache
from tests.polling import reads_done, until

pytestmark = pytest.mark.anyio

U = "guide://shipping/approval"
SEARCH = {"name": "search", "inputSchema": {"type": "object"}}
SEARCH_V2 = {"name": "search", "inputSchema": {"type": "object", "required": ["q"]}}
LOOKUP = {"name": "lookup", "inputSchema": {"type": "object"}}
CENTS = {"name": "pay", "description": "amount in cents", "inputSchema": {"type": "object"}}
DOLLARS = {**CENTS, "description": "amount in dollars"}


def _described(cache: FreshCache, description: str) -> bool:
    """Whether the cache holds a fresh tools catalog whose first tool says ``description``."""
    held = cache.catalog_status("tools")
    return held.state == "fresh" and held.items[0].get("description") == description


@asynccontextmanager
async def cache_on(server: ReferenceServer) -> AsyncIterator[FreshCache]:
    server.set(U, "v1")
    async with (
        ReferenceHttpServer(server) as http,
        FreshCache(HttpSource(http.url), select=[U], read_timeout=5.0) as cache,
    ):
        await until(lambda: cache.stream_status == "live")  # its ack re-lists what it covers
        await until(lambda: reads_done(cache))
        yield cache


async def test_a_listed_tool_is_answered_without_a_re_list() -> None:
    server = ReferenceServer()
    async with cache_on(server) as cache:
        await cache.tools()
        lists = server.catalogs.lists.get("tools", 0)
        call = await cache.call_tool("search", {"q": "returns"})
        assert call.state == "answered" and call.ok and not call.retried
        assert call.text == 'search called with {"q": "returns"}'
        assert server.catalogs.lists.get("tools", 0) == lists
        assert server.tool_calls == ["search"]


async def test_a_tool_the_server_dropped_re_lists_once_and_says_it_is_gone() -> None:
    server = ReferenceServer()
    async with cache_on(server) as cache:
        assert (await cache.tools()).names == ("search",)
        server.set_catalog("tools", [LOOKUP], notify=False)  # renamed, nothing heard
        assert (await cache.tools()).names == ("search",)  # the old list, still in its TTL
        call = await cache.call_tool("search", {"q": "x"})
        assert call.state == "unknown_tool" and not call.retried
        assert call.catalog is not None and call.catalog.names == ("lookup",)
        assert server.tool_calls == ["search"]  # no retry of a tool the new list lacks
        assert (await cache.tools()).names == ("lookup",)  # the next step sees the new list


async def test_a_tool_whose_schema_changed_is_not_sent_the_old_arguments() -> None:
    # Issue 34: a re-registered tool refused once as unknown came back taking other
    # arguments; the caller's, built for the old schema, must not be sent to it.
    server = ReferenceServer()
    async with cache_on(server) as cache:
        await cache.tools()
        server.set_catalog("tools", [SEARCH_V2], notify=False)  # its inputSchema changed
        server.tools_unknown_once.add("search")
        call = await cache.call_tool("search", {})
        assert call.state == "tool_changed" and not call.retried, call
        assert call.tool is not None and call.tool["inputSchema"]["required"] == ("q",)
        assert server.tool_calls == ["search"]


async def test_a_changed_description_is_a_changed_definition() -> None:
    # "amount in cents" becoming "amount in dollars" changes no schema, yet the
    # caller's arguments mean another thing: not sent again.
    server = ReferenceServer()
    cents = {"name": "pay", "description": "amount in cents", "inputSchema": {"type": "object"}}
    async with cache_on(server) as cache:
        server.set_catalog("tools", [cents], notify=False)
        await cache.tools()
        server.set_catalog("tools", [{**cents, "description": "amount in dollars"}], notify=False)
        server.tools_unknown_once.add("pay")
        call = await cache.call_tool("pay", {"amount": 500})
        assert call.state == "tool_changed" and call.tool is not None
        assert call.tool["description"] == "amount in dollars"
        assert server.tool_calls == ["pay"]


async def test_refused_as_unknown_and_listed_as_seen_is_sent_once_more() -> None:
    # The server refused before it ran (-32602 "Unknown tool: search": a registry
    # reloading) and lists the tool exactly as the caller saw it: one more send.
    server = ReferenceServer()
    async with cache_on(server) as cache:
        seen = await cache.tools()
        server.tools_unknown_once.add("search")
        call = await cache.call_tool("search", {}, seen=seen)
        assert call.state == "answered" and call.retried, call
        assert call.catalog is not None and call.catalog.names == ("search",)
        assert server.tool_calls == ["search", "search"]


async def test_without_seen_a_refused_call_is_never_sent_again() -> None:
    # No `seen=`: what the arguments were built from is unknown. The catalog the cache
    # settled since (here a background re-list after list_changed) is not what the
    # caller saw: the refused call is not sent again, the caller gets the new tool.
    server = ReferenceServer()
    async with cache_on(server) as cache:
        server.set_catalog("tools", [CENTS], notify=False)
        await cache.tools()  # the caller builds cents arguments from this
        server.set_catalog("tools", [DOLLARS], notify=True)
        await until(lambda: _described(cache, "amount in dollars"))  # nobody handed it
        server.tools_unknown_once.add("pay")
        call = await cache.call_tool("pay", {"amount": 500})
        assert call.state == "tool_changed" and not call.retried, call
        assert call.tool is not None and call.tool["description"] == "amount in dollars"
        assert server.tool_calls == ["pay"]


async def test_a_change_the_cache_already_holds_stops_the_first_send() -> None:
    # The caller saw cents; the cache has since heard list_changed and holds a fresh
    # catalog with dollars: nothing is sent with the cents arguments.
    server = ReferenceServer()
    async with cache_on(server) as cache:
        server.set_catalog("tools", [CENTS], notify=False)
        seen = await cache.tools()
        server.set_catalog("tools", [DOLLARS], notify=True)
        await until(lambda: _described(cache, "amount in dollars"))
        call = await cache.call_tool("pay", {"amount": 500}, seen=seen)
        assert call.state == "tool_changed" and call.tool is not None, call
        assert call.tool["description"] == "amount in dollars"
        assert server.tool_calls == []
        same = await cache.call_tool("pay", {"amount": 5}, seen=await cache.tools())
        assert same.state == "answered" and server.tool_calls == ["pay"], same


async def test_a_catalog_overtaken_by_a_change_heard_is_no_ground_to_refuse() -> None:
    # The cache handed out cents, then heard list_changed; its re-list fails. A caller
    # that saw dollars elsewhere is not told the tool "changed" back to the cents the
    # cache knows to be outdated: with no catalog it can vouch for, the call goes out.
    server = ReferenceServer()
    async with cache_on(server) as cache:
        server.set_catalog("tools", [CENTS], notify=False)
        assert (await cache.tools()).items[0]["description"] == "amount in cents"
        server.catalogs.faults["tools"] = "server_error"
        server.set_catalog("tools", [DOLLARS], notify=True)
        await until(lambda: cache.catalog_status("tools").state != "fresh")
        call = await cache.call_tool("pay", {"amount": 5}, seen=DOLLARS)
        assert call.state == "answered" and server.tool_calls == ["pay"], call


async def test_the_caller_names_the_definition_it_built_the_arguments_from() -> None:
    server = ReferenceServer()
    async with cache_on(server) as cache:
        seen = await cache.tools()
        item = seen.items[0]
        server.tools_unknown_once.add("search")
        by_item = await cache.call_tool("search", {}, seen=item)  # a frozen catalog item
        assert by_item.state == "answered" and by_item.retried
        server.tools_unknown_once.add("search")
        by_version = await cache.call_tool("search", {}, seen=seen.version)
        assert by_version.state == "answered" and by_version.retried
        server.tools_unknown_once.add("search")
        other = await cache.call_tool("search", {}, seen="an older catalog version")
        assert other.state == "tool_changed" and not other.retried  # unknown: never resent
        assert server.tool_calls == ["search"] * 5
        with pytest.raises(ConfigurationError, match="seen="):
            await cache.call_tool("search", {}, seen=LOOKUP)


async def test_at_most_one_retry(monkeypatch: Any) -> None:
    server = ReferenceServer()
    async with cache_on(server) as cache:
        seen = await cache.tools()

        def refuse(server_: Any, request_id: Any, params: dict[str, Any]) -> Any:
            server_.tool_calls.append(params["name"])
            return _protocol.Reply(_protocol.error(request_id, -32602, "Unknown tool: search"))

        monkeypatch.setattr(_protocol, "tool_call_answer", refuse)
        call = await cache.call_tool("search", {}, seen=seen)
        assert call.state == "not_found" and call.retried
        assert server.tool_calls == ["search", "search"]


async def test_a_tool_error_result_is_never_run_twice(monkeypatch: Any) -> None:
    # A CallToolResult with isError means the tool ran (its side effects happened),
    # whatever its text says; the reviewer's case: an ordinary failure that mentions
    # "tool ... no longer" was taken for "unknown tool" and the tool ran twice.
    server = ReferenceServer()
    async with cache_on(server) as cache:
        server.set_catalog("tools", [SEARCH], notify=False)
        seen = await cache.tools()
        texts = ["The search tool failed: the index main no longer exists", "Unknown tool: search"]
        runs: list[str] = []

        def answer(server_: Any, request_id: Any, params: dict[str, Any]) -> Any:
            runs.append(params["name"])
            text = texts[len(runs) - 1]
            result = {"isError": True, "content": [{"type": "text", "text": text}]}
            return _protocol.Reply(_protocol._result(request_id, result))

        monkeypatch.setattr(_protocol, "tool_call_answer", answer)
        first = await cache.call_tool("search", {}, seen=seen)
        assert runs == ["search"] and first.state == "answered" and first.is_error
        # says unknown, yet listed: it ran once
        second = await cache.call_tool("search", {}, seen=seen)
        assert runs == ["search", "search"] and second.state == "answered", second
        assert not second.retried and second.text == "Unknown tool: search"


async def test_no_fresh_catalog_after_the_error_is_an_explicit_state() -> None:
    server = ReferenceServer()
    async with cache_on(server) as cache:
        await cache.tools()
        server.set_catalog("tools", [LOOKUP], notify=False)
        server.catalogs.faults["tools"] = "server_error"
        call = await cache.call_tool("search", {})
        assert call.state == "awaiting_fresh_source" and call.reason == "server_error"
        assert call.result is None and server.tool_calls == ["search"]


def _error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


UNKNOWN_FORMS = [
    # (the answer, whether it refuses the call of "pay" as an unknown tool)
    (RequestFailed("not_found", "Unknown tool: pay", -32602), True),  # spec, Python SDK 2.x
    (RequestFailed("not_found", "MCP error -32602: Tool pay not found", -32602), True),  # TS
    (RequestFailed("not_found", "Tool pay not found", -32602), True),  # TS, as a JSON-RPC error
    (_error("Unknown tool: pay"), True),  # Python SDK 1.x FastMCP, 2.x MCPServer
    (_error("Unknown tool: 'pay'"), True),  # fastmcp
    (_error("MCP error -32602: Tool pay not found"), True),  # TypeScript SDK McpServer
    (_error("MCP error -32602: Tool pay disabled"), True),  # TypeScript SDK, disabled
    (RequestFailed("not_found", 'invalid params: unknown tool "pay"', -32602), True),
    # another tool, another code, no answer, not an error: no
    (RequestFailed("not_found", "Unknown tool: payments", -32602), False),
    (RequestFailed("server_error", "Unknown tool: pay (-32603)", -32603), False),
    (RequestFailed("unreachable", "Unknown tool: pay"), False),
    ({"content": [{"type": "text", "text": "Unknown tool: pay"}]}, False),
    # a tool's own failures that mention "not found" or tools (issue 34, issue 26)
    (RequestFailed("server_error", "tool pay failed: customer record not found", -32603), False),
    (RequestFailed("not_found", "Invalid arguments for tool pay: amount", -32602), False),
    (_error("MCP error -32602: Input validation error: amount must be a number"), False),
    (_error("Unknown tool: pay (its backend reloaded while it ran)"), False),
    (_error("The pay tool failed: the customer record was not found"), False),
    (_error("Error executing tool pay: Tool pay not found in the ledger"), False),
]


@pytest.mark.parametrize(("outcome", "unknown"), UNKNOWN_FORMS)
def test_which_answers_refuse_the_call_as_an_unknown_tool(outcome: Any, unknown: bool) -> None:
    assert refused_as_unknown("pay", outcome) is unknown


class _BrokenTools(InMemorySource):
    """A source whose own ``call_tool`` raises, or never answers."""

    def __init__(self, server: ReferenceServer, *, hang: bool) -> None:
        super().__init__(server)
        self.hang = hang

    async def call_tool(
        self, params: Mapping[str, Any], principal: str | None, tool: Any
    ) -> ToolReply | RequestFailed:
        if self.hang:
            await anyio.Event().wait()  # never set: only the caller's timeout ends it
        raise RuntimeError("the in-memory tool broke")


async def test_a_sources_own_call_tool_that_raises_is_a_state_not_an_exception() -> None:
    async with FreshCache(_BrokenTools(ReferenceServer(), hang=False)) as cache:
        call = await cache.call_tool("search", {})
        # It may have sent the call before it broke: the tool may have run.
        assert (call.state, call.reason) == ("may_have_run", "server_error")
        assert call.detail is not None and "the in-memory tool broke" in call.detail


async def test_a_sources_own_call_tool_keeps_the_callers_timeout() -> None:
    async with FreshCache(_BrokenTools(ReferenceServer(), hang=True)) as cache:
        with anyio.fail_after(10):  # a guard only: the call's own timeout must end it
            call = await cache.call_tool("search", {}, timeout=0.2)
        assert (call.state, call.reason) == ("may_have_run", "timeout")


WRONG_CALLS = [(5, None), ("", None), ("search", ["a"]), ("search", "q=1")]


@pytest.mark.parametrize(("name", "arguments"), WRONG_CALLS)
async def test_a_tool_name_or_arguments_of_the_wrong_kind_is_a_configuration_error(
    name: Any, arguments: Any
) -> None:
    server = ReferenceServer()
    async with FreshCache(InMemorySource(server)) as cache:
        with pytest.raises(ConfigurationError, match=r"^call_tool\(\) takes"):
            await cache.call_tool(name, arguments)
    assert server.tool_calls == []  # nothing sent


def test_the_sync_cache_says_the_same_of_a_wrong_tool_name_or_arguments() -> None:
    server = ReferenceServer()
    with SyncFreshCache(InMemorySource(server)) as cache:
        for name, arguments in WRONG_CALLS:
            with pytest.raises(ConfigurationError, match=r"^call_tool\(\) takes"):
                cache.call_tool(name, arguments)  # type: ignore[arg-type]
    assert server.tool_calls == []
