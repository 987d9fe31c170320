"""Tool calls against a tool list the server no longer has: a framework alone and with
freshcache (issue 26 part 4). Run through ``python benchmarks/frameworks.py --tools``.

The reference server (freshcache's, real HTTP on 127.0.0.1) lists one tool; its tool
list changes ``CHANGES`` times during ``steps`` agent steps (the tool is renamed at 1/4,
1/2 and 3/4 of the run) and it sends ``notifications/tools/list_changed`` each time.
Each agent step does what the OpenAI Agents SDK's run loop does on a turn: it takes the
server's tools (``MCPServer.list_tools``) and calls one of them (``call_tool``). A step
after a change starts once the change notification reached the client (as it would
with a model call between two steps); the framework alone has nothing to wait for.

- **alone, cache_tools_list=True**: the SDK's ``MCPServerStreamableHttp`` with its tool
  list cache (the documented setting for speed: the list is fetched once);
- **alone, cache_tools_list=False**: the same server listing on every step;
- **with freshcache**: `FreshMCPServer` over the cache (``HttpSource``): the cache's tool
  catalog at every step, calls through `FreshCache.call_tool`;
- **pydantic-ai alone**: ``MCPToolset`` with its default tool cache, the same steps;
- **pydantic-ai with freshcache**: `fresh_tools(cache)` (``HttpSource``): each step takes
  its tools (``get_tools``, what a run does per step) and calls one through the toolset
  (``call_tool``: `FreshCache.call_tool`; an error comes back as ``ModelRetry``).

Counted: tool calls the server answered "Unknown tool" (made against a list it no
longer has), calls answered, and ``tools/list`` requests the server received. Not a
pass/fail test; no timing.
"""

from __future__ import annotations

from typing import Any

import anyio

from freshcache import FreshCache, HttpSource
from freshcache.acceptance import ReferenceServer
from freshcache.acceptance._http_server import ReferenceHttpServer
from freshcache.integrations.openai_agents import FreshMCPServer
from tests.polling import until

CHANGES = 3
U = "guide://bench/doc"


def tool(version: int) -> dict[str, Any]:
    return {"name": f"search_v{version}", "inputSchema": {"type": "object", "properties": {}}}


