"""`McpClientSource` on a 2025-11-25 session (issue 25): the official SDK 2.x client
(``mcp.Client``) against the reference server speaking only 2025-11-25. Over stdio the
session's own ``notifications/tools/list_changed`` cover the tool catalog, so it is
listed once and again only after a change; over HTTP the SDK's GET stream can lose one
unseen, so there it is still listed before each use. Counted at the server."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from freshcache import FreshCache, McpClientSource
from freshcache.acceptance import ReferenceServer
from freshcache.acceptance._http_server import ReferenceHttpServer
from freshcache.acceptance._stdio_server import step_to_json
from freshcache.acceptance._stdio_world import ControlChannel
from freshcache.acceptance._steps import ServerChange, catalog_items
from tests.polling import until

pytestmark = [pytest.mark.anyio, pytest.mark.wire]
U = "guide://shipping/approval"
CALLS = 5


class StdioServer:
    """The reference server over stdio on 2025-11-25, as the SDK client starts it."""

    def __init__(self, folder: Path) -> None:
        self.control_file = folder / "control.json"
        self.control = ControlChannel(self.control_file)
        self.parameters = _stdio_parameters(self.control_file)

    async def command(self, **payload: Any) -> dict[str, Any]:
        await until(self.control_file.exists)
        pid = json.loads(self.control_file.read_text())["pid"]
        reply = await self.control.command(pid, payload)
        assert reply is not None, f"the stdio server {pid} did not answer {payload}"
        return reply

    async def tool_lists(self) -> int:
        return int((await self.command(op="state"))["catalog_lists"])

    async def change_tools(self, version: str) -> None:
        step = ServerChange("catalog_set_notify", "tools", version=version)
        await self.command(op="step", step=step_to_json(step), principal=None)


def _stdio_parameters(control_file: Path) -> Any:
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "freshcache.acceptance._stdio_server",
            "--revision",
            "2025-11-25",
            "--control-file",
            str(control_file),
        ],
        env=dict(os.environ),
    )


@asynccontextmanager
async def cache_over_stdio(tmp_path: Path) -> AsyncIterator[tuple[StdioServer, FreshCache]]:
    server = StdioServer(tmp_path)
    source = McpClientSource.connect(server.parameters, read_timeout_seconds=5.0)
    try:
        async with FreshCache(source, select=[U], read_timeout=5.0) as cache:
            await until(lambda: cache.stream_status in ("live", "unsupported"))
            yield server, cache
    finally:
        await server.control.aclose()


async def test_over_stdio_the_sessions_list_changed_covers_the_tools(tmp_path: Path) -> None:
    """Before: every ``cache.tools()`` sent a ``tools/list`` (5 calls, 5 lists)."""
    async with cache_over_stdio(tmp_path) as (server, cache):
        assert cache.stream_status == "live"
        first = await cache.tools()
        assert first.state == "fresh"
        assert first.server_read
        for _ in range(CALLS - 1):
            hit = await cache.tools()  # covered: a hit, no request
            assert hit.version == first.version
            assert not hit.server_read
        assert await server.tool_lists() == 1

        await server.change_tools("v2")  # and the server says so on the session
        await until(lambda: "search-v2" in cache.catalog_status("tools").names)
        lists = await server.tool_lists()
        assert lists == 2  # the one re-list the change asked for
        for _ in range(CALLS):
            again = await cache.tools()
            assert again.state == "fresh"
            assert "search-v2" in again.names
        assert await server.tool_lists() == lists

        # Resources are not covered on 2025 through the SDK client: read before each use.
        reads = []
        for _ in range(2):
            read = await cache.read(U)
            reads.append((read.state, read.server_read))
        assert reads == [("fresh", True), ("fresh", True)]


async def test_over_stdio_a_dead_server_ends_the_coverage(tmp_path: Path) -> None:
    async with cache_over_stdio(tmp_path) as (server, cache):
        assert (await cache.tools()).state == "fresh"
        assert (await cache.tools()).server_read is False
        await server.command(op="exit")  # the process ends: its session with it
        await cache.read(U)  # the next request finds the transport gone
        await until(lambda: cache.catalog_status("tools").state != "fresh")
        listed = await cache.tools()  # a new process, a new session: listed again
        assert listed.state == "fresh"
        assert listed.server_read


async def test_over_http_the_tools_are_still_listed_before_each_use() -> None:
    """The SDK's 2025 GET stream opens after the handshake and re-opens silently: a
    ``list_changed`` can be lost unseen, so nothing covers the catalog over HTTP."""
    reference = ReferenceServer()
    reference.set(U, "v1")
    reference.catalogs.set("tools", catalog_items("tools", "v1"))
    async with ReferenceHttpServer(reference, revision="2025-11-25") as http:
        source = McpClientSource.connect(http.url, read_timeout_seconds=5.0)
        async with FreshCache(source, select=[U], read_timeout=5.0) as cache:
            await until(lambda: cache.stream_status in ("live", "unsupported"))
            assert cache.stream_status == "unsupported"
            for _ in range(CALLS):
                listed = await cache.tools()
                assert listed.state == "fresh"
                assert listed.server_read
    assert reference.catalogs.lists["tools"] == CALLS


async def test_the_callers_message_handler_still_hears_the_session(tmp_path: Path) -> None:
    heard: list[str] = []

    async def mine(message: Any) -> None:
        heard.append(str(getattr(message, "method", type(message).__name__)))
        await anyio.lowlevel.checkpoint()

    server = StdioServer(tmp_path)
    source = McpClientSource.connect(server.parameters, message_handler=mine)
    try:
        async with FreshCache(source, select=[U], read_timeout=5.0) as cache:
            await until(lambda: cache.stream_status == "live")
            assert (await cache.tools()).state == "fresh"
            await server.change_tools("v2")
            await until(lambda: "notifications/tools/list_changed" in heard)
            await until(lambda: "search-v2" in cache.catalog_status("tools").names)
    finally:
        await server.control.aclose()
