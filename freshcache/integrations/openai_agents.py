"""OpenAI Agents SDK: an ``MCPServer`` whose ``read_resource`` goes through freshcache.

``pip install 'freshcache[openai-agents]'`` (from a checkout: ``pip install '.[openai-agents]'``).

`FreshMCPServer(server, cache)` wraps any ``agents.mcp.MCPServer`` (``MCPServerStdio``,
``MCPServerStreamableHttp``, ...): tools, prompts, lists, ``connect``/``cleanup`` and the
approval and guardrail settings are the wrapped server's; ``read_resource(uri)``
answers from the cache. A ``fresh`` result comes back as the ``ReadResourceResult`` the
SDK would have returned; any other state raises `ResourceWithheldError` (a
`RuntimeError` carrying the results), because ``ReadResourceResult`` has no room for
"not fresh". `FreshMCPServer.context` is the agent-step shape (`FreshCache.context`).

**Wiring.** The Agents SDK server holds its own ``ClientSession``; its
``read_resource`` goes to the server on every call and it does not listen. The cache
gets its own connection to the same server, ``McpClientSource.connect(url)`` (the same
official SDK 2.x underneath): freshcache reads through it and keeps one
``subscriptions/listen`` stream open on it, so a read inside ``ttlMs`` is served from
the cache while no change was heard, and re-read once one was.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from .._errors import ResourceWithheldError
from .._middleware._cache import FreshCache
from .._middleware._context import Context
from . import missing

try:
    from agents.mcp import MCPServer
    from mcp.types import ReadResourceResult
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without the extra
    raise missing("agents", "openai-agents") from exc

__all__ = ["FreshMCPServer"]


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
        return await self.server.list_tools(run_context, agent)

    async def call_tool(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None
    ) -> Any:
        return await self.server.call_tool(tool_name, arguments, meta)

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
