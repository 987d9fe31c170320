"""The listener role: one worker per server holds the lease and the real stream.

The lease is a store key (`SET NX PX`) holding ``worker:term``. Its holder opens the
only ``subscriptions/listen`` stream, for the union of the workers' selections, and
publishes what it hears (``resources/updated``, and every ``*/list_changed``: the
catalogs' changes) before its own engine takes it in. The lease is renewed by the
worker's heartbeat (`FleetWorker`: one script, every third of `Fleet.lease`, that also
registers the worker's selection); a holder whose renewal has not landed for three
quarters of the lease, counted from when that renewal was sent, stops leading a quarter
lease before the store can let it lapse.

A lease can lapse while its holder is alive (an event loop starved of CPU for longer
than the lease, a store that was unreachable): another worker may then hold it and a
stream of its own. That is harmless for the promise, since two listeners only ever
publish *more* invalidations; and the old holder learns of it at its next renewal
(`BEAT` says it renewed nothing) and ends its stream, which its followers see as a lost stream
(fail closed, re-listen, re-read). A holder that cannot reach the store stops
listening before the lease can have lapsed, so it never believes it leads when the
store says otherwise for long.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing, suppress
from typing import TYPE_CHECKING, Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from .._core import (
    CatalogListChanged,
    ListenAcknowledged,
    ListenStarted,
    ListenUnsupported,
    ResourceListChanged,
    ResourceUpdated,
    StreamClosed,
    StreamEvent,
    StreamLost,
)
from .._sources._source import Source
from ._store import catalog_lists

if TYPE_CHECKING:
    from ._parts import LeaseWorker

log = logging.getLogger("freshcache.fleet")

STOP_AFTER = 0.75
"""A holder stops leading when no renewal sent in the last three quarters of a lease
landed (renewals are due every third: two chances, and a quarter lease of margin)."""


class ListenerLease:
    """This worker's side of the listener lease, and the stream it holds while leading."""

    def __init__(self, worker: LeaseWorker) -> None:
        self.worker = worker
        self.leading: str | None = None
        """Our lease value (``worker:term``) while this worker holds the listener lease."""
        self.leader: str | None = None
        """The lease holder last seen in the store."""
        self.term = ""
        self.leading_uris: frozenset[str] = frozenset()
        """What our live stream asked for (empty until it is acknowledged)."""
        self._covered: set[str] = set()
        self._catalogs: frozenset[str] = frozenset()
        """The catalogs our live stream's acknowledgment named."""
        self.relaying = 0
        """Events our stream heard that our engine has not taken in yet (published
        first): a fleet is quiet only when this is 0."""
        self._scopes: set[anyio.CancelScope] = set()
        self.renew_by = 0.0
        """While leading: when this worker stops leading unless a renewal lands first
        (`STOP_AFTER` of a lease after the last one that landed was sent)."""
        self.unfenced = False
        """A stream of ours was lost and its fence has not landed: the lease is not
        renewed meanwhile, and if the fence fails we stop leading (no fence, no lead)."""

    @property
    def px(self) -> int:
        return int(self.worker.config.lease * 1000)

    # ------------------------------------------------------------------ the lease

    async def try_lead(self) -> bool:
        """Take the lease if nobody holds it (``True``: we lead now, or already did)."""
        if self.leading is not None:
            return True
        term = secrets.token_hex(6)
        holder = f"{self.worker.id}:{term}"
        sent = anyio.current_time()
        if not await self.worker.shared.take_lease(holder, self.px):
            return False
        self.leading, self.term = holder, term
        self.renew_by = sent + STOP_AFTER * self.worker.config.lease
        self._covered = set()
        self._catalogs = frozenset()
        log.info("fleet worker %s holds the listener lease", self.worker.id)
        self.saw_holder(holder)
        return True

    def saw_holder(self, holder: str | None) -> None:
        """The store says ``holder`` holds the lease: count and report a change."""
        if holder == self.leader:
            return
        self.leader = holder
        self.worker.counters.lease_changes += 1
        mine = holder is not None and holder == self.leading
        self.worker.telemetry.lease_changed(holder, mine)

    def renewable(self) -> str | None:
        """Our lease value, to renew in the next heartbeat; ``None`` when we do not lead,
        or a lost stream of ours is not fenced yet (no fence, no lead: no renewal)."""
        return None if self.unfenced else self.leading

    def renewal_answered(self, holder: str, renewed: bool, sent: float) -> None:
        """The heartbeat sent at ``sent`` renewed ``holder``'s lease, or found it gone."""
        if self.leading != holder:
            return  # stopped meanwhile
        if renewed:
            self.renew_by = sent + STOP_AFTER * self.worker.config.lease
        else:
            # It lapsed (we were starved or cut off) and may be someone else's.
            self.stop("the listener lease lapsed")

    def overdue(self) -> bool:
        """No renewal landed in time: stop leading before the store can have let the
        lease lapse (it counts from the last renewal it saw): never believe we lead
        when we may not."""
        if self.leading is not None and anyio.current_time() >= self.renew_by:
            self.stop("could not renew the listener lease")
        return self.leading is None

    def stop(self, reason: str) -> None:
        """Stop leading: end our stream (its followers fail closed and re-listen)."""
        if self.leading is None:
            return
        log.info("fleet worker %s stops listening: %s", self.worker.id, reason)
        self.worker.telemetry.event("freshcache.fleet.lease_lost", reason=reason)
        self.leading = None
        self.leading_uris = frozenset()
        for scope in list(self._scopes):
            scope.cancel()

    async def goodbye(self) -> None:
        """On close: tell the fleet the stream is gone and free the lease at once."""
        if self.leading is not None:
            await self._announce_down("the listener closed")
            await self.worker.shared.release_lease(self.leading)

    # ------------------------------------------------------------------ the stream

    async def lead(
        self, inner: Source, uris: frozenset[str], list_changed: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        """The real listen stream, for the union of the fleet's selections."""
        worker = self.worker
        assert worker.tg is not None
        union = uris
        try:
            with anyio.fail_after(2 * worker.config.op_timeout):
                union = await worker.shared.union(int(time.time() * 1000)) | uris
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            log.debug("fleet union failed: %r", exc)
        send, receive = anyio.create_memory_object_stream[StreamEvent](1000)
        scope = anyio.CancelScope()
        self._scopes.add(scope)
        pending = [0]  # this stream's share of `relaying`
        worker.tg.start_soon(self._pump, inner, union, list_changed, send, scope, pending)
        sid: str | int | None = None
        covered: frozenset[str] = frozenset()
        ending: str | None = None
        try:
            async with receive:
                async for event in receive:
                    match event:
                        case ListenStarted(subscription_id=started):
                            sid = started
                        case ListenAcknowledged(resource_uris=acked):
                            covered = acked
                            ending = await worker.attempt(
                                self._went_live(union, acked, event.list_changed, event.catalogs)
                            )
                        case ResourceUpdated(uri=uri):
                            ending = await worker.attempt(worker.publish([uri], "updated"))
                        case CatalogListChanged(kind=kind):
                            # Before our own engine takes it in, as for a resource.
                            ending = await worker.attempt(worker.publish_lists([kind]))
                        case ResourceListChanged():
                            ending = await worker.attempt(worker.publish_lists(["resources"]))
                        case StreamLost() | StreamClosed() | ListenUnsupported():
                            ending = await self._fence_or_stop(covered, "stream ended")
                            if ending is None:
                                covered = frozenset()  # fenced: nothing left to fence
                    yield event
                    self.relaying -= 1  # published, and taken in by our engine
                    pending[0] -= 1
                    if isinstance(event, (StreamLost, StreamClosed, ListenUnsupported)):
                        return  # ended: fenced, or we no longer lead (`_fence_or_stop`)
                    if ending is not None:
                        break
            if ending is None and self.leading is None:
                ending = "the listener lease was lost"
            if ending is not None:
                await self._fence_or_stop(covered, ending)
                self.stop(ending)
                yield StreamLost(sid, ending)
        finally:
            scope.cancel()
            self._scopes.discard(scope)
            self.relaying -= pending[0]  # left unread: nobody will take them in
            pending[0] = 0

    async def _went_live(
        self,
        union: frozenset[str],
        covered: frozenset[str],
        list_changed: bool,
        catalogs: frozenset[str],
    ) -> None:
        """A new listener stream was acknowledged: fence off what it newly covers
        (invariant 4 fleet-wide), then tell the followers, naming the catalogs whose
        ``list_changed`` the acknowledgment honoured (a follower covers only those)."""
        newly = sorted(covered - self._covered)
        self._covered |= covered
        # Only catalogs this term's streams did not carry yet: a re-listen of the same
        # term (a selection changed) leaves a walk shared under its coverage true.
        newly_catalogs = catalogs - self._catalogs
        self._catalogs = catalogs
        self.leading_uris = union
        payload = {
            "term": self.term,
            "holder": self.leading,
            "requested": sorted(union),
            "covered": sorted(covered),
            "list_changed": list_changed,
            "catalogs": sorted(catalogs),
        }
        await self.worker.publish(newly, "acknowledged")
        # A catalog walk shared before this term covered it proves nothing after it:
        # fenced off (a new term starts with nothing covered: `try_lead`).
        if newly_catalogs:
            await self.worker.publish_lists(catalog_lists(newly_catalogs), "list_acknowledged")
        await self.worker.shared.announce(self.worker.id, "live", payload, self.px)

    async def _fence_or_stop(self, covered: frozenset[str], reason: str) -> str | None:
        """Fence off what a lost stream covered (`_lost_coverage`); ``None`` when it
        landed. No fence, no lead: the lease is not renewed while the fence is under
        way, and if it fails (the store froze, or is away) this worker stops leading at
        once and keeps trying to fence in the background (its lease lapses meanwhile:
        the followers lose coverage with it). The reason to end the stream, else."""
        self.unfenced = True
        catalogs, term = self._catalogs, self.term
        try:
            failed = await self.worker.attempt(self._lost_coverage(covered, reason))
        finally:
            self.unfenced = False
        if failed is None:
            return None
        ending = f"could not fence the lost stream: {failed}"
        self.stop(ending)
        if self.worker.tg is not None:
            self.worker.tg.start_soon(self._fence_later, covered, catalogs, term, ending)
        return ending

    async def _fence_later(
        self, covered: frozenset[str], catalogs: frozenset[str], term: str, reason: str
    ) -> None:
        """Keep trying the fence of a stream lost while the store did not answer, until
        it lands (once per term fleet-wide: `LOST`) or a new listener has surely fenced
        it with its own acknowledgment (a few leases)."""
        worker, delay = self.worker, 0.02
        deadline = anyio.current_time() + 4 * worker.config.lease
        while anyio.current_time() < deadline:
            try:
                with anyio.fail_after(max(worker.config.op_timeout, worker.config.lease)):
                    await worker.reads.fence_lost(sorted(covered), term)
                    if catalogs:
                        await worker.publish_lists(catalog_lists(catalogs), "list_lost")
                    payload = {"term": term, "reason": reason}
                    await worker.shared.announce(worker.id, "down", payload, self.px)
                worker.telemetry.event("freshcache.fleet.fenced_late", reason=reason)
                return
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                log.debug("fleet fence still failing: %r", exc)
            await anyio.sleep(delay)
            delay = min(0.25, delay * 2)

    async def _lost_coverage(self, covered: frozenset[str], reason: str) -> None:
        self._covered = set()
        await self.worker.reads.fence_lost(sorted(covered), self.term)
        if self._catalogs:
            await self.worker.publish_lists(catalog_lists(self._catalogs), "list_lost")
            self._catalogs = frozenset()
        await self._announce_down(reason)

    async def _announce_down(self, reason: str) -> None:
        payload = {"term": self.term, "reason": reason}
        await self.worker.shared.announce(self.worker.id, "down", payload, self.px)

    async def _pump(
        self,
        inner: Source,
        union: frozenset[str],
        list_changed: bool,
        send: MemoryObjectSendStream[StreamEvent],
        scope: anyio.CancelScope,
        pending: list[int],
    ) -> None:
        async with send:
            with scope:
                try:
                    async with aclosing(inner.listen(union, list_changed)) as events:
                        async for event in events:
                            if scope.cancel_called:
                                return  # its stream ended: nobody reads it any more
                            self.relaying += 1
                            pending[0] += 1
                            await send.send(event)
                except anyio.get_cancelled_exc_class():
                    raise
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return  # `lead` stopped reading (it is ending the stream): nobody to tell
                except Exception as exc:
                    with suppress(anyio.BrokenResourceError, anyio.WouldBlock):
                        send.send_nowait(StreamLost(None, repr(exc)))

    def describe(self) -> dict[str, Any]:
        return {
            "listener": self.leader.split(":")[0] if self.leader else None,
            "lease_holder": self.leader,
            "leading": self.leading is not None,
        }
