"""Catalogs through the cache: ``tools()``, ``prompts()``, ``resource_templates()``.

The API only: the core's `CatalogBook` decides what is fresh, the cache's one `Lister`
(`_listing`) walks a catalog as it walks ``resources/list``. A fresh hit is one dict
lookup and one clock compare (`_catalog_hit`, for the three catalogs) that hands out
the same immutable `Catalog` every time: no I/O, no copy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from .._core import (
    CATALOG_KINDS,
    Catalog,
    CatalogKind,
    Decision,
    FreshnessEngine,
    Partition,
    Relist,
    StreamEvent,
)
from .._errors import ConfigurationError, FreshCacheError
from .._sources._source import Source
from ._listing import Lister
from ._setup import checked_deadline
from ._telemetry import Telemetry

if TYPE_CHECKING:
    from ._context import ChangeFeed


def checked_kind(kind: str) -> CatalogKind:
    if kind not in CATALOG_KINDS:
        raise ConfigurationError(f"catalog kind must be one of {CATALOG_KINDS}, got {kind!r}")
    return kind


class CatalogMethods:
    """`FreshCache`'s catalog API (a base class, so `FreshCache` stays one screenful)."""

    principal: str | None
    read_timeout: float
    engine: FreshnessEngine
    source: Source
    telemetry: Telemetry
    _lister: Lister
    _catalog_rows: Mapping[CatalogKind, dict[Partition, tuple[Catalog, float]]]
    _changes: ChangeFeed
    _clock: Callable[[], float]
    _unusable: FreshCacheError | None

    def _feed_hints(self, hints: tuple[StreamEvent, ...]) -> None: ...

    def _carry_out(self, decisions: list[Decision]) -> None: ...

    def _set_up_lists(self) -> None:
        self._catalog_rows = self.engine.catalogs.rows  # the hit tables (never replaced)
        self._lister = Lister(
            self.engine,
            self.telemetry,
            self._feed_hints,
            self._carry_out,
            lambda: self.source,
            self._changes,
            lambda: self.principal,
        )

    async def tools(self, *, timeout: float | None = None, principal: str | None = None) -> Catalog:
        """The server's tools: ``fresh`` items, or an explicit state saying why not.

        Same rules as `read`: walked (every page) when not fresh, waiting up to
        ``timeout`` seconds (default ``read_timeout``); the walk goes on after that.
        """
        hit = self._catalog_hit("tools", principal)
        if hit is None:
            hit = await self._catalog("tools", timeout, principal)
        return hit

    async def prompts(
        self, *, timeout: float | None = None, principal: str | None = None
    ) -> Catalog:
        """The server's prompts (see `tools`)."""
        hit = self._catalog_hit("prompts", principal)
        if hit is None:
            hit = await self._catalog("prompts", timeout, principal)
        return hit

    async def resource_templates(
        self, *, timeout: float | None = None, principal: str | None = None
    ) -> Catalog:
        """The server's resource templates (see `tools`)."""
        hit = self._catalog_hit("resource_templates", principal)
        if hit is None:
            hit = await self._catalog("resource_templates", timeout, principal)
        return hit

    def _catalog_hit(self, kind: CatalogKind, principal: str | None) -> Catalog | None:
        """The hit path, as for `read`: the partition's row in the catalog's hit table
        (`CatalogBook.rows`) and one clock compare; a miss is `_catalog`'s to judge."""
        row = self._catalog_rows[kind].get(self.principal if principal is None else principal)
        return row[0] if row is not None and self._clock() < row[1] else None

    def catalog_status(self, kind: str, *, principal: str | None = None) -> Catalog:
        """What `tools` / `prompts` / `resource_templates` would hand out now, no I/O."""
        partition = self.principal if principal is None else principal
        return self.engine.catalog_status(checked_kind(kind), partition)

    def invalidate_catalog(self, kind: str) -> None:
        """Mark catalog ``kind`` not fresh (reason ``invalidated``): the next call
        re-lists it (e.g. after a ``tools/call`` answered "unknown tool")."""
        checked = checked_kind(kind)
        for decision in self.engine.invalidate_catalog(checked, "invalidated"):
            if isinstance(decision, Relist):
                self._lister.relist(decision.kind, decision.cause)
        self._lister.observe(self.engine.catalog_status(checked, self.principal))

    async def _catalog(
        self, kind: CatalogKind, timeout: float | None, principal: str | None
    ) -> Catalog:
        partition = self.principal if principal is None else principal
        hit = self.engine.catalog_lookup(kind, partition)
        if hit is not None:
            return hit
        if self._unusable is not None:
            raise self._unusable
        deadline = checked_deadline(timeout, self.read_timeout)
        return await self._lister.catalog(kind, partition, deadline)


__all__ = ["CatalogMethods", "checked_kind"]
