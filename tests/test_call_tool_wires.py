"""A tool call runs at most once, against the schema the caller saw (issue 34), on every
transport: HTTP and the SDK client (`McpClientSource`) against the reference server on
loopback, stdio against a real tools-only server process, the in-memory source; the
one deadline; what a catalog hands out is a valid argument; input_required and its
continuation; the span of a call."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from freshcache import FreshCache, HttpSource, McpClientSource, RequestFailed, StdioSource
from freshcache._protocol._client import ClientProtocol
from freshcache._protocol._http import Attempt, HttpBinding, Retry
from freshcache._protocol._reissue import may_reissue
from freshcache._protocol._tools import ToolReply, plain
from freshcache.acceptance import InMemorySource, ReferenceServer
from freshcache.acceptance._http_server import ReferenceHttpServer
from freshcache.acceptance._steps import catalog_items
from tests.polling import until
from tests.telemetry_support import Recorder

pytestmark = pytest.mark.anyio

TOOLS_ONLY = Path(__file__).parent / "fixtures" / "tools_only_server.py"


def reference() -> ReferenceServer:
    server = ReferenceServer()
    server.set("guide://a", "v1")
    server.set_catalog("tools", catalog_items("tools", "v1"), notify=False)
    return server


@asynccontextmanager
async def on_wire(server: ReferenceServer, wire: str, **options: Any) -> AsyncIterator[FreshCache]:
    if wire == "memory":
        async with FreshCache(InMemorySource(server), read_timeout=5.0, **options) as cache:
            yield cache
        return
    async with ReferenceHttpServer(server) as http:
        source = HttpSource(http.url) if wire == "http" else McpClientSource.connect(http.url)
        async with FreshCache(source, read_timeout=5.0, **options) as cache:
            yield cache


WIRES = ["memory", "http", "mcp-client"]


def test_only_reads_and_lists_may_be_re_issued() -> None:
    for method in ("resources/read", "resources/list", "tools/list", "server/discover", "ping"):
        assert may_reissue(method), method
    for method in ("tools/call", "completion/other", "sampling/createMessage", "x/unknown"):
        assert not may_reissue(method), method


@pytest.mark.parametrize(
    ("method", "reissued"),
    [("resources/read", True), ("tools/list", True), ("tools/call", False), ("x/new", False)],
)
def test_a_broken_sse_answer_is_re_issued_only_for_an_idempotent_method(
    method: str, reissued: bool
) -> None:
    binding = HttpBinding(ClientProtocol("test-server"), lambda detail: None)
    judged = binding.judge(
        binding.broken(200, "the SSE answer ended before the answer"),
        method,
        Attempt(),
        can_reauthorize=False,
    )
    if reissued:
        assert isinstance(judged, Retry)
    else:
        assert isinstance(judged, RequestFailed) and judged.lost, judged
        assert "may have run" in judged.detail


@pytest.mark.parametrize("wire", WIRES)
async def test_an_answer_lost_after_the_tool_ran_is_may_have_run_never_a_second_run(
    wire: str,
) -> None:
    server = reference()
    async with on_wire(server, wire) as cache:
        await cache.tools()
        server.tool_faults["help"] = "lost"
        call = await cache.call_tool("help", {"amount": 500})
        assert (call.state, call.retried, call.catalog) == ("may_have_run", False, None), call
        assert server.tool_calls == ["help"]  # it ran once, and was not sent again
        assert call.detail is not None and "may have run" in call.detail


@pytest.mark.parametrize("wire", WIRES)
async def test_a_tools_own_not_found_failure_is_its_answer(wire: str) -> None:
    server = reference()
    async with on_wire(server, wire) as cache:
        await cache.tools()
        lists = server.catalogs.lists.get("tools", 0)
        server.tool_faults["help"] = "fails"
        call = await cache.call_tool("help", {})
        assert (call.state, call.reason, call.catalog) == ("unavailable", "server_error", None)
        assert server.tool_calls == ["help"]
        assert server.catalogs.lists.get("tools", 0) == lists  # no re-list


@pytest.mark.parametrize("wire", WIRES)
async def test_what_a_catalog_hands_out_is_a_valid_argument(wire: str) -> None:
    server = reference()
    async with on_wire(server, wire) as cache:
        tools = await cache.tools()
        schema = tools.items[1]["inputSchema"]  # read-only, deeply frozen
        call = await cache.call_tool("help", {"schema": schema, "list": ("a", ("b",))})
        assert call.state == "answered", call
        assert call.text == 'help called with {"list": ["a", ["b"]], "schema": {"type": "object"}}'


async def test_what_a_catalog_hands_out_is_a_valid_argument_over_stdio() -> None:
    source = StdioSource([sys.executable, str(TOOLS_ONLY)])
    async with FreshCache(source, read_timeout=20.0) as cache:
        tools = await cache.tools()
        assert tools.state == "fresh", tools
        call = await cache.call_tool("pay", {"schema": tools.items[0]["inputSchema"]})
        assert (call.state, call.text) == ("answered", "paid")


@pytest.mark.parametrize("wire", WIRES)
async def test_input_required_is_its_own_outcome_and_the_call_continues(wire: str) -> None:
    server = reference()
    async with on_wire(server, wire) as cache:
        await cache.tools()
        server.tool_faults["help"] = "asks"
        asked = await cache.call_tool("help", {"n": 1})
        assert (asked.state, asked.ok, asked.result) == ("input_required", False, None)
        assert asked.request_state == "confirm-help"
        done = await cache.call_tool("help", {"n": 1}, request_state=asked.request_state)
        assert (done.state, done.text) == ("answered", 'help confirmed, called with {"n": 1}')
        assert server.tool_calls == ["help", "help"]


@pytest.mark.parametrize("wire", ["memory", "http"])
async def test_the_typescript_sdk_unknown_tool_error_re_lists_and_is_not_sent_again(
    wire: str,
) -> None:
    server = reference()
    async with on_wire(server, wire) as cache:
        await cache.tools()
        if wire == "http":  # the stream's ack re-lists what it covers: let that be done
            await until(lambda: cache.stream_status == "live")
            await until(lambda: cache.catalog_status("tools").state == "fresh")
        seen = await cache.tools()
        lists = server.catalogs.lists.get("tools", 0)
        server.tool_faults["help"] = "ts_unknown"
        call = await cache.call_tool("help", {}, seen=seen)
        assert (call.state, call.is_error, call.retried) == ("answered", True, False), call
        assert call.catalog is not None and server.catalogs.lists.get("tools", 0) == lists + 1
        assert server.tool_calls == ["help"]


class _SlowRefusal(InMemorySource):
    """Refuses every call as an unknown tool after ``delay`` seconds; lists of tools
    never answer (a re-list that would take the whole budget again)."""

    delay = 1.0

    async def call_tool(self, params: Mapping[str, Any], principal: str | None, tool: Any) -> Any:
        await anyio.sleep(self.delay)
        self.server.tool_calls.append(str(params["name"]))
        return RequestFailed("not_found", f"Unknown tool: {params['name']}", -32602)

    async def list_catalog(self, kind: Any, cursor: Any, principal: Any) -> Any:
        if self.server.tool_calls:
            await anyio.sleep_forever()
        return await super().list_catalog(kind, cursor, principal)


async def test_timeout_bounds_the_whole_call_re_list_included() -> None:
    server = reference()
    async with FreshCache(_SlowRefusal(server), read_timeout=5.0) as cache:
        await cache.tools()
        started = anyio.current_time()
        with anyio.fail_after(10):  # a guard only
            call = await cache.call_tool("help", {}, timeout=1.5)
        took = anyio.current_time() - started
        # Before: the call (1 s) and then the re-list with the whole 1.5 s again.
        assert took < 2.2, took
        assert (call.state, call.reason) == ("awaiting_fresh_source", "timeout"), call
        assert server.tool_calls == ["help"]


async def test_a_tool_call_span_follows_the_mcp_semantic_conventions() -> None:
    recorder = Recorder.make()
    server = reference()
    try:
        async with on_wire(server, "memory", **recorder.kwargs()) as cache:
            await cache.tools()
            await cache.call_tool("help", {})
            server.tools_error_once.add("help")
            await cache.call_tool("help", {})
        ok, failed = recorder.spans("tools/call help")
        assert dict(ok.attributes or {}) == {
            "mcp.method.name": "tools/call",
            "mcp.protocol.version": "2026-07-28",
            "gen_ai.tool.name": "help",
            "gen_ai.operation.name": "execute_tool",
            "freshcache.tool_call.state": "answered",
        }
        assert (failed.attributes or {})["error.type"] == "tool_error"
        durations = recorder.metrics()["mcp.client.operation.duration"]
        assert ({"mcp.method.name": "tools/call", "gen_ai.tool.name": "help"}, 1) in durations
        failed_point = {
            "mcp.method.name": "tools/call",
            "gen_ai.tool.name": "help",
            "error.type": "tool_error",
        }
        assert (failed_point, 1) in durations
    finally:
        recorder.shutdown()


async def test_no_metric_carries_a_uri() -> None:
    recorder = Recorder.make()
    server = reference()
    try:
        async with on_wire(server, "memory", select=["guide://a"], **recorder.kwargs()) as cache:
            assert (await cache.read("guide://a")).state == "fresh"
            server.set("guide://a", "v2", notify=True)
            await until(lambda: "freshcache.invalidation_to_fresh" in recorder.metrics())
        points = recorder.metrics()["freshcache.invalidation_to_fresh"]
        assert points and all(attrs == {} for attrs, _ in points), points
    finally:
        recorder.shutdown()


def test_plain_thaws_what_catalogs_freeze() -> None:
    from types import MappingProxyType

    frozen = MappingProxyType({"a": (1, MappingProxyType({"b": [2, (3,)]}))})
    assert plain(frozen) == {"a": [1, {"b": [2, [3]]}]}
    assert ToolReply({"content": []}).hints == ()


async def test_a_call_to_a_stdio_process_that_never_spoke_is_not_written_blind() -> None:
    """A process that has answered nothing may exit without reading its stdin (a server
    that is down, started again): a call written to it would be ``may_have_run``. The
    source proves the process reads first (a ``ping``), so the call is reported unsent."""
    never_reads = "import time; time.sleep(0.5)"
    source = StdioSource([sys.executable, "-c", never_reads], timeout=2.0)
    try:
        outcome = await source.forward("tools/call", {"name": "pay", "arguments": {}}, None)
    finally:
        await source.aclose()
    assert isinstance(outcome, RequestFailed), outcome
    assert (outcome.kind, outcome.lost) == ("unreachable", False), outcome