async def run(variant: str, steps: int) -> dict[str, Any]:
    from agents.mcp import MCPServerStreamableHttp

    server = ReferenceServer()
    server.set(U, "v1")
    server.set_catalog("tools", [tool(0)], notify=False)
    changes_at = {steps * (n + 1) // (CHANGES + 1) for n in range(CHANGES)}
    unknown = answered = 0
    async with ReferenceHttpServer(server) as http:
        sdk = MCPServerStreamableHttp(
            {"url": http.url}, cache_tools_list=variant == "alone, cached list", name="guides"
        )
        cache = FreshCache(HttpSource(http.url), select=[U])
        mcp: Any = sdk
        async with cache:
            if variant == "with freshcache":
                mcp = FreshMCPServer(sdk, cache)
                await until(lambda: cache.stream_status == "live")
            else:
                await sdk.connect()
            lists_before = server.catalogs.lists.get("tools", 0)
            version = 0
            try:
                for step in range(steps):
                    if step in changes_at:
                        version += 1
                        server.set_catalog("tools", [tool(version)], notify=True)
                        if variant == "with freshcache":
                            new = (tool(version)["name"],)
                            await until(
                                lambda new=new: cache.catalog_status("tools").names in ((), new)
                            )
                    tools = await mcp.list_tools()
                    if not tools:
                        continue
                    try:
                        result = await mcp.call_tool(tools[0].name, {})
                    except Exception:  # the SDK raises the server's "Unknown tool" error
                        unknown += 1
                        continue
                    if result.is_error:
                        unknown += 1
                    else:
                        answered += 1
            finally:
                if variant != "with freshcache":
                    await sdk.cleanup()
            lists = server.catalogs.lists.get("tools", 0) - lists_before
    return {
        "framework": "openai-agents",
        "variant": variant,
        "steps": steps,
        "tool_list_changes": CHANGES,
        "calls_answered": answered,
        "calls_against_a_list_the_server_no_longer_has": unknown,
        "server_tool_calls": len(server.tool_calls),
        "tools_list_requests": lists,
    }


VARIANTS = ("alone, cached list", "alone, list every step", "with freshcache")


async def run_pydantic_ai_alone(steps: int) -> dict[str, Any]:
    """pydantic-ai's ``MCPToolset`` (its default ``cache_tools=True``): each step takes
    its tools (``list_tools``, what ``get_tools`` does per step) and calls one
    (``direct_call_tool``)."""
    from pydantic_ai.mcp import MCPToolset

    server = ReferenceServer()
    server.set(U, "v1")
    server.set_catalog("tools", [tool(0)], notify=False)
    changes_at = {steps * (n + 1) // (CHANGES + 1) for n in range(CHANGES)}
    unknown = answered = version = 0
    async with ReferenceHttpServer(server) as http, MCPToolset(http.url) as toolset:
        lists_before = server.catalogs.lists.get("tools", 0)
        for step in range(steps):
            if step in changes_at:
                version += 1
                server.set_catalog("tools", [tool(version)], notify=True)
            tools = await toolset.list_tools()
            try:
                await toolset.direct_call_tool(tools[0].name, {})
                answered += 1
            except Exception:  # the server's "Unknown tool", raised by the client
                unknown += 1
        lists = server.catalogs.lists.get("tools", 0) - lists_before
    return {
        "framework": "pydantic-ai",
        "variant": "alone, cached list",
        "steps": steps,
        "tool_list_changes": CHANGES,
        "calls_answered": answered,
        "calls_against_a_list_the_server_no_longer_has": unknown,
        "server_tool_calls": len(server.tool_calls),
        "tools_list_requests": lists,
    }


async def run_pydantic_ai_fresh(steps: int) -> dict[str, Any]:
    """pydantic-ai with `fresh_tools(cache)`: each step takes the toolset's tools
    (``get_tools``: the cache's tool catalog) and calls one through it."""
    from pydantic_ai import ModelRetry

    from freshcache.integrations.pydantic_ai import fresh_tools

    server = ReferenceServer()
    server.set(U, "v1")
    server.set_catalog("tools", [tool(0)], notify=False)
    changes_at = {steps * (n + 1) // (CHANGES + 1) for n in range(CHANGES)}
    unknown = answered = version = 0
    async with (
        ReferenceHttpServer(server) as http,
        FreshCache(HttpSource(http.url), select=[U]) as cache,
    ):
        await until(lambda: cache.stream_status == "live")
        toolset = fresh_tools(cache)
        ctx: Any = None  # FreshToolset reads nothing from the run context
        lists_before = server.catalogs.lists.get("tools", 0)
        for step in range(steps):
            if step in changes_at:
                version += 1
                server.set_catalog("tools", [tool(version)], notify=True)
                new = (tool(version)["name"],)
                await until(lambda new=new: cache.catalog_status("tools").names in ((), new))
            tools = await toolset.get_tools(ctx)
            if not tools:
                continue
            name, entry = next(iter(tools.items()))
            try:
                await toolset.call_tool(name, {}, ctx, entry)
                answered += 1
            except ModelRetry:  # the server's "Unknown tool", handed to the model to retry
                unknown += 1
        lists = server.catalogs.lists.get("tools", 0) - lists_before
    return {
        "framework": "pydantic-ai",
        "variant": "with freshcache",
        "steps": steps,
        "tool_list_changes": CHANGES,
        "calls_answered": answered,
        "calls_against_a_list_the_server_no_longer_has": unknown,
        "server_tool_calls": len(server.tool_calls),
        "tools_list_requests": lists,
    }


async def main(steps: int) -> list[dict[str, Any]]:
    rows = [await run(variant, steps) for variant in VARIANTS]
    return [*rows, await run_pydantic_ai_alone(steps), await run_pydantic_ai_fresh(steps)]


def table(rows: list[dict[str, Any]]) -> str:
    first = rows[0]
    lines = [
        f"{first['steps']} agent steps, the server's tool list changed "
        f"{first['tool_list_changes']} times",
        f"{'framework':<14} {'variant':<24} {'answered':>8} {'against a gone list':>20} "
        f"{'tools/list requests':>20}",
    ]
    for row in rows:
        lines.append(
            f"{row['framework']:<14} {row['variant']:<24} {row['calls_answered']:>8} "
            f"{row['calls_against_a_list_the_server_no_longer_has']:>20} "
            f"{row['tools_list_requests']:>20}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(anyio.run(main, 100)))
