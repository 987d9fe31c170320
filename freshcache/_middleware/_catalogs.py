"""Catalogs through the cache: ``tools()``, ``prompts()``, ``resource_templates()``.

The I/O around the core's `CatalogBook` (which decides what is fresh): one walk per
catalog and principal at a time, shared by every caller (single flight), the caller's
deadline (the walk goes on in the background after it), background re-lists the
engine decides on (a ``*/list_changed``, an acknowledgment), and `CatalogChange`
items for `FreshCache.changes`. A fresh hit is one engine lookup that hands out the
same immutable `Catalog` every time: no I/O, no copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup

from .._core import (
    CATALOG_KINDS,
    CATALOG_METHODS,
    FRESH,
    Catalog,
    CatalogChange,
    CatalogKind,
    CatalogWalk,
    FreshnessEngine,
    ListReply,
    Partition,
    Relist,
    RequestFailed,
    StreamEvent,
)
from .._errors import ConfigurationError, FreshCacheError, MethodNotFoundError, ProtocolError
from .._sources._source import Source, no_catalogs
from ._setup import checked_deadline
from ._telemetry import Telemetry

if TYPE_CHECKING:
    from ._context import ChangeFeed


@dataclass(slots=True)
class _Walking:
    """One walk of a catalog for a partition that every concurrent caller shares."""

    done: anyio.Event
    walk: CatalogWalk | None = None
    result: Catalog | None = None
    error: ProtocolError | None = None


class CatalogLister:
    """Walks catalogs for `FreshCache` (see the module docstring)."""

    def __init__(
        self,
        engine: FreshnessEngine,
        telemetry: Telemetry,
        feed_hints: Callable[[tuple[StreamEvent, ...]], None],
        source: Callable[[], Source],
        changes: ChangeFeed,
        default_partition: Callable[[], Partition],
    ) -> None:
        self._engine = engine
        self._telemetry = telemetry
        self._feed_hints = feed_hints
        self._source = source
        self._changes = changes
        self._default_partition = default_partition
        self._walking: dict[tuple[CatalogKind, Partition], _Walking] = {}
        self._last: dict[CatalogKind, tuple[str, str | None]] = {}
        self.tg: TaskGroup | None = None

    async def get(self, kind: CatalogKind, partition: Partition, deadline: float) -> Catalog:
        """The catalog: fresh (a hit, or after a walk), or an explicit state."""
        hit = self._engine.catalog_lookup(kind, partition)
        if hit is not None:
            return hit
        with anyio.move_on_after(deadline):
            while True:
                walking = self._walking.get((kind, partition)) or self._launch(kind, partition)
                await walking.done.wait()
                if walking.error is not None:
                    raise walking.error
                result, walk = walking.result, walking.walk
                assert result is not None
                assert walk is not None
                # A change heard between the walk's end and this wake-up: the items
                # from before it must not be handed out (invariant 1).
                if result.state == FRESH and not self._engine.catalog_current(walk):
                    continue
                return result
        return self._engine.catalogs.timed_out(kind, partition)

    def relist(self, kind: str) -> None:
        """The engine decided on a re-list of ``kind`` (a change, an acknowledgment)."""
        if kind in CATALOG_KINDS:
            catalog_kind: CatalogKind = kind
            self.observe(self._engine.catalog_status(catalog_kind, self._default_partition()))
            partition = self._default_partition()
            if self.tg is not None and (catalog_kind, partition) not in self._walking:
                self._launch(catalog_kind, partition)

    def _launch(self, kind: CatalogKind, partition: Partition) -> _Walking:
        if self.tg is None:
            raise FreshCacheError("use FreshCache inside 'async with' before listing")
        walking = _Walking(anyio.Event())
        self._walking[(kind, partition)] = walking
        self.tg.start_soon(self._run, kind, partition, walking)
        return walking

    async def _run(self, kind: CatalogKind, partition: Partition, walking: _Walking) -> None:
        try:
            walking.walk = self._engine.begin_catalog(kind, partition)
            # A fleet's source may take another worker's walk (`SharedCatalogs`).
            shared = getattr(self._source(), "shared_catalogs", None)
            if shared is not None:
                walking.result = await shared.walk(walking.walk, self._walk)
            else:
                walking.result = await self._walk(walking.walk)
        except ProtocolError as exc:
            walking.error = exc
        finally:
            if self._walking.get((kind, partition)) is walking:
                del self._walking[(kind, partition)]
            walking.done.set()
        if partition == self._default_partition() and walking.result is not None:
            self.observe(walking.result)

    async def _walk(self, done: CatalogWalk) -> Catalog:
        walk, kind, partition = done.walk, done.kind, done.partition
        source = self._source()
        while (ticket := walk.next_page()) is not None:
            with self._telemetry.request(CATALOG_METHODS[kind]) as span:
                reply = await _one_page(source, kind, ticket.cursor, partition)
                if isinstance(reply, RequestFailed):
                    self._telemetry.request_failed(span, reply)
            self._feed_hints(reply.hints)
            walk.landed(ticket, reply)
        return self._engine.settle_catalog(done)

    def observe(self, catalog: Catalog) -> None:
        """Report a catalog's (state, version) to `changes()` subscribers if it moved."""
        if not self._changes.active:
            self._last.clear()
            return
        now = (catalog.state, catalog.version)
        before = self._last.get(catalog.kind)
        if before == now:
            return
        self._last[catalog.kind] = now
        self._changes.publish(
            CatalogChange(
                kind=catalog.kind,
                old_state=None if before is None else before[0],  # type: ignore[arg-type]
                old_version=None if before is None else before[1],
                new_state=catalog.state,
                new_version=catalog.version,
                reason=catalog.reason,
            )
        )


