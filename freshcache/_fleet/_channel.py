"""The fleet's change channel as one worker hears it: fan-out and failing closed.

Every invalidation a worker publishes (`INVALIDATE`: a URI's, or a list's change the
listener heard) and every listener announcement (`ANNOUNCE`) carries the channel's next
sequence number. `ChangeChannel` subscribes
first and reads the sequence baseline second (so nothing falls between them), then
applies each message: another worker's invalidation drops this worker's local copy
(a ``list_changed`` its catalog of that kind), an announcement goes to its follower
streams. A broken subscription, a skipped
sequence number or a message of a kind it does not know (a newer worker's) means a
message may have been missed: the worker *fails closed*
(drops its whole local index, loses coverage) and proves freshness again through the
shared generation or a server read.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

import anyio

from .._core import CATALOG_KINDS, ReadResource, ResourceUpdated
from ._cluster import ChannelSubscription
from ._store import LIST_CHANGED, LIST_FENCES

if TYPE_CHECKING:
    from ._parts import ChannelWorker

log = logging.getLogger("freshcache.fleet")

_CAUSES = {"acknowledged": "acknowledged", "lost": "stream_lost"}
"""The engine's invalidation cause of a channel message kind that is a re-proof (the
listener's acknowledgment of a new stream, a lost stream's fence); any other kind
(``updated``, ``hint``) is a change heard: ``resources/updated``."""

_KINDS = frozenset(
    {"live", "down", "denied", "allowed", "updated", "hint", LIST_CHANGED, *LIST_FENCES, *_CAUSES}
)
"""Every channel message kind this version knows; any other fails closed (`dispatch`)."""


class ChangeChannel:
    """One worker's subscription to the fleet channel (see the module docstring)."""

    def __init__(self, worker: ChannelWorker) -> None:
        self.worker = worker
        self.usable = False
        """Subscribed, with a known sequence baseline: the channel vouches for us."""
        self.seq = 0
        """The last sequence number taken in."""
        self.applying_remote = False
        """True while a fleet message is fed to the engine (not to be published back)."""
        self._scope = anyio.CancelScope()
        self.breaks = 0
        """How many times the channel failed closed: a follower stream acknowledged only
        while it is unchanged since the stream registered (no notice slipped by)."""
        self._failed_closed = False
        """Failed closed since the last subscription: the next one, back on the store
        (after a failover, a moved slot, a store restart), re-proves through the fleet."""
        self._probed: ChannelSubscription | None = None
        """On one server, the live subscription the heartbeat probes (`probe`)."""

    async def run(self) -> None:
        """Stay subscribed; after a break, fail closed and subscribe again (backing off)."""
        delay = 0.05
        while True:
            self._scope = anyio.CancelScope()
            with self._scope:
                try:
                    await self._subscribed()
                except anyio.get_cancelled_exc_class():
                    raise
                except Exception as exc:
                    self.worker.counters.channel_losses += 1
                    self.fail_closed(f"the fleet channel broke: {exc!r}")
            await anyio.sleep(delay)
            delay = min(1.0, delay * 2) if not self.usable else 0.05

    async def _subscribed(self) -> None:
        worker = self.worker
        blocking = worker.channel_redis
        subscription = ChannelSubscription(
            blocking or worker.redis, worker.shared.channel, sharded=worker.shared.sharded
        )
        try:
            with anyio.fail_after(max(1.0, 4 * worker.config.op_timeout)):
                await subscription.subscribe()
            # Subscribed first, then the baseline: nothing can fall between them.
            self.seq = await worker.shared.sequence()
            self.usable = True
            worker.store_answered()
            if self._failed_closed:
                # Back after failing closed: a read of a selected URI waits (with a
                # deadline) for the listener's coverage and takes the fleet's path, so
                # the recovery costs one server read per URI fleet-wide.
                self._failed_closed = False
                worker.reads.expect_proof(outage=True)
            log.debug("fleet worker %s on the channel at %d", worker.id, self.seq)
            # Sleep until a message comes (quiet at rest). On one server the wait is on
            # the socket alone (`_cluster.subscriber`: a closed or reset connection ends
            # it at once, TCP keepalive finds a half-open one, the heartbeat's probe a
            # path that stops answering: `probe`). On a cluster no longer than half a
            # lease: each wait begins with redis-py's health check (a PING once the
            # connection was quiet for `health_check_interval`).
            quiet_wait = None if blocking is not None else worker.config.lease / 2
            self._probed = subscription if blocking is not None else None
            while True:
                data = await subscription.next_message(quiet_wait)
                if data is not None:
                    self.dispatch(json.loads(data))
        finally:
            self._probed = None
            with anyio.CancelScope(shield=True), anyio.move_on_after(0.5):
                try:
                    await subscription.aclose()
                except Exception:  # the connection is gone already
                    log.debug("fleet channel close failed", exc_info=True)

    async def probe(self) -> None:
        """The heartbeat's end-to-end check of the subscription, on one server, where
        its wait has no timeout: a ``PING`` on its connection at every beat, written right
        after the beat's script. A TCP proxy that keeps our side open hides a dead store
        side from TCP keepalive; the probe does not."""
        subscription = self._probed
        if subscription is not None:
            try:
                await subscription.probe()
            except Exception as exc:
                self._lost(subscription, f"the fleet channel broke: {exc!r}")

    def judge_probe(self) -> None:
        """The beat answered: the store answers now, so the probe sent a beat earlier
        must have come back (in order, before anything the store wrote later), or at
        least something must have come on the channel since it was sent (a reader
        behind a backlog reaches its pong late: `ChannelSubscription.stalled`). If
        nothing did, something between the store and this reader holds the channel:
        lost, fail closed (the channel subscribes again and the fleet re-proves)."""
        subscription = self._probed
        if subscription is not None and subscription.stalled():
            self._lost(subscription, "the fleet channel did not answer its probe")

    def _lost(self, subscription: ChannelSubscription, reason: str) -> None:
        if subscription is self._probed and self.usable:
            self._probed = None
            self.worker.counters.channel_losses += 1
            self.fail_closed(reason)

    def dispatch(self, message: dict[str, Any]) -> None:
        """Take in one channel message, in sequence order."""
        seq = int(message["s"])
        if seq <= self.seq:
            return  # already reflected in the store when we took the baseline
        worker = self.worker
        if seq != self.seq + 1:
            worker.counters.gaps += 1
            missed = f"missed fleet messages {self.seq + 1}..{seq - 1}"
            self.seq = seq
            self.fail_closed(missed)
            worker.reads.expect_proof()  # the store answers: prove it through the fleet
            # the message itself is still applied below
        self.seq = seq
        kind = message["k"]
        if kind not in _KINDS:
            # A newer worker's kind (a mixed-version fleet): what it meant is missed, as
            # in a gap. Fail closed, prove it again through the fleet.
            self.fail_closed(f"a fleet message of an unknown kind {kind!r}")
            worker.reads.expect_proof()
            return
        if kind == "live":
            # Only a signed announcement acknowledges anyone (a store writer can publish).
            live = worker.shared.sealed(json.loads(message["p"]))
            if live is not None:
                worker.followers.notify(kind, live)
            return
        if kind == "down":  # an end, signed or not, only fails closed
            worker.followers.notify(kind, json.loads(message["p"]))
            return
        if message["o"] == worker.id:
            return  # our own publication: our engine already took it in
        if kind in ("denied", "allowed"):
            worker.heard_denial(message["u"], str(message["p"]), denied=kind == "denied")
            return
        if kind == LIST_CHANGED or kind in LIST_FENCES:
            self._apply_list_change(str(message["u"]), LIST_FENCES.get(kind, "list_changed"))
            return
        self._apply_remote(message["u"], _CAUSES.get(kind, "resources/updated"))
        sent_at = message.get("t")
        if sent_at is not None:
            latency = max(0.0, time.time() - sent_at / 1000.0)
            worker.telemetry.fanned_out(message["u"], kind, latency)

    def _apply_remote(self, uri: str, cause: str) -> None:
        """Another worker's invalidation of ``uri``: this worker's engine takes it in for
        the publisher's ``cause`` (a re-proof stays one: `StateChange.reproof`).

        A change (``updated``, ``hint``) is taken in lazily: the URI stops being fresh
        here, and the re-read the engine decides is not started. The publisher reads it
        for the fleet; this worker's next read of it looks in the store (or reads the
        server) within the caller's deadline, under the cache's single flight: a change
        nobody here reads costs no store round trip. A re-proof (a new listener's
        acknowledgment, a lost stream's fence: rare) is re-read at once, as before."""
        bound = self.worker.bound
        if bound is None:
            return
        self.worker.counters.remote_invalidations += 1
        self.worker.reads.heard_remote(uri)
        subscription = self.worker.followers.acknowledged_id()
        self.applying_remote = True
        try:
            # Without an acknowledged follower stream: untrusted, as an answer's hint.
            decisions = bound.engine.handle(ResourceUpdated(uri, subscription), cause)
            if decisions and cause == "resources/updated":
                decisions = [d for d in decisions if d.__class__ is not ReadResource]
            if decisions:
                bound.carry_out(decisions)
        finally:
            self.applying_remote = False

    def _apply_list_change(self, name: str, cause: str) -> None:
        """A ``*/list_changed`` the listener heard (or a list it fenced off: ``cause``
        a re-proof, so this worker's hosts are not told of a change nobody heard): this
        worker's engine decides what stops being fresh."""
        bound = self.worker.bound
        if bound is None:
            return
        self.worker.counters.remote_invalidations += 1
        self.applying_remote = True
        try:
            bound.carry_out(bound.engine.list_changed_elsewhere(name, cause))
        finally:
            self.applying_remote = False

    def fail_closed(self, reason: str) -> None:
        """The channel can no longer vouch for us: drop the local index, lose coverage."""
        worker = self.worker
        self.usable = False
        self.breaks += 1
        self._failed_closed = True
        log.info("fleet worker %s fails closed: %s", worker.id, reason)
        worker.telemetry.event("freshcache.fleet.fail_closed", reason=reason)
        bound = worker.bound
        if bound is not None:
            uris = sorted({uri for table in bound.engine.hit_tables.values() for uri in table})
            self.applying_remote = True
            try:
                for uri in uris:
                    bound.carry_out(bound.engine.handle_hint(ResourceUpdated(uri, None)))
                # Catalogs as resources: a change to any may have slipped by.
                for catalog in CATALOG_KINDS:
                    bound.carry_out(bound.engine.invalidate_catalog(catalog, "fail_closed"))
            finally:
                self.applying_remote = False
        worker.followers.notify("lost", reason)
        self._scope.cancel()
