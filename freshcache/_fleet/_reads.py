"""Reads through the shared store: current entries, fleet-wide single flight, fenced fills.

A read of a covered URI first looks in the store (`PEEK`). A current entry is a reply:
its text came from a server read sent after the URI's last fleet-wide invalidation
(that is what the `FILL` fence guarantees). With no entry, one worker takes the
single-flight lock of that generation and reads the server; the others wait for its
fill, up to `Fleet.fill_lock`, then read the server themselves. A waiting worker looks
again first after about as long as the fills it waited for lately took (`FillWait`),
not every few milliseconds; and a read soon after another worker's invalidation (heard
on the channel, which a follower does not re-read until it is read) looks first about
when that worker's fill is due, since the publisher
(the listener, or the worker that heard a hint) reads it for the fleet at once. With
N workers a change cost ~3.5 store round trips per waiting worker, most of them while
the change was still reaching the other workers: CPU taken from the fan-out. A fill
is written only if the generation is still the one peeked before the read was sent; otherwise it is
*fenced off* (counted, a metric and a span event). Uncovered URIs, a store that does
not answer and URIs with a hint still to publish are read from the server directly.
After a sequence gap or a takeover (the store still answering), a read of a selected
URI first waits, for about a lease, until the worker is covered again (`expect_proof`):
the gap then costs one server read fleet-wide, not one per worker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

import anyio

from .._core import Partition, ReadReply, RequestFailed, shared_expiry_ms
from .._sources._source import Source
from ._flight import FillWait, Flight, share
from ._store import Peeked

if TYPE_CHECKING:
    from ._parts import Binding, ReadsWorker

log = logging.getLogger("freshcache.fleet")

RELISTEN_CAP = 2.0
"""The longest a follower's engine waits before it listens again after repeated losses
(the cap of the fleet's re-listen backoff, ``_middleware._setup.FLEET_BACKOFF``): back
on the store after an outage, a read waits this long past a lease to be covered."""


class SharedReads:
    """One worker's reads through the shared store (see the module docstring)."""

    def __init__(self, worker: ReadsWorker) -> None:
        self.worker = worker
        self.fill_wait = FillWait()
        self._heard: dict[str, float] = {}
        """URIs another worker's invalidation dropped, and when (loop time)."""
        self._regain_until = -float("inf")
        self._regain_holder: str | None = None
        """The new listener seen taking the lease while the window was open (once)."""
        self.filled: dict[str, str] = {}
        """The generation this worker last filled each URI under (`fence_lost`)."""

    async def fence_lost(self, uris: list[str], term: str) -> None:
        """The listener of ``term`` is lost: fence off what it covered, once per term
        for the fleet, plus whatever this worker filled that may still be current."""
        worker = self.worker
        filled = {uri: self.filled[uri] for uri in uris if uri in self.filled}
        bumped = await worker.shared.fence_lost(
            uris, worker.id, term, filled, int(time.time() * 1000)
        )
        for uri in uris:
            self.filled.pop(uri, None)
        worker.counters.published += bumped
        worker.store_answered()

    def heard_remote(self, uri: str) -> None:
        """Another worker published an invalidation of ``uri``: it reads it for the
        fleet, so this worker's next read of it looks for its fill a little later
        (a follower does not re-read a change it heard until it is read)."""
        self._heard.pop(uri, None)
        # The loop's clock, as `anyio.current_time` reads it on asyncio (the fleet's
        # only backend), without its backend lookup: this runs for every channel message.
        self._heard[uri] = asyncio.get_running_loop().time()
        if len(self._heard) > 4096:
            del self._heard[next(iter(self._heard))]

    def expect_proof(self, *, outage: bool = False) -> None:
        """The worker lost its proof while the store still answers (a sequence gap, its
        follower stream ended by a takeover), or is back on the store after an outage
        (``outage``: a failover, a moved slot, a restart): for about a lease (plus the
        engine's longest re-listen delay after an outage), a read of a selected URI
        waits for this worker to be on the channel and covered again, then takes the
        fleet's path (the entry re-proven under the shared generation, or the one
        fleet-wide read of it), instead of each worker reading the server."""
        window = self.worker.config.lease + (RELISTEN_CAP if outage else 0.0)
        self._regain_until = max(self._regain_until, anyio.current_time() + window)
        self._regain_holder = None

    def took_over(self, holder: str) -> None:
        """The lease has a new holder while a read may be waiting to be covered again:
        a takeover is under way, and its listen and acknowledgment take about another
        lease (longer on a starved machine than the election did). The window is
        extended by a lease from now, once per window: a holder that never announces
        still lets the read go to the server within about two leases."""
        now = anyio.current_time()
        if self._regain_holder is None and now < self._regain_until:
            self._regain_holder = holder
            self._regain_until = max(self._regain_until, now + self.worker.config.lease)

    async def _regained(self, uri: str, bound: Binding) -> bool:
        """Wait (within the window `expect_proof` opened) until the channel vouches for
        this worker and its stream covers ``uri``; ``False``: read the server."""
        delay = 0.002
        while anyio.current_time() < self._regain_until and uri in bound.selected():
            if self.worker.channel.usable and bound.engine.is_covered(uri):
                self.worker.counters.proof_waits += 1
                return True
            await anyio.sleep(delay)
            delay = min(0.05, delay * 1.5)
        return False

    async def read(
        self, inner: Source, uri: str, partition: Partition
    ) -> ReadReply | RequestFailed:
        worker = self.worker
        bound = worker.bound
        if bound is None or worker.outbox.pending(uri):
            return await self._direct(inner, uri, partition)
        if not (worker.channel.usable and bound.engine.is_covered(uri)) and not (
            await self._regained(uri, bound)
        ):
            return await self._direct(inner, uri, partition)
        waiting_since = self._heard.pop(uri, None)
        if waiting_since is not None and anyio.current_time() - waiting_since > FillWait.CEILING:
            waiting_since = None  # heard long ago (read directly meanwhile): says nothing
        if waiting_since is not None:
            # Its publisher reads it for the fleet: look when its fill is likely there.
            # Only this re-read waits (nothing is served meanwhile); `took` learns.
            due = waiting_since + self.fill_wait.first() - anyio.current_time()
            await anyio.sleep(max(0.0, due))
        return await share(
            worker, _ReadFlight(self, inner, uri, partition, bound), self.fill_wait, waiting_since
        )

    async def _direct(
        self, inner: Source, uri: str, partition: Partition, *, marked: bool = False
    ) -> ReadReply | RequestFailed:
        self.worker.counters.direct_reads += 1
        return await self._own_read(inner, uri, partition, marked=marked)

    async def _own_read(
        self, inner: Source, uri: str, partition: Partition, *, marked: bool = False
    ) -> ReadReply | RequestFailed:
        """A server read by this principal; a denial (or its end: ``marked``, or denied
        here) is told to the fleet while the store answers."""
        reply = await inner.read_resource(uri, partition)
        worker = self.worker
        worker.counters.server_reads += 1
        worker.telemetry.answered("server")
        denied = isinstance(reply, RequestFailed) and reply.kind == "denied"
        if denied:
            worker.standing.refused(uri, partition)
        elif isinstance(reply, ReadReply) and reply.from_server is True:
            worker.standing.succeeded(uri, partition)
        ended = (
            isinstance(reply, ReadReply)
            and reply.from_server is True
            and (
                marked or (worker.bound is not None and worker.bound.engine.denied(uri, partition))
            )
        )
        if (denied or ended) and worker.channel.usable:
            try:
                with anyio.fail_after(worker.config.op_timeout):
                    if denied:
                        await worker.shared.deny(uri, partition, worker.id)
                    else:
                        await worker.shared.allow(uri, partition, worker.id)
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                log.debug("fleet denial marker failed: %r", exc)
        return reply

    async def _peek(self, uri: str, partition: Partition, bound: Binding) -> Peeked | None:
        config = self.worker.config
        try:
            with anyio.fail_after(config.op_timeout):
                peeked = await self.worker.shared.peek(
                    uri,
                    partition,
                    share_public=bound.share_public,
                    lock_for=self.worker.id,
                    lock_ms=int(config.fill_lock * 1000),
                    need_live=True,
                )
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            log.debug("fleet peek failed: %r", exc)
            return None
        self.worker.store_answered()
        if peeked.started:
            self.worker.counters.new_epochs += 1
        return peeked

    async def _read_and_fill(
        self, inner: Source, uri: str, partition: Partition, fence: Peeked, bound: Binding
    ) -> ReadReply | RequestFailed:
        worker = self.worker
        reply = await self._own_read(inner, uri, partition)
        try:
            with anyio.fail_after(worker.config.op_timeout):
                expiry = shared_expiry_ms(
                    reply, bound.engine.policy, worker.config.covered_entry_ttl
                )
                if expiry is None or not isinstance(reply, ReadReply):
                    await worker.shared.unlock(uri, partition, fence, worker.id)
                    return reply
                public = reply.cache_scope == "public" and bound.share_public
                # The lock goes in the fill's own script, written or fenced off.
                if await worker.shared.fill(
                    uri, partition, fence, reply, public=public, expiry_ms=expiry,
                    release=worker.id,
                ):  # fmt: skip
                    worker.counters.fills += 1
                    self.filled[uri] = fence.generation
                    if len(self.filled) > 4096:
                        del self.filled[next(iter(self.filled))]
                else:
                    worker.counters.fenced_writes += 1
                    worker.telemetry.fenced_off(uri, fence.generation)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            log.debug("fleet fill failed: %r", exc)
        return reply


class _ReadFlight(Flight[ReadReply, "ReadReply | RequestFailed"]):
    """One read of (uri, partition) through the fleet's loop (`_flight.share`)."""

    def __init__(
        self, reads: SharedReads, inner: Source, uri: str, partition: Partition, bound: Binding
    ) -> None:
        self.reads, self.inner, self.uri, self.partition, self.bound = (
            reads, inner, uri, partition, bound
        )  # fmt: skip

    async def peek(self) -> tuple[Peeked, ReadReply | None] | None:
        peeked = await self.reads._peek(self.uri, self.partition, self.bound)
        return None if peeked is None else (peeked, peeked.reply)

    def take(self, fence: Peeked, copy: ReadReply) -> ReadReply | None:
        # The engine alone decides whether this shared copy may serve the principal
        # (its scope, its binding, any denial here or fleet-wide, its standing here).
        if not self.bound.engine.may_share(
            self.uri,
            self.partition,
            "public" if fence.public else "private",
            bound=fence.bound,
            denied_elsewhere=fence.denied,
        ):
            return None
        worker = self.reads.worker
        worker.counters.store_replies += 1
        worker.telemetry.answered("store")
        return copy

    async def refused(self, fence: Peeked) -> ReadReply | RequestFailed:
        return await self.reads._direct(self.inner, self.uri, self.partition, marked=fence.denied)

    async def fill(self, fence: Peeked) -> ReadReply | RequestFailed:
        return await self.reads._read_and_fill(
            self.inner, self.uri, self.partition, fence, self.bound
        )

    async def direct(self) -> ReadReply | RequestFailed:
        return await self.reads._direct(self.inner, self.uri, self.partition)
