"""Every list walk of a cache, whatever is listed: ``resources/list``, ``tools/list``,
``prompts/list``, ``resources/templates/list`` (spec pagination, invariants 1, 3, 14).

One machine, the thing listed a parameter (`ListKind`): the I/O around the core's
`ListWalk`, which decides which page to fetch, when to start again and when to give up
(its window closed, its pages or bytes past `Policy.max_list_pages` /
`Policy.max_list_bytes`). `Lister` runs one walk per (kind, partition) at a time, shared
by every caller (single flight); a caller waits up to its deadline, the walk goes on
after it, bounded by those limits; a waiter woken to a result a change already outdated
waits for the next one, at most ``Policy.max_rereads`` times; a `Relist` decision is one
more walk in the background. The engine judges every page and settles every walk.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup

from .._core import (
    AWAITING_FRESH_SOURCE,
    FRESH,
    LIST_METHODS,
    Catalog,
    CatalogChange,
    CatalogKind,
    CatalogWalk,
    Decision,
    FreshnessEngine,
    ListKind,
    ListReply,
    ListResult,
    ListWalk,
    Partition,
    RequestFailed,
    StreamEvent,
)
from .._core._model import moved
from .._errors import FreshCacheError, MethodNotFoundError, ProtocolError
from .._sources._source import Source, no_catalogs
from ._flights import rewaits
from ._telemetry import Telemetry

if TYPE_CHECKING:
    from ._context import ChangeFeed

Listed = Catalog | ListResult
"""What a walk hands out: a catalog, or the resource list."""

_KINDS: dict[str, ListKind] = {kind: kind for kind in LIST_METHODS}


@dataclass(slots=True)
class _Walking:
    """One walk of a list for a partition that every concurrent caller shares."""

    kind: ListKind
    partition: Partition
    done: anyio.Event
    relist: bool = False
    """A `Relist` decision asked for it: when complete, the engine hears what it holds."""
    generation: int = 0
    """The list's generation its result is true under (set when it settles)."""
    closes_at: float = float("inf")
    """When its result stops being true (`ListWalk.closes_at`, set when it settles)."""
    result: Listed | None = None
    error: ProtocolError | None = None