async def _one_page(
    source: Source, kind: CatalogKind, cursor: str | None, partition: Partition
) -> ListReply | RequestFailed:
    lister = getattr(source, "list_catalog", None)
    if lister is None:
        return no_catalogs(source, kind)
    try:
        page: ListReply | RequestFailed = await lister(kind, cursor, partition)
    except anyio.get_cancelled_exc_class():
        raise
    except MethodNotFoundError as exc:
        return RequestFailed("not_found", f"the server has no {CATALOG_METHODS[kind]}: {exc}")
    except ProtocolError:
        raise
    except Exception as exc:
        return RequestFailed("server_error", f"source raised {exc!r}")
    return page


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
    _catalogs: CatalogLister
    _tools_rows: dict[Partition, tuple[Catalog, float]]
    _prompts_rows: dict[Partition, tuple[Catalog, float]]
    _templates_rows: dict[Partition, tuple[Catalog, float]]
    _changes: ChangeFeed
    _clock: Callable[[], float]
    _unusable: FreshCacheError | None

    def _feed_hints(self, hints: tuple[StreamEvent, ...]) -> None: ...

    def _set_up_catalogs(self) -> None:
        rows = self.engine.catalogs.rows  # the hit tables (never replaced)
        self._tools_rows = rows["tools"]
        self._prompts_rows = rows["prompts"]
        self._templates_rows = rows["resource_templates"]
        self._catalogs = CatalogLister(
            self.engine,
            self.telemetry,
            self._feed_hints,
            lambda: self.source,
            self._changes,
            lambda: self.principal,
        )

    async def tools(self, *, timeout: float | None = None, principal: str | None = None) -> Catalog:
        """The server's tools: ``fresh`` items, or an explicit state saying why not.

        Same rules as `read`: walked (every page) when not fresh, waiting up to
        ``timeout`` seconds (default ``read_timeout``); the walk goes on after that.
        """
        # The hit path: one dict lookup and one clock compare, as for `read`.
        row = self._tools_rows.get(self.principal if principal is None else principal)
        if row is not None and self._clock() < row[1]:
            return row[0]
        return await self._catalog("tools", timeout, principal)

    async def prompts(
        self, *, timeout: float | None = None, principal: str | None = None
    ) -> Catalog:
        """The server's prompts (see `tools`)."""
        row = self._prompts_rows.get(self.principal if principal is None else principal)
        if row is not None and self._clock() < row[1]:
            return row[0]
        return await self._catalog("prompts", timeout, principal)

    async def resource_templates(
        self, *, timeout: float | None = None, principal: str | None = None
    ) -> Catalog:
        """The server's resource templates (see `tools`)."""
        row = self._templates_rows.get(self.principal if principal is None else principal)
        if row is not None and self._clock() < row[1]:
            return row[0]
        return await self._catalog("resource_templates", timeout, principal)

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
                self._catalogs.relist(decision.kind)
        self._catalogs.observe(self.engine.catalog_status(checked, self.principal))

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
        return await self._catalogs.get(kind, partition, deadline)


__all__ = ["CatalogLister", "CatalogMethods", "checked_kind"]
