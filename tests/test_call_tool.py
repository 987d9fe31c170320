"""`FreshCache.call_tool`: an "unknown tool" answer revalidates the tool catalog
(issue 26 part 3). Real HTTP on loopback against the reference server, whose
``tools/call`` answers a tool it lists and refuses any other with ``-32602``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from freshcache import ConfigurationError, FreshCache, HttpSource, RequestFailed
from freshcache._protocol._tools import catalog_may_be_old
from freshcache.acceptance import InMemorySource, ReferenceServer, _protocol
from freshcache.acceptance._http_server import ReferenceHttpServer
from freshcache.sync import SyncFreshCache
from tests.polling import until

pytestmark = pytest.mark.anyio

U = "guide://shipping/approval"
SEARCH = {"name": "search", "inputSchema": {"type": "object"}}
SEARCH_V2 = {"name": "search", "inputSchema": {"type": "object", "required": ["q"]}}
LOOKUP = {"name": "lookup", "inputSchema": {"type": "object"}}


@asynccontextmanager
async def cache_on(server: ReferenceServer) -> AsyncIterator[FreshCache]:
    server.set(U, "v1")
    async with (
        ReferenceHttpServer(server) as http,
        FreshCache(HttpSource(http.url), select=[U], read_timeout=5.0) as cache,
    ):
        await until(lambda: cache.stream_status == "live")  # its ack re-lists what it covers
        await until(lambda: cache.pending_reads == 0)
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


async def test_a_tool_whose_schema_changed_is_called_again_once() -> None:
    server = ReferenceServer()
    async with cache_on(server) as cache:
        await cache.tools()
        server.set_catalog("tools", [SEARCH_V2], notify=False)  # its inputSchema changed
        server.tools_unknown_once.add("search")
        call = await cache.call_tool("search", {})
        assert call.state == "answered" and call.retried
        assert server.tool_calls == ["search", "search"]


async def test_minus_32602_for_a_tool_listed_unchanged_is_reported_not_retried() -> None:
    # -32602 is also "invalid arguments": a re-list showing the tool unchanged is no
    # ground to send the call again; the caller gets the server's error as is.
    server = ReferenceServer()
    async with cache_on(server) as cache:
        await cache.tools()
        server.tools_unknown_once.add("search")
        call = await cache.call_tool("search", {})
        assert call.state == "not_found" and not call.retried, call
        assert call.detail == "Unknown tool: search"
        assert call.catalog is not None and call.catalog.names == ("search",)
        assert server.tool_calls == ["search"]


async def test_at_most_one_retry() -> None:
    server = ReferenceServer()
    async with cache_on(server) as cache:
        await cache.tools()
        server.set_catalog("tools", [SEARCH_V2], notify=False)
        server.tools_unknown_once.add("search")
        first = await cache.call_tool("search", {})
        assert first.retried and server.tool_calls == ["search", "search"]
        server.tools_unknown_once.add("search")
        server.tools_unknown_once.add("lookup")  # (a name it never lists: no effect)
        again = await cache.call_tool("search", {})  # listed as before: not sent again
        assert again.state == "not_found" and not again.retried
        assert len(server.tool_calls) == 3


async def test_a_tool_error_result_is_never_run_twice(monkeypatch: Any) -> None:
    # A CallToolResult with isError means the tool ran (its side effects happened),
    # whatever its text says; the reviewer's case: an ordinary failure that mentions
    # "tool ... no longer" was taken for "unknown tool" and the tool ran twice.
    server = ReferenceServer()
    async with cache_on(server) as cache:
        server.set_catalog("tools", [SEARCH], notify=False)
        await cache.tools()
        texts = ["The search tool failed: the index main no longer exists", "Unknown tool: search"]
        runs: list[str] = []

        def answer(server_: Any, request_id: Any, params: dict[str, Any]) -> Any:
            runs.append(params["name"])
            text = texts[len(runs) - 1]
            result = {"isError": True, "content": [{"type": "text", "text": text}]}
            return _protocol.Reply(_protocol._result(request_id, result))

        monkeypatch.setattr(_protocol, "tool_call_answer", answer)
        first = await cache.call_tool("search", {})
        assert runs == ["search"] and first.state == "answered" and first.is_error
        second = await cache.call_tool("search", {})  # says unknown, yet listed: ran once
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


@pytest.mark.parametrize(
    ("outcome", "old"),
    [
        (RequestFailed("not_found", "Unknown tool: x", -32602), True),
        (RequestFailed("server_error", "tool 'x' not found", -32000), True),
        (RequestFailed("server_error", "database down", -32603), False),
        (RequestFailed("unreachable", "Unknown tool: x"), False),  # no answer: no word on it
        ({"content": [{"type": "text", "text": "Unknown tool: x"}], "isError": True}, True),
        ({"content": [{"type": "text", "text": "Unknown tool: x"}]}, False),  # not an error
        ({"content": [{"type": "text", "text": "division by zero"}], "isError": True}, False),
        # a tool's own failure that mentions tools in passing (the reviewer's texts)
        ({"content": [{"type": "text", "text": "Invalid tool input: q must be a string"}],
          "isError": True}, False),
        ({"content": [{"type": "text", "text": "The deploy tool failed: main no longer exists"}],
          "isError": True}, False),
    ],
)
async def test_which_answers_mean_the_catalog_may_be_old(outcome: object, old: bool) -> None:
    assert catalog_may_be_old(outcome) is old  # type: ignore[arg-type]


class _BrokenTools(InMemorySource):
    """A source whose own ``call_tool`` raises, or never answers."""

    def __init__(self, server: ReferenceServer, *, hang: bool) -> None:
        super().__init__(server)
        self.hang = hang

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None, principal: str | None
    ) -> dict[str, Any] | RequestFailed:
        if self.hang:
            await anyio.Event().wait()  # never set: only the caller's timeout ends it
        raise RuntimeError("the in-memory tool broke")


async def test_a_sources_own_call_tool_that_raises_is_a_state_not_an_exception() -> None:
    async with FreshCache(_BrokenTools(ReferenceServer(), hang=False)) as cache:
        call = await cache.call_tool("search", {})
        assert (call.state, call.reason) == ("unavailable", "server_error")
        assert call.detail is not None and "the in-memory tool broke" in call.detail


async def test_a_sources_own_call_tool_keeps_the_callers_timeout() -> None:
    async with FreshCache(_BrokenTools(ReferenceServer(), hang=True)) as cache:
        with anyio.fail_after(10):  # a guard only: the call's own timeout must end it
            call = await cache.call_tool("search", {}, timeout=0.2)
        assert (call.state, call.reason) == ("unavailable", "timeout")


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
