"""pydantic-ai: a toolset whose resource reads go through freshcache.

``pip install 'freshcache[pydantic-ai]'`` (from a checkout: ``pip install '.[pydantic-ai]'``).

`fresh_resources(cache)` is a ``FunctionToolset`` with one tool, ``read_resource(uri)``:
a fresh result is its text (a blob is ``BinaryContent``); a resource that is
``awaiting_fresh_source`` raises ``ModelRetry`` naming the reason (or, with
``on_awaiting="result"``, returns a sentence saying so); ``denied`` and ``not_found``
are returned as plain sentences the model can act on. No old text is ever returned.
`fresh_instructions(cache, uris)` is the agent-step shape: an instructions function
that puts `FreshCache.context` into the prompt of every run.

`fresh_tools(cache)` is the server's **tools** as a toolset whose list is the cache's
current tool catalog at every agent step (`FreshCache.tools`): a change heard mid-run
(``notifications/tools/list_changed``) is what the model is offered at the next step,
not the next conversation. A call goes through `FreshCache.call_tool` (an "unknown
tool" answer re-lists once and retries at most once). When the catalog is not fresh
(the server is down, the list is denied ...) the step offers none of its tools and the
instructions say so (`FreshToolset.catalog` holds the state): the run goes on.

**Wiring.** pydantic-ai's ``MCPToolset`` holds its own fastmcp client; its
``read_resource`` goes to the server on every call (its ``cache_resources`` caches the
*list* only, and ignores ``ttlMs``) and it does not listen. Keep the ``MCPToolset`` for
the server's tools, with ``cache_resources=False``, and give the cache its own
connection to the same server, ``McpClientSource.connect(url)``: freshcache reads
through it and keeps one ``subscriptions/listen`` stream open on it, so a resource read
inside its ``ttlMs`` is served from the cache while no change was heard, and re-read
once one was. Do not expose the toolset's resources to the model some other way
(e.g. a tool of your own around ``MCPToolset.read_resource``): those reads bypass
freshness.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Literal

from typing_extensions import assert_never

from .._core import Catalog, ReadResult
from .._core._frozen import thawed
from .._middleware._cache import FreshCache
from .._middleware._tools import ToolCall
from . import missing

try:
    from pydantic_ai import ModelRetry, RunContext, Tool
    from pydantic_ai.messages import BinaryContent
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, ToolsetTool
    from pydantic_core import SchemaValidator, core_schema
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without the extra
    raise missing("pydantic_ai", "pydantic-ai") from exc

__all__ = ["FreshToolset", "fresh_instructions", "fresh_resources", "fresh_tools"]


def fresh_resources(
    cache: FreshCache,
    *,
    uris: Iterable[str] | None = None,
    on_awaiting: Literal["retry", "result"] = "retry",
    timeout: float | None = None,
    name: str = "read_resource",
    max_retries: int | None = None,
) -> FunctionToolset[Any]:
    """A toolset with one tool, ``read_resource(uri)``, that reads through ``cache``.

    ``uris``: the URIs the model may read (default: the cache's selection, read when
    the tool is called; an empty selection allows any URI). ``on_awaiting``:
    ``"retry"`` raises ``ModelRetry`` (the model may call again; pydantic-ai counts the
    retries), ``"result"`` returns a sentence saying the resource is not available yet.
    """
    allowed = None if uris is None else frozenset(uris)

    async def read_resource(uri: str) -> str | BinaryContent:
        permitted = allowed if allowed is not None else cache.selected
        if permitted and uri not in permitted:
            choices = ", ".join(sorted(permitted))
            raise ModelRetry(f"unknown resource {uri!r}; read one of: {choices}")
        result = await cache.read(uri, timeout=timeout)
        return _tool_result(result, on_awaiting)

    description = (
        "Read an MCP resource by URI. Returns its current contents, or says why it "
        "cannot be read now; never an out-of-date copy."
    )
    uri_schema: dict[str, Any] = {"type": "string", "description": "the resource's URI"}
    if allowed:
        # Named in the schema, so the model (and pydantic-ai's TestModel) picks a real one.
        uri_schema["enum"] = sorted(allowed)
    schema = {
        "type": "object",
        "properties": {"uri": uri_schema},
        "required": ["uri"],
        "additionalProperties": False,
    }
    tool = Tool.from_schema(read_resource, name=name, description=description, json_schema=schema)
    return FunctionToolset([tool], max_retries=max_retries)


def fresh_instructions(
    cache: FreshCache,
    uris: Iterable[str],
    *,
    timeout: float | None = None,
    preamble: str | None = "Use only these documents.",
) -> Callable[[RunContext[Any]], Awaitable[str]]:
    """An instructions function (``Agent(instructions=...)``): the step's fresh texts.

    Each run reads ``uris`` at once (`FreshCache.context`); withheld URIs are named,
    never quoted.
    """
    wanted = list(uris)

    async def instructions(ctx: RunContext[Any]) -> str:
        context = await cache.context(wanted, timeout=timeout)
        return context.prompt(preamble=preamble)

    return instructions


def _tool_result(
    result: ReadResult, on_awaiting: Literal["retry", "result"]
) -> str | BinaryContent:
    match result.state:
        case "fresh":
            if result.text is not None:
                return result.text
            for item in result.contents:
                if item.blob is not None:
                    return BinaryContent(
                        data=base64.b64decode(item.blob),
                        media_type=item.mime_type or "application/octet-stream",
                    )
            return ""
        case "awaiting_fresh_source" | "stale":
            # `stale` only with an opt-in policy; its text is old, so it is not handed out here.
            message = (
                f"{result.uri} is not available yet: awaiting a fresh source ({result.reason}). "
                "Do not guess its contents."
            )
            if on_awaiting == "retry":
                raise ModelRetry(message + " Try again.")
            return message
        case "denied":
            return f"{result.uri} is not available to this user (denied). Do not cite it."
        case "not_found":
            return f"{result.uri} does not exist (not_found)."
        case _:
            assert_never(result.state)


_ANY_ARGS = SchemaValidator(schema=core_schema.any_schema())
"""The server validates a tool's arguments (its ``inputSchema`` goes to the model)."""


