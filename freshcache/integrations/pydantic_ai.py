"""pydantic-ai: a toolset whose resource reads go through freshcache.

``pip install 'freshcache[pydantic-ai]'`` (from a checkout: ``pip install '.[pydantic-ai]'``).

`fresh_resources(cache)` is a ``FunctionToolset`` with one tool, ``read_resource(uri)``:
a fresh result is its text (a blob is ``BinaryContent``); a resource that is
``awaiting_fresh_source`` raises ``ModelRetry`` naming the reason (or, with
``on_awaiting="result"``, returns a sentence saying so); ``denied`` and ``not_found``
are returned as plain sentences the model can act on. No old text is ever returned.
`fresh_instructions(cache, uris)` is the agent-step shape: an instructions function
that puts `FreshCache.context` into the prompt of every run.

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
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Literal

from typing_extensions import assert_never

from .._core import ReadResult
from .._middleware._cache import FreshCache
from . import missing

try:
    from pydantic_ai import ModelRetry, RunContext, Tool
    from pydantic_ai.messages import BinaryContent
    from pydantic_ai.toolsets import FunctionToolset
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without the extra
    raise missing("pydantic_ai", "pydantic-ai") from exc

__all__ = ["fresh_instructions", "fresh_resources"]


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
