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
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Literal

from .._errors import ResourceWithheldError
from .._middleware._cache import FreshCache
from . import missing

try:
    from langchain_core.documents.base import Blob
except ImportError as exc:  # pragma: no cover - exercised in a subprocess without the extra
    raise missing("langchain_core", "langchain") from exc

__all__ = ["load_resources"]


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
