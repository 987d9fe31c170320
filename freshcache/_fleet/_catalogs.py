"""Catalogs through the shared store: one walk per change for the whole fleet.

A walk of a catalog the listener's stream covers first looks in the store (`PEEK`
under the catalog's list keys: ``tools``, ``prompts``, ``resources`` for templates).
A current entry is another worker's complete public walk, filled under the list's
generation peeked before its walk began, so it was walked after the list's last
fleet-wide change; the engine alone decides whether it may be taken (`adopt_catalog`).
With no entry, one worker takes the single-flight lock of that generation and walks;
the others wait for its fill, up to `Fleet.fill_lock`, then walk themselves. The fill
is written only if the generation is still the one peeked (fenced otherwise), and only
what the engine offers (`catalog_to_share`): never a private page, never a page from
this worker's own cache. Anything uncovered, or a store that does not answer, walks
directly. A change of a catalog only this worker heard is published first (as the
listener publishes a ``*/list_changed``); until it is, this worker walks itself.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from .._core import DENIED, FRESH, Catalog, CatalogWalk, SharedWalk, catalog_subject
from .._core._frozen import thawed
from ._flight import FillWait, Flight, share
from ._store import Peeked, catalog_lists

if TYPE_CHECKING:
    from ._parts import Binding, ReadsWorker

log = logging.getLogger("freshcache.fleet")

Walk = Callable[[CatalogWalk], Awaitable[Catalog]]
"""The cache's own walk of a catalog (every page, from its cache or the server)."""


class SharedCatalogs:
    """One worker's catalog walks through the shared store (see the module docstring)."""

    def __init__(self, worker: ReadsWorker) -> None:
        self.worker = worker
        self.fill_wait = FillWait()

    async def walk(self, done: CatalogWalk, walk: Walk) -> Catalog:
        """``done``'s catalog: another worker's current walk, or this worker's own."""
        worker = self.worker
        walk = self._own(walk)
        bound = worker.bound
        if bound is None or not worker.channel.usable:
            return await walk(done)
        if not bound.engine.catalog_shared(done):
            mark = bound.engine.catalog_heard_alone(done)
            if mark is None or not await self._publish_alone(done, mark, bound):
                return await walk(done)
            if not bound.engine.catalog_shared(done):
                return await walk(done)
        return await share(worker, _WalkFlight(self, done, walk, bound), self.fill_wait)

    def _own(self, walk: Walk) -> Walk:
        """``walk``, whose outcome is the principal's standing here (`Standing`): a
        refusal ends it (and is announced, so every worker's ends), a complete walk
        from the server proves it."""
        worker = self.worker

        async def own(done: CatalogWalk) -> Catalog:
            catalog = await walk(done)
            subject = catalog_subject(done.kind)
            if catalog.state == DENIED:
                worker.standing.refused(subject, done.partition)
                if worker.channel.usable:
                    try:
                        with anyio.fail_after(worker.config.op_timeout):
                            await worker.shared.deny(subject, done.partition, worker.id)
                    except anyio.get_cancelled_exc_class():
                        raise
                    except Exception as exc:
                        log.debug("fleet catalog denial not announced: %r", exc)
            elif catalog.state == FRESH and done.walk.all_from_server:
                worker.standing.succeeded(subject, done.partition)
            return catalog

        return own

    async def _publish_alone(self, done: CatalogWalk, mark: int, bound: Binding) -> bool:
        """Tell the fleet of a change of ``done``'s catalog only this worker heard (a hint
        on its own answer, "unknown tool", the caller's word), as the listener tells a
        ``*/list_changed``: the list's generation in the store moves past every walk
        filled before it, so a walk the store holds after this may stand in here."""
        try:
            with anyio.fail_after(self.worker.config.op_timeout):
                await self.worker.publish_lists(catalog_lists(frozenset({done.kind})))
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            log.debug("fleet catalog change not published: %r", exc)
            return False
        bound.engine.catalog_published(done.kind, mark)
        return True

    async def _peek(self, kind: str) -> tuple[Peeked, list[Any] | None, float] | None:
        config = self.worker.config
        try:
            with anyio.fail_after(config.op_timeout):
                peeked = await self.worker.shared.peek_catalog(
                    kind, lock_for=self.worker.id, lock_ms=int(config.fill_lock * 1000)
                )
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            log.debug("fleet catalog peek failed: %r", exc)
            return None
        self.worker.store_answered()
        return peeked

    async def _walk_and_fill(
        self, done: CatalogWalk, fence: Peeked, walk: Walk, bound: Binding
    ) -> Catalog:
        worker = self.worker
        try:
            catalog = await walk(done)
        except BaseException:
            # A walk that raised or was cancelled frees the lock at once: the others
            # must not wait out `Fleet.fill_lock` for a fill that will never come.
            with anyio.CancelScope(shield=True):
                await self._unlock(done, fence)
            raise
        try:
            with anyio.fail_after(worker.config.op_timeout):
                share = bound.engine.catalog_to_share(done)
                ttl_ms = 0 if share is None else int(min(share.ttl * 1000, bound.max_ttl_ms))
                if share is not None and ttl_ms > 0:
                    items = [thawed(item) for item in share.items]
                    if await worker.shared.fill_catalog(done.kind, fence, items, ttl_ms):
                        worker.counters.catalog_fills += 1
                    else:
                        worker.counters.fenced_writes += 1  # changed while it was walked
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self._unlock(done, fence)
            raise
        except Exception as exc:
            log.debug("fleet catalog fill failed: %r", exc)
        await self._unlock(done, fence)
        return catalog

    async def _unlock(self, done: CatalogWalk, fence: Peeked) -> None:
        """Free the single-flight lock of ``done``'s walk (bounded; a store that does
        not answer lets it lapse after `Fleet.fill_lock`)."""
        worker = self.worker
        try:
            with anyio.fail_after(worker.config.op_timeout):
                await worker.shared.unlock_catalog(done.kind, fence, worker.id)
        except Exception as exc:
            log.debug("fleet catalog unlock failed: %r", exc)


class _WalkFlight(Flight[tuple[list[Any], float], Catalog]):
    """One walk of ``done``'s catalog through the fleet's loop (`_flight.share`)."""

    def __init__(self, catalogs: SharedCatalogs, done: CatalogWalk, walk: Walk, bound: Binding):
        self.catalogs, self.done, self.walk, self.bound = catalogs, done, walk, bound

    async def peek(self) -> tuple[Peeked, tuple[list[Any], float] | None] | None:
        peeked = await self.catalogs._peek(self.done.kind)
        if peeked is None:
            return None
        fence, items, ttl = peeked
        return fence, (None if items is None else (items, ttl))

    def take(self, fence: Peeked, copy: tuple[list[Any], float]) -> Catalog | None:
        # The engine alone decides whether another worker's walk may stand in for this
        # one (coverage, changes heard alone, the principal's standing here).
        items, ttl = copy
        adopted = self.bound.engine.adopt_catalog(self.done, SharedWalk(tuple(items), ttl))
        if adopted is not None:
            self.catalogs.worker.counters.catalog_takes += 1
        return adopted

    async def refused(self, fence: Peeked) -> Catalog:
        return await self.walk(self.done)

    async def fill(self, fence: Peeked) -> Catalog:
        return await self.catalogs._walk_and_fill(self.done, fence, self.walk, self.bound)

    async def direct(self) -> Catalog:
        return await self.walk(self.done)

    def shared(self) -> bool:
        return self.bound.engine.catalog_shared(self.done)
