"""The reference server's catalogs: tools, prompts and resource templates it lists.

Kept beside `ReferenceServer` (which owns the subscribers a change is pushed to): the
items of each catalog, how they page (``ttlMs`` and ``cacheScope`` per page, a cursor
that a change makes stale), and a fault per catalog the tables switch on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .._core import ListReply, RequestFailed
from .._core._frozen import frozen

CatalogFault = Literal["denied", "server_error", "unreachable", "timeout"]


def _default_items() -> dict[str, list[dict[str, Any]]]:
    return {
        "tools": [
            {
                "name": "search",
                "description": "Search the guides",
                "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
            }
        ],
        "prompts": [{"name": "summarize", "description": "Summarize a guide"}],
        "resource_templates": [
            {"name": "guide", "uriTemplate": "guide://{section}/{name}", "mimeType": "text/plain"}
        ],
    }


@dataclass(slots=True)
class ReferenceCatalogs:
    """What the reference server lists as tools, prompts and resource templates."""

    items: dict[str, list[dict[str, Any]]] = field(default_factory=_default_items)
    page_size: int = 100
    ttl_ms: int = 60_000
    scope: Literal["public", "private"] = "private"
    later_pages_ttl_ms: int | None = None
    """``ttlMs`` of pages after the first (default: ``ttl_ms``)."""
    later_pages_scope: Literal["public", "private"] | None = None
    """``cacheScope`` of pages after the first (default: ``scope``)."""
    endless: bool = False
    """Every page names a next cursor, a new one each time (a list that never ends)."""
    list_changed_supported: bool = True
    """Whether listens are granted ``toolsListChanged`` / ``promptsListChanged``."""
    faults: dict[str, CatalogFault] = field(default_factory=dict)
    """Per catalog, what every list request meets until cleared."""
    lists: dict[str, int] = field(default_factory=dict)
    """Pages asked for so far, per catalog."""
    epoch: int = 0

    def set(self, kind: str, items: list[dict[str, Any]]) -> None:
        """Replace a catalog's items (outstanding cursors become invalid)."""
        self.items[kind] = [dict(item) for item in items]
        self.epoch += 1

    def names(self, kind: str) -> list[str]:
        return [str(item.get("name")) for item in self.items.get(kind, [])]

    def page(
        self, kind: str, cursor: str | None, principal: str | None, *, down: bool
    ) -> ListReply | RequestFailed:
        """Answer one page of catalog ``kind``."""
        self.lists[kind] = self.lists.get(kind, 0) + 1
        fault = self.faults.get(kind)
        if down or fault == "unreachable":
            return RequestFailed("unreachable", "reference server is down")
        if fault == "denied":
            return RequestFailed("denied", f"principal {principal!r} may not list {kind}")
        if fault in ("server_error", "timeout"):
            return RequestFailed(fault, f"injected fault: {fault}")
        items = self.items.get(kind, [])
        start = 0
        if cursor is not None:
            try:
                epoch, offset = cursor.split(":")
                if int(epoch) != self.epoch:
                    raise ValueError(cursor)
                start = int(offset)
            except ValueError:
                return RequestFailed("not_found", f"Invalid cursor: {cursor!r}", code=-32602)
        end = start + self.page_size
        later = start > 0
        return ListReply(
            (),
            next_cursor=f"{self.epoch}:{end}" if end < len(items) or self.endless else None,
            ttl_ms=self.later_pages_ttl_ms
            if later and self.later_pages_ttl_ms is not None
            else self.ttl_ms,
            cache_scope=self.later_pages_scope
            if later and self.later_pages_scope is not None
            else self.scope,
            items=frozen(items[start:end]),
        )
