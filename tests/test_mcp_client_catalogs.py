"""`McpClientSource` catalogs (issue 26) against the official-SDK fixture server over
HTTP on loopback: tools listed through the SDK client, ``tools/list_changed`` heard on
the SDK's listen stream, coverage only where the server honoured and declared it, and
the OpenAI Agents `FreshMCPServer` wired docs/frameworks.md's way (``McpClientSource``) offering
a changed tool list at the next agent step."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from freshcache import FreshCache, McpClientSource
from freshcache._protocol._wire import PROTOCOL_VERSION, revision_at_least
from freshcache._sources._mcp_client import covered_catalogs
from tests.conftest import SdkServer
from tests.polling import until
from tests.test_integrations_tools import _agents_model

pytestmark = pytest.mark.anyio
U = "guide://shipping/approval"
OWN_TOOLS = (
    "set_resource",
    "delete_resource",
    "set_denied",
    "set_ttl",
    "set_ack_exclude",
    "close_listeners",
    "get_state",
)


@asynccontextmanager
async def cache_on(server: SdkServer) -> AsyncIterator[FreshCache]:
    source = McpClientSource.connect(server.url, read_timeout_seconds=5.0)
    async with FreshCache(source, select=[U], read_timeout=5.0) as cache:
        await until(lambda: cache.stream_status in ("live", "unsupported"))
        yield cache


async def control(server: SdkServer, op: str, **fields: Any) -> None:
    await anyio.to_thread.run_sync(lambda: server.control(op, **fields))


async def test_without_a_listen_the_tools_are_listed_before_each_use(
    sdk_server: SdkServer,
) -> None:
    await control(sdk_server, "tools", names=["lookup"], ttl_ms=60_000, notify=False)
    await control(sdk_server, "listen", enabled=False)
    async with cache_on(sdk_server) as cache:
        assert cache.stream_status == "unsupported"
        first = await cache.tools()
        second = await cache.tools()
        assert first.state == second.state == "fresh"
        assert second.server_read  # no stream covers it: never a hit
        prompts = await cache.prompts()  # the fixture has no prompts/list: a state
        assert (prompts.state, prompts.items) == ("not_found", ())


def test_a_catalog_is_covered_only_if_honoured_and_declared() -> None:
    honored = SimpleNamespace(
        tools_list_changed=True, prompts_list_changed=True, resources_list_changed=None
    )
    declared = SimpleNamespace(
        tools=SimpleNamespace(list_changed=True),
        prompts=SimpleNamespace(list_changed=False),
        resources=SimpleNamespace(list_changed=True),
    )
    assert covered_catalogs(honored, declared) == frozenset({"tools"})
    assert covered_catalogs(honored, SimpleNamespace()) == frozenset()


async def test_the_agents_sdk_over_mcp_client_source_sees_a_changed_tool_list_next_step(
    sdk_server: SdkServer,
) -> None:
    from agents import Agent, Runner
    from agents.mcp import MCPServerStreamableHttp

    from freshcache.integrations.openai_agents import FreshMCPServer

    await control(sdk_server, "tools", names=["lookup"], ttl_ms=60_000, notify=False)
    offered: list[list[str]] = []
    answers: list[str] = []
    async with cache_on(sdk_server) as cache:
        assert cache.stream_status == "live"
        first = await cache.tools()  # listed through the SDK client
        assert (first.state, first.names) == ("fresh", (*OWN_TOOLS, "lookup"))
        hit = await cache.tools()  # covered by the listen within its ttlMs: no listing
        assert hit.version == first.version and not hit.server_read

        async def respond(step: int, names: list[str]) -> str | None:
            offered.append(names)
            if step == 1:  # the server renames its tool mid-run and says so
                await control(sdk_server, "tools", names=["search"])
                await until(lambda: "search" in cache.catalog_status("tools").names)
                return "get_state"
            return "search" if step == 2 else None

        wrapped = MCPServerStreamableHttp({"url": sdk_server.url}, name="fixture")
        fresh = FreshMCPServer(wrapped, cache)
        agent = Agent(name="a", model=_agents_model(respond), mcp_servers=[fresh])
        result = await Runner.run(agent, "go")
        answers.extend(str(item) for item in result.new_items)
    assert result.final_output == "done"
    assert "lookup" in offered[0] and "search" not in offered[0]
    assert "search" in offered[1] and "lookup" not in offered[1]  # the next step's list
    assert fresh.catalog is not None and fresh.catalog.ok
    assert any("search ran" in answer for answer in answers)  # through FreshCache.call_tool


@pytest.mark.parametrize(
    ("version", "modern"),
    [
        ("2026-07-28", True),
        ("2027-01-15", True),
        ("2025-11-25", False),
        ("DRAFT-2026-v1", False),  # a label, not a date: as a string it sorts after
        ("draft", False),
        ("", False),
        (None, False),
    ],
)
def test_only_a_dated_revision_from_2026_07_28_on_counts_as_carrying_caching_hints(
    version: object, modern: bool
) -> None:
    """Review: the SDK client's protocol version was compared as a string, so a draft
    label counted as a revision whose lists carry ``ttlMs``."""
    assert revision_at_least(version, PROTOCOL_VERSION) is modern