_OFFERED = "freshcache_offered"
"""The tool's catalog item, kept in its ``ToolDefinition.metadata`` (never sent to the
model): `FreshCache.call_tool`'s ``seen=``, the definition the model built the call from."""


class FreshToolset(AbstractToolset[Any]):
    """The server's tools, from the cache's tool catalog at every step (`fresh_tools`)."""

    def __init__(
        self,
        cache: FreshCache,
        *,
        timeout: float | None = None,
        id: str | None = None,
        max_retries: int = 1,
    ) -> None:
        self.cache = cache
        self.timeout = timeout
        self._id = id
        self.max_retries = max_retries
        self.catalog: Catalog | None = None
        """The tool catalog the latest step was offered (its state when not fresh)."""

    @property
    def id(self) -> str | None:
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        catalog = await self.cache.tools(timeout=self.timeout)
        self.catalog = catalog
        if not catalog.ok:
            return {}  # the server's tools sit this step out; the instructions say why
        tools: dict[str, ToolsetTool[Any]] = {}
        for item in catalog.items:
            if not isinstance(item.get("name"), str) or not item["name"]:
                continue  # a nameless item (a source that does not check): never crash
            tool_def = ToolDefinition(
                name=str(item["name"]),
                description=item.get("description"),
                parameters_json_schema=thawed(item.get("inputSchema") or {"type": "object"}),
                metadata={_OFFERED: thawed(item)},
            )
            tools[tool_def.name] = ToolsetTool(
                toolset=self,
                tool_def=tool_def,
                max_retries=self.max_retries,
                args_validator=_ANY_ARGS,
            )
        return tools

    async def get_instructions(self, ctx: RunContext[Any]) -> str | None:
        catalog = self.catalog
        if catalog is None or catalog.ok:
            return None
        return (
            f"The tools of {self.cache.source.identity} are not available now "
            f"({catalog.state}: {catalog.reason}). Do not call them."
        )

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        offered = (tool.tool_def.metadata or {}).get(_OFFERED)
        seen = offered if isinstance(offered, Mapping) and offered.get("name") == name else None
        call = await self.cache.call_tool(name, tool_args, timeout=self.timeout, seen=seen)
        return _call_result(call)


def fresh_tools(
    cache: FreshCache, *, timeout: float | None = None, id: str | None = None, max_retries: int = 1
) -> FreshToolset:
    """The server's tools as a toolset that follows the cache's tool catalog (module
    docstring). Use it instead of ``MCPToolset``'s tools for the same server."""
    return FreshToolset(cache, timeout=timeout, id=id, max_retries=max_retries)


def _call_result(call: ToolCall) -> Any:
    """What the model gets back: the answer's text (a tool error, an unknown or changed
    tool and a list that could not be proved fresh make it retry with the new list; a
    call that may have run never does)."""
    match call.state:
        case "answered":
            if call.is_error:
                raise ModelRetry(call.text or f"tool {call.name} failed")
            structured = None if call.result is None else call.result.get("structuredContent")
            return call.text if structured is None else thawed(structured)
        case "unknown_tool" | "invalid_tool":  # gone, or left out of the list (x-mcp-header)
            raise ModelRetry(call.detail or f"there is no tool {call.name} any more")
        case "not_found":  # the server refused the call's params: its message says why
            raise ModelRetry(call.detail or f"{call.name} refused these arguments")
        case "denied":
            return f"{call.name} is not available to this user (denied)."
        case "may_have_run":  # never a retry: the tool may have run (issue 34)
            return (
                f"{call.name} was sent and its answer was lost: it may have run. Do not "
                "call it again before checking whether it did."
            )
        case "tool_changed":  # nothing ran; the toolset now offers the new definition
            raise ModelRetry(call.detail or f"{call.name} changed: rebuild the call")
        case "input_required":
            return f"{call.name} needs input this client cannot give; it did not complete."
        case _:
            raise ModelRetry(
                f"{call.name} could not be called now ({call.state}: {call.reason}). "
                "Its server's tool list is not current."
            )