class Lister:
    """Walks every list for `FreshCache` (see the module docstring)."""

    def __init__(
        self,
        engine: FreshnessEngine,
        telemetry: Telemetry,
        feed_hints: Callable[[tuple[StreamEvent, ...]], None],
        carry_out: Callable[[list[Decision]], None],
        source: Callable[[], Source],
        changes: ChangeFeed,
        default_partition: Callable[[], Partition],
    ) -> None:
        self._engine = engine
        self._telemetry = telemetry
        self._feed_hints = feed_hints
        self._carry_out = carry_out
        self._source = source
        self._changes = changes
        self._default_partition = default_partition
        self._walking: dict[tuple[ListKind, Partition], _Walking] = {}
        self._last: dict[CatalogKind, tuple[str, str | None, bool]] = {}
        self.tg: TaskGroup | None = None

    @property
    def running(self) -> bool:
        """Whether a walk is under way (a caller's or a background re-list)."""
        return bool(self._walking)

    async def resources(self, partition: Partition, deadline: float) -> ListResult:
        """The whole ``resources/list``: fresh, or an explicit state."""
        listed = await self._get("resources", partition, deadline)
        assert isinstance(listed, ListResult)
        return listed

    async def catalog(self, kind: CatalogKind, partition: Partition, deadline: float) -> Catalog:
        """The catalog: fresh (a hit, or after a walk), or an explicit state."""
        hit = self._engine.catalog_lookup(kind, partition)
        if hit is not None:
            return hit
        listed = await self._get(kind, partition, deadline)
        assert isinstance(listed, Catalog)
        return listed

    async def _get(self, kind: ListKind, partition: Partition, deadline: float) -> Listed:
        with anyio.move_on_after(deadline):
            for _ in range(rewaits(self._engine.policy)):
                walking = self._walking.get((kind, partition)) or self._launch(kind, partition)
                await walking.done.wait()
                if walking.error is not None:
                    raise walking.error
                result = walking.result
                assert result is not None
                # A change heard, or its window closed, between the walk's end and this
                # wake-up: the engine judges it again as at the walk's end (invariant 1).
                if result.state != FRESH or self._engine.list_current(
                    kind, walking.generation, walking.closes_at
                ):
                    return result
            return self._outdated(kind, partition)
        return self._timed_out(kind, partition)

    def _outdated(self, kind: ListKind, partition: Partition) -> Listed:
        """Changes kept overtaking every walk this caller waited for."""
        if kind == "resources":
            return ListResult(AWAITING_FRESH_SOURCE, reason="invalidated", server_read=True)
        return self._engine.catalog_status(kind, partition)

    def _timed_out(self, kind: ListKind, partition: Partition) -> Listed:
        if kind == "resources":
            return ListResult(AWAITING_FRESH_SOURCE, reason="timeout", server_read=True)
        return self._engine.catalogs.timed_out(kind, partition)

    def relist(self, kind: str, cause: str | None = None) -> None:
        """The engine decided on a re-list of ``kind`` for ``cause`` (a change, an
        acknowledgment): one walk in the background, or the one under way, which starts
        again by itself (the change outdated its pages)."""
        listed = _KINDS.get(kind)
        if listed is None:
            return
        partition = self._default_partition()
        if listed != "resources":
            self.observe(self._engine.catalog_status(listed, partition), cause)
        walking = self._walking.get((listed, partition))
        if walking is None and self.tg is not None:
            walking = self._launch(listed, partition)
        if walking is not None:
            walking.relist = True

    def _launch(self, kind: ListKind, partition: Partition) -> _Walking:
        if self.tg is None:
            raise FreshCacheError("use FreshCache inside 'async with' before listing")
        walking = _Walking(kind, partition, anyio.Event())
        self._walking[(kind, partition)] = walking
        self.tg.start_soon(self._run, walking)
        return walking

    async def _run(self, walking: _Walking) -> None:
        kind, partition = walking.kind, walking.partition
        try:
            if kind == "resources":
                walk = ListWalk(self._engine, partition)
                await self._pages(walk, kind, partition)
                assert walk.result is not None
                walking.result = walk.result
                walking.generation = self._engine.list_generation(kind)
                walking.closes_at = walk.closes_at
            else:
                done = self._engine.begin_catalog(kind, partition)
                self._carry_out(self._engine.catalog_asked())
                # A fleet's source may hand over another worker's walk.
                shared = self._source().shared_catalogs
                walking.result = await (
                    self._walk_catalog(done)
                    if shared is None
                    else shared.walk(done, self._walk_catalog)
                )
                walking.generation = done.generation  # what it is true under (settled)
                walking.closes_at = done.walk.closes_at
        except ProtocolError as exc:
            walking.error = exc
        finally:
            if self._walking.get((kind, partition)) is walking:
                del self._walking[(kind, partition)]
            walking.done.set()
        result = walking.result
        if isinstance(result, Catalog) and partition == self._default_partition():
            self.observe(result)
        elif isinstance(result, ListResult) and walking.relist and result.state == FRESH:
            uris = (r.uri for r in result.resources)
            self._carry_out(self._engine.list_complete(uris, self._default_partition()))

    async def _walk_catalog(self, done: CatalogWalk) -> Catalog:
        await self._pages(done.walk, done.kind, done.partition)
        return self._engine.settle_catalog(done)

    async def _pages(self, walk: ListWalk, kind: ListKind, partition: Partition) -> None:
        """Fetch the pages ``walk`` asks for until it is over (the one walk loop)."""
        source = self._source()
        while (ticket := walk.next_page()) is not None:
            with self._telemetry.request(LIST_METHODS[kind]) as span:
                reply = await _one_page(source, kind, ticket.cursor, partition)
                if isinstance(reply, RequestFailed):
                    self._telemetry.request_failed(span, reply)
            self._feed_hints(reply.hints)
            walk.landed(ticket, reply)

    def observe(self, catalog: Catalog, cause: str | None = None) -> None:
        """Report a catalog's (state, version) to `changes()` subscribers if it moved
        (``cause``: what invalidated it, when a re-list decision did), or a change of
        it was heard of while it was not fresh again after a re-proof (as
        `ChangeFeed.observe`)."""
        if not self._changes.active:
            self._last.clear()
            return
        before = self._last.get(catalog.kind)
        now = moved(before, catalog.state, catalog.version, cause)
        if now is None:
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
                cause=cause,
            )
        )


async def _one_page(
    source: Source, kind: ListKind, cursor: str | None, partition: Partition
) -> ListReply | RequestFailed:
    """One page from ``source``; what a source raises becomes a failure, but for a
    protocol error (the caller's to see) and a missing method (``not_found``)."""
    try:
        if kind == "resources":
            return await source.list_resources(cursor, partition)
        lister = source.list_catalog
        if lister is None:
            return no_catalogs(source, kind)
        return await lister(kind, cursor, partition)
    except anyio.get_cancelled_exc_class():
        raise
    except MethodNotFoundError as exc:
        return RequestFailed("not_found", f"the server has no {LIST_METHODS[kind]}: {exc}")
    except ProtocolError:
        raise
    except Exception as exc:
        return RequestFailed("server_error", f"source raised {exc!r}")


__all__ = ["Lister", "Listed"]
