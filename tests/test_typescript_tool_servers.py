"""Real TypeScript SDK servers answer a call of a tool they do not have with a tool error,
``MCP error -32602: Tool X not found`` (TypeScript SDK 1.x ``McpServer``): freshcache
reads it as "unknown tool" and re-lists (issue 34), and never sends it again.

The servers are the npm packages, unmodified, installed on first use
(`tests/everything_support.py`): ``@modelcontextprotocol/server-everything`` and
``@modelcontextprotocol/server-memory`` (tools only), each over stdio.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from freshcache import FreshCache, StdioSource

from .everything_support import EverythingUnavailable, everything_entry, memory_entry

pytestmark = [pytest.mark.anyio, pytest.mark.wire]


def _entry(which: str) -> Path:
    try:
        return everything_entry() if which == "everything" else memory_entry()
    except EverythingUnavailable as exc:
        pytest.skip(f"no server-{which}: {exc}")


def _source(which: str, tmp_path: Path) -> StdioSource:
    entry = _entry(which)
    if which == "everything":
        return StdioSource(["node", str(entry), "stdio"], timeout=10.0)
    graph = tmp_path / "memory.jsonl"  # server-memory keeps its graph in this file
    script = f'MEMORY_FILE_PATH="{graph}" exec node "{entry}"'
    return StdioSource(["sh", "-c", script], timeout=10.0)


@pytest.mark.parametrize("which", ["everything", "memory"])
async def test_a_typescript_servers_unknown_tool_answer_re_lists_once(
    which: str, tmp_path: Path
) -> None:
    async with FreshCache(_source(which, tmp_path), read_timeout=20.0) as cache:
        tools = await cache.tools()
        assert tools.state == "fresh" and tools.names, tools
        call = await cache.call_tool("no_such_tool", {"amount": 500})
        # Before: the text did not start "Tool X not found", so no re-list: "answered".
        assert call.state == "unknown_tool", call
        assert call.catalog is not None and call.catalog.state == "fresh"
        assert call.catalog.server_read and set(call.catalog.names) == set(tools.names)
        assert not call.retried


async def test_a_typescript_servers_tool_is_called_with_what_its_catalog_handed_out(
    tmp_path: Path,
) -> None:
    async with FreshCache(_source("memory", tmp_path), read_timeout=20.0) as cache:
        tools = await cache.tools()
        create = next(t for t in tools.items if t["name"] == "create_entities")
        # Deep-frozen values from the catalog (a read-only mapping, tuples) ride along:
        # before, "Object of type mappingproxy is not JSON serializable" (a traceback).
        entity = {"name": "pay", "entityType": "tool", "observations": ("cents",)}
        entity["schema"] = create["inputSchema"]  # an extra key the server ignores
        call = await cache.call_tool(create["name"], {"entities": (entity,)})
        assert call.state == "answered" and not call.is_error, call
        graph = await cache.call_tool("read_graph", {})
        assert graph.state == "answered" and graph.text is not None and "cents" in graph.text
