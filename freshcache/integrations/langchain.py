"""LangChain: ``load_resources(cache, uris) -> list[Blob]``, fresh or not at all.

``pip install 'freshcache[langchain]'`` (from a checkout: ``pip install '.[langchain]'``).

Mirrors ``langchain_mcp_adapters.resources.load_mcp_resources(session, uris=...)``:
one ``Blob`` per content item, text as ``str`` and blobs decoded to ``bytes``,
``mime_type`` from the server, ``metadata["uri"]`` the URI asked for (plus
``version``), ``uris=None`` loads every listed resource, and a failure raises a
`RuntimeError`: here `ResourceWithheldError`, carrying every withheld result (state,
reason), or, with ``withheld="skip"``, those URIs are left out.

**Wiring.** ``langchain-mcp-adapters`` pins ``mcp<2`` and cannot be installed beside
``freshcache[mcp]`` (SDK 2.x); this module depends on ``langchain-core`` only. The
cache reaches the server through any freshcache source, e.g.
``McpClientSource.connect(url)``, whose subscription stream is the change feed: a
``load_resources`` call inside ``ttlMs`` costs no server read until a change is heard.

``load_tools(cache)`` mirrors ``load_mcp_tools``: one ``StructuredTool`` per tool of the
cache's *current* tool catalog (`FreshCache.tools`), its JSON schema as the tool's
arguments, each call through `FreshCache.call_tool` (an "unknown tool" answer re-lists
once and retries at most once). Call it at every agent step to follow the server's
list. The result is a list with the catalog beside it (`FreshTools.catalog`): when the
catalog is not fresh (the server is down ...) the list is empty and the catalog says
why, instead of an exception that ends the run.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any, Literal

from .._core import Catalog
from .._core._frozen import thawed
from .._errors import ResourceWithheldError
from .._middleware._cache import FreshCache
from . import missing

try:
    from langchain_core.documents.base import Blob
    from langchain_core.tools import StructuredTool, ToolException
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without the extra
    raise missing("langchain_core", "langchain") from exc

__all__ = ["FreshTools", "load_resources", "load_tools"]


async def load_resources(
    cache: FreshCache,
    uris: str | Iterable[str] | None = None,
    *,
    withheld: Literal["raise", "skip"] = "raise",
    timeout: float | None = None,
) -> list[Blob]:
    """The fresh contents of ``uris`` as LangChain ``Blob`` objects (read concurrently)."""
    if uris is None:
        listing = await cache.list_resources(timeout=timeout)
        if listing.state != "fresh":
            raise RuntimeError(f"cannot list resources: {listing.state} ({listing.reason})")
        wanted = [resource.uri for resource in listing.resources]
    else:
        wanted = [uris] if isinstance(uris, str) else list(uris)
    context = await cache.context(wanted, timeout=timeout)
    if context.withheld and withheld == "raise":
        raise ResourceWithheldError(context.withheld)
    blobs: list[Blob] = []
    for result in context.fresh:
        for item in result.contents:
            data: str | bytes
            if item.text is not None:
                data = item.text
            elif item.blob is not None:
                data = base64.b64decode(item.blob)
            else:
                continue
            metadata = {"uri": result.uri, "version": result.version}
            blobs.append(Blob.from_data(data=data, mime_type=item.mime_type, metadata=metadata))
    return blobs


class FreshTools(list[StructuredTool]):
    """The tools of one `load_tools` call, with the catalog they came from."""

    def __init__(self, tools: Iterable[StructuredTool], catalog: Catalog) -> None:
        super().__init__(tools)
        self.catalog = catalog
        """The tool catalog (its ``state`` and ``reason`` when the list is empty for it)."""


async def load_tools(cache: FreshCache, *, timeout: float | None = None) -> FreshTools:
    """The server's tools as LangChain tools, from the cache's current tool catalog."""
    catalog = await cache.tools(timeout=timeout)
    if not catalog.ok:
        return FreshTools((), catalog)
    usable = (item for item in catalog.items if _named(item))  # never crash on a bad item
    return FreshTools((_tool(cache, item, timeout) for item in usable), catalog)


def _named(item: Any) -> bool:
    name = item.get("name")
    return isinstance(name, str) and bool(name)


def _tool(cache: FreshCache, item: Any, timeout: float | None) -> StructuredTool:
    name = str(item["name"])

    async def call(**arguments: Any) -> str:
        # seen=: the definition this tool was built from (what the model was offered)
        result = await cache.call_tool(name, arguments, timeout=timeout, seen=item)
        if result.ok and not result.is_error:
            return result.text or ""
        reason = f": {result.reason}" if result.reason else ""
        raise ToolException(
            result.detail or result.text or f"{name} could not be called ({result.state}{reason})"
        )

    return StructuredTool(
        name=name,
        description=str(item.get("description") or name),
        args_schema=thawed(item.get("inputSchema") or {"type": "object", "properties": {}}),
        coroutine=call,
        handle_tool_error=True,
    )
