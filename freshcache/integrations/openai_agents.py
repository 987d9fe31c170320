"""OpenAI Agents SDK: an ``MCPServer`` whose ``read_resource`` goes through freshcache.

``pip install 'freshcache[openai-agents]'`` (from a checkout: ``pip install '.[openai-agents]'``).

`FreshMCPServer(server, cache)` wraps any ``agents.mcp.MCPServer`` (``MCPServerStdio``,
``MCPServerStreamableHttp``, ...): tools, prompts, lists, ``connect``/``cleanup`` and the
approval and guardrail settings are the wrapped server's; ``read_resource(uri)``
answers from the cache. A ``fresh`` result comes back as the ``ReadResourceResult`` the
SDK would have returned; any other state raises `ResourceWithheldError` (a
`RuntimeError` carrying the results), because ``ReadResourceResult`` has no room for
"not fresh". `FreshMCPServer.context` is the agent-step shape (`FreshCache.context`).

**Tools.** When the cache's source lists catalogs (`HttpSource`, `StdioSource`,
`McpClientSource`, a `LoaderSource` given ``catalogs=``),
``list_tools`` is the cache's tool catalog at every agent step (`FreshCache.tools`: a
``tools/list_changed`` heard mid-run is what the next step offers) and ``call_tool``
goes through `FreshCache.call_tool` (an "unknown tool" answer re-lists once and
retries at most once; what is left is an ``isError`` result saying so). When the
catalog is not fresh (the server is down, the list refused ...) the step gets no tools
from this server and `FreshMCPServer.catalog` says why: the run goes on instead of
aborting. Otherwise the wrapped server's tools are used, and a failure to list them is
likewise an empty list, logged, not an exception.

**Wiring.** The Agents SDK server holds its own ``ClientSession``; its
``read_resource`` goes to the server on every call and it does not listen. The cache
gets its own connection to the same server, ``McpClientSource.connect(url)`` (the same
official SDK 2.x underneath): freshcache reads through it and keeps one
``subscriptions/listen`` stream open on it, so a read inside ``ttlMs`` is served from
the cache while no change was heard, and re-read once one was.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, cast

from pydantic import ValidationError

from .._core import Catalog
from .._core._frozen import thawed
from .._errors import ResourceWithheldError
from .._middleware._cache import FreshCache
from .._middleware._context import Context
from .._middleware._tools import ToolCall
from .._sources._source import Source, SourceWrapper
from . import missing

try:
    from agents.mcp import MCPServer
    from mcp.types import CallToolResult, ReadResourceResult, TextContent, Tool
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without the extra
    raise missing("agents", "openai-agents") from exc

__all__ = ["FreshMCPServer"]

log = logging.getLogger("freshcache.integrations")


class FreshMCPServer(MCPServer):
    """``server`` with resource reads answered by ``cache`` (fresh, or raised as withheld)."""

    def __init__(self, server: MCPServer, cache: FreshCache, *, timeout: float | None = None):
        super().__init__(
            use_structured_content=server.use_structured_content,
            tool_meta_resolver=server.tool_meta_resolver,
            custom_data_extractor=server.custom_data_extractor,
            tool_input_guardrails=server.tool_input_guardrails,
            tool_output_guardrails=server.tool_output_guardrails,
        )
        # Settings the base class keeps privately: carried over so the wrapped server's
        # approval policy and failure handling still apply to its tools.
        for name in ("_needs_approval_policy", "_failure_error_function"):
            if hasattr(server, name):
                setattr(self, name, getattr(server, name))
        self.server = server
        self.cache = cache
        self.timeout = timeout
        self.catalog: Catalog | None = None
        """The tool catalog the latest step was offered (its state when not fresh)."""

    @property
    def name(self) -> str:
        return self.server.name

    @property
    def cached_tools(self) -> Any:
        return self.server.cached_tools

    async def connect(self) -> None:
        await cast(Any, self.server).connect()

    async def cleanup(self) -> None:
        await cast(Any, self.server).cleanup()

    async def list_tools(self, run_context: Any = None, agent: Any = None) -> Any:
        """The tools to offer this step: the cache's fresh tool catalog, or none."""
        if not _lists_catalogs(self.cache):
            try:
                return await self.server.list_tools(run_context, agent)
            except Exception as exc:  # a server that is down must not abort the run
                log.warning("%s: no tools this step: %r", self.name, exc)
                return []
        catalog = await self.cache.tools(timeout=self.timeout)
        self.catalog = catalog
        if not catalog.ok:
            log.warning("%s: no tools this step (%s: %s)", self.name, catalog.state, catalog.reason)
            return []
        return [tool for tool in map(_sdk_tool, catalog.items) if tool is not None]

    async def call_tool(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None
    ) -> Any:
        if not _lists_catalogs(self.cache):
            return await self.server.call_tool(tool_name, arguments, meta)
        # seen=: the catalog the model was offered (`list_tools`), so a tool changed
        # since is never called with arguments built for its old definition
        call = await self.cache.call_tool(
            tool_name, arguments, timeout=self.timeout, seen=self.catalog
        )
        return _call_result(call)

    async def list_prompts(self) -> Any:
        return await self.server.list_prompts()

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        return await self.server.get_prompt(name, arguments)

    async def list_resources(self, cursor: str | None = None) -> Any:
        return await self.server.list_resources(cursor)

    async def list_resource_templates(self, cursor: str | None = None) -> Any:
        return await self.server.list_resource_templates(cursor)

    async def read_resource(self, uri: str) -> ReadResourceResult:
        """The fresh contents of ``uri``; `ResourceWithheldError` when they are not fresh."""
        result = await self.cache.read(str(uri), timeout=self.timeout)
        if result.state != "fresh":
            raise ResourceWithheldError([result])
        return ReadResourceResult.model_validate(
            {"contents": [item.to_mcp() for item in result.contents]}
        )

    async def context(self, uris: Iterable[str]) -> Context:
        """`FreshCache.context` over this server's cache."""
        return await self.cache.context(uris, timeout=self.timeout)


def _lists_catalogs(cache: FreshCache) -> bool:
    """Whether the cache's own connection can list the server's catalogs."""
    source: Source = cache.source
    while isinstance(source, SourceWrapper):
        source = source.inner
    return source.list_catalog is not None


def _sdk_tool(item: Any) -> Tool | None:
    """The SDK's ``Tool`` for a catalog item; ``None`` (left out, logged) for an item
    the SDK refuses, so one bad item cannot abort the run."""
    try:
        return Tool.model_validate(thawed(item))
    except ValidationError as exc:
        log.warning("a tool item the MCP SDK refuses is left out: %s", exc)
        return None


def _call_result(call: ToolCall) -> CallToolResult:
    """The SDK's ``CallToolResult``: the server's answer, or an error result naming the
    state (the tool is gone from the server's new list, the list is not current ...)."""
    if call.state == "answered" and call.result is not None:
        return CallToolResult.model_validate(thawed(call.result))
    reason = f": {call.reason}" if call.reason else ""
    said = call.state in (
        "unknown_tool",
        "not_found",
        "may_have_run",
        "tool_changed",
        "invalid_tool",
    )
    text = call.detail if said and call.detail else None  # e.g. "it may have run"
    message = text or f"{call.name} could not be called ({call.state}{reason})"
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)
