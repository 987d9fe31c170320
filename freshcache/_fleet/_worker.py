"""One worker of a fleet: the parts that share its connection, its id and its engine.

`FleetWorker` wraps the cache's `Source` (`FleetSource`) so that the engine, the
flights and the stream driver stay as they are. It is made of parts with one job each:

- `SharedReads` (`_reads`): reads through the shared store, fleet-wide single flight,
  fenced fills;
- `SharedCatalogs` (`_catalogs`): catalog walks the same way (one walk per change);
- `ChangeChannel` (`_channel`): the fan-out of invalidations to this worker's local
  index, and failing closed when the channel cannot vouch for it;
- `ListenerLease` (`_lease`): the listener lease and, while held, the real
  ``subscriptions/listen`` stream for the union of the workers' selections;
- `FollowerStreams` (`_follow`): a non-listener's "stream", acknowledged by the
  listener's announcements;
- `HintOutbox` (`_outbox`): hints heard on this worker's own answers, published;
- `FleetTelemetry` (`_telemetry`): metrics and span events.

The worker itself beats: one script every third of the lease (or of the selection's
expiry, if shorter) registers its selection, renews the lease while it leads, and
reads the lease holder and the registry's version, and on one server probes its
channel (a ``PING`` on the subscription's connection: `ChangeChannel.probe`); a quiet
worker does nothing else (its channel waits on the socket, no polling). It watches the
store's health by those beats, and says goodbye on close. The hit path never sees any
of this: each worker's engine keeps its own index, and channel messages drop rows from
it.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from typing import Any

import anyio
from anyio.abc import TaskGroup
from opentelemetry import metrics, trace
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from .._core import (
    CATALOG_KINDS,
    PUBLIC,
    Decision,
    FreshnessEngine,
    Invalidation,
    ListenStarted,
    Partition,
    ReadReply,
    RequestFailed,
    StreamEvent,
    StreamLost,
    catalog_subject,
)
from .._core._sharing import Standing
from .._sources._source import Source, SourceWrapper
from ..fleet import Fleet
from ._beat import BeatLine
from ._catalogs import SharedCatalogs
from ._channel import ChangeChannel
from ._cluster import connect, is_cluster, shard_channels, subscriber
from ._follow import FollowerStreams
from ._lease import ListenerLease
from ._outbox import HintOutbox
from ._parts import Binding, FleetCounters
from ._reads import SharedReads
from ._store import LIST_CHANGED, SharedStore
from ._telemetry import FleetTelemetry

log = logging.getLogger("freshcache.fleet")


class FleetWorker:
    """The fleet side of one `FreshCache` (see the module docstring)."""

    def __init__(
        self, config: Fleet, server_id: str, meter_provider: metrics.MeterProvider | None = None
    ) -> None:
        self.config = config
        self.id = secrets.token_hex(6)
        self.redis: Redis = connect(config)
        self.channel_redis: Redis | None = subscriber(config)
        """The channel subscription's own client (one server), else ``None``."""
        self.cluster = is_cluster(config.url)
        self.shared = SharedStore(
            self.redis,
            config.namespace,
            server_id,
            config.binding_key,
            cluster=self.cluster,
            sharded=shard_channels(self.redis),
        )
        self.beat_line = (
            BeatLine(self.channel_redis, self.shared, self.id)
            if self.channel_redis is not None
            else None
        )
        """On one server, the heartbeat's own connection (`_beat`)."""
        self.counters = FleetCounters()
        self.telemetry = FleetTelemetry(self.id, meter_provider)
        self.bound: Binding | None = None
        self.tg: TaskGroup | None = None
        self.channel = ChangeChannel(self)
        self.lease = ListenerLease(self)
        self.followers = FollowerStreams(self)
        self.reads = SharedReads(self)
        self.catalogs = SharedCatalogs(self)
        self.standing = Standing(self.shared.tag)
        """Which principals may take another's copy of what here (the core's rule)."""
        self.outbox = HintOutbox(self)
        self._ready = anyio.Event()
        self._answered_at = -float("inf")
        self._union_seen: str | None = None
        """The registry version whose union of selections our stream was checked against."""
        self._next_stream = 0

    @property
    def usable(self) -> bool:
        """The channel vouches for this worker (subscribed, no message missed)."""
        return self.channel.usable

    @property
    def leading(self) -> str | None:
        return self.lease.leading

    def bind(
        self,
        engine: FreshnessEngine,
        carry_out: Callable[[list[Decision]], None],
        want_stream: Callable[[frozenset[str]], None],
    ) -> None:
        """Called once by `FreshCache` with the engine it reads and writes."""
        policy = engine.policy
        self.bound = Binding(
            engine=engine,
            carry_out=carry_out,
            want_stream=want_stream,
            share_public=policy.share_public,
            subscription_backed=policy.subscription_backed,
            max_ttl_ms=policy.max_ttl * 1000.0,
            selected=lambda: engine.selected,
        )
        engine.denied_elsewhere = self.standing

    def heard_denial(self, uri: str, tag: str, *, denied: bool) -> None:
        """Another worker announced a denial of (``uri``, the partition ``tag`` names),
        or its end. A denial ends that principal's standing here and takes this
        worker's hit rows of it (its own copy from before is not handed out either:
        `FreshnessEngine.lookup`). Its end grants nothing: an announcement anyone
        who can write the store could send; only the principal's own read here does."""
        if not denied:
            return
        self.standing.heard_refusal(uri, tag)
        if self.bound is not None:
            engine = self.bound.engine
            for kind in CATALOG_KINDS:
                if uri == catalog_subject(kind):
                    # A catalog refused elsewhere: no walk held here from before it is
                    # handed out; the principal's next walk is its own (`Standing`).
                    self.bound.carry_out(engine.invalidate_catalog(kind, alone=False))
                    return
            for partition in list(engine.hit_tables):
                if partition != PUBLIC and self.shared.tag(partition) == tag:
                    engine.denied_on_another_worker(uri, partition)

    def wrap(self, source: Source) -> FleetSource:
        return FleetSource(source, self)

    # ------------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        """The worker's background tasks; cancelled when the cache closes."""
        try:
            async with anyio.create_task_group() as tg:
                self.tg = tg
                self._ready.set()
                tg.start_soon(self.channel.run)
                tg.start_soon(self._heartbeat)
                tg.start_soon(self.outbox.run)
        finally:
            self.outbox.close()
            with anyio.CancelScope(shield=True), anyio.move_on_after(2 * self.config.op_timeout):
                try:
                    await self.lease.goodbye()
                    await self.shared.unregister(self.id)
                except Exception as exc:
                    log.debug("fleet worker %s could not say goodbye: %r", self.id, exc)
            # Each on its own: one that fails or hangs does not leave the others open.
            closes: list[Callable[[], Awaitable[None]]] = [self.redis.aclose]
            if self.beat_line is not None:
                closes.append(self.beat_line.aclose)
            if self.channel_redis is not None:
                closes.append(self.channel_redis.aclose)
            for close in closes:
                with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
                    try:
                        await close()
                    except Exception as exc:
                        log.debug("fleet worker %s could not close: %r", self.id, exc)

    def describe(self) -> dict[str, Any]:
        return {
            "worker": self.id,
            "store": "up" if self.channel.usable else "down",
            **self.lease.describe(),
            "sequence": self.channel.seq,
            "counters": self.counters.as_dict(),
        }

    def store_answered(self) -> None:
        """A store command succeeded: the store was reachable just now."""
        self._answered_at = anyio.current_time()

    # ------------------------------------------------------------------ the heartbeat

    async def _heartbeat(self) -> None:
        """Register our selection, renew the lease while we lead, watch the lease holder,
        grow the listener's union: one `SharedStore.beat` every third of the lease (or
        of the selection's expiry, if shorter).

        A store that refuses or drops connections is down: fail closed at once. One
        that is merely slow (a starved machine) is given until a lease has passed
        without any answer, as the listener's lease would have lapsed by then too. A
        renewal that failed is tried again sooner, while the lease still has time."""
        config, lease = self.config, self.lease
        period = min(config.lease, config.selection_ttl) / 3.0
        while True:
            delay = period
            lease.overdue()
            renew = lease.renewable()
            bound = max(period, 3 * config.op_timeout)
            if renew is not None:
                bound = min(bound, lease.renew_by - anyio.current_time())
            try:
                with anyio.fail_after(bound):
                    await self._beat(renew)
                self.store_answered()
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                log.debug("fleet heartbeat failed: %r", exc)
                down = isinstance(exc, (RedisConnectionError, ConnectionError))
                silent_for = anyio.current_time() - self._answered_at
                if self.channel.usable and (down or silent_for > config.lease):
                    self.channel.fail_closed(f"the store did not answer: {exc!r}")
                if not lease.overdue() and renew is not None:
                    left = lease.renew_by - anyio.current_time()
                    delay = min(period, max(0.05, left / 2))
            await anyio.sleep(delay)

    async def _beat(self, renew: str | None) -> None:
        px = int(self.config.selection_ttl * 1000)
        now_ms = int(time.time() * 1000)
        sent = anyio.current_time()
        lease, channel = self.lease, self.channel
        selection, renewing = self._selection(), renew or ""
        line = self.beat_line
        if line is None:  # a cluster: no probe (its subscription has a health check)
            holder, renewed, version = await self.shared.beat(
                self.id, selection, px, now_ms, renewing, lease.px
            )
        else:
            # One server: the beat on `BeatLine`'s own connection, the channel's probe
            # right after it; `_heartbeat` bounds both.
            command = line.pack(selection, px, now_ms, renewing, lease.px)
            answered = False
            try:
                await line.send(command)
                await channel.probe()
                holder, renewed, version = await line.answer(
                    selection, px, now_ms, renewing, lease.px
                )
                answered = True
            finally:
                if not answered:
                    # Cancelled (or failed) before its answer was read: that answer
                    # would be the next beat's. Drop the line; the next beat connects.
                    await line.drop()
        channel.judge_probe()
        if renew is not None:
            lease.renewal_answered(renew, renewed, sent)
        lease.saw_holder(holder)
        self.followers.notify("tick", holder)
        # Only once live (a stream still opening already asked for the union it saw),
        # and only when a worker registered a selection it had not since we looked.
        bound = self.bound
        if (
            bound is None
            or lease.leading is None
            or not lease.leading_uris
            or version == self._union_seen
        ):
            return
        others = await self.shared.union(now_ms)
        # Checked again after the round trip: the lease may have moved meanwhile.
        if lease.leading is not None and lease.leading_uris:
            self._union_seen = version
            union = others | self._selection()
            if not union <= lease.leading_uris:
                bound.want_stream(union)

    def _selection(self) -> frozenset[str]:
        return self.bound.selected() if self.bound is not None else frozenset()

    # ------------------------------------------------------------------ publishing

    def heard_locally(self, event: Invalidation) -> None:
        """The engine's invalidation hook: this worker's own hints go to the fleet."""
        self.outbox.heard(event)

    async def publish(self, uris: list[str], kind: str) -> None:
        await self.shared.invalidate(uris, self.id, kind, int(time.time() * 1000))
        self.counters.published += len(uris)
        self.store_answered()

    async def publish_lists(self, names: list[str], kind: str = LIST_CHANGED) -> None:
        """A list's change the listener heard (``tools``, ``prompts``, ``resources``),
        or its fence (``kind`` of `LIST_FENCES`): every worker's copy of it stops being
        fresh."""
        await self.shared.lists_changed(names, self.id, int(time.time() * 1000), kind)
        self.counters.published += len(names)
        self.store_answered()

    async def attempt(self, action: Awaitable[None]) -> str | None:
        """Run a store action; the reason to end the stream when the store failed."""
        try:
            with anyio.fail_after(4 * self.config.op_timeout):
                await action
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            return f"the fleet store failed: {exc!r}"
        return None

    # ------------------------------------------------------------------ streams

    async def listen(
        self, inner: Source, uris: frozenset[str], list_changed: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        """The cache's stream: the real one while we hold the lease, else the channel."""
        # Runs inside the cache's listen span: the fleet's span events go there.
        self.telemetry.listen_span = trace.get_current_span()
        with anyio.move_on_after(5.0):
            await self._ready.wait()
        self._next_stream += 1
        sid = f"fleet:{self.id}:{self._next_stream}"
        leading = False
        if self.channel.usable:
            try:
                with anyio.fail_after(2 * self.config.op_timeout):
                    leading = await self.lease.try_lead()
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                log.debug("fleet lease attempt failed: %r", exc)
        if not self.channel.usable and not leading:
            yield ListenStarted(sid, uris, list_changed)
            yield StreamLost(sid, "the fleet store is unreachable")
            return
        events = (
            self.lease.lead(inner, uris, list_changed)
            if leading
            else self.followers.follow(sid, uris, list_changed)
        )
        async with aclosing(events):
            async for event in events:
                yield event


class FleetSource(SourceWrapper):
    """The cache's source as the fleet sees it: reads through the shared store,
    streams through the listener lease (see the module docstring)."""

    def __init__(self, inner: Source, worker: FleetWorker) -> None:
        super().__init__(inner)
        self.worker = worker

    async def read_resource(self, uri: str, principal: Partition) -> ReadReply | RequestFailed:
        return await self.worker.reads.read(self.inner, uri, principal)

    def listen(self, uris: frozenset[str], list_changed: bool) -> AsyncGenerator[StreamEvent, None]:
        return self.worker.listen(self.inner, uris, list_changed)

    @property
    def shared_catalogs(self) -> SharedCatalogs:
        """Catalog walks through the shared store (the `Source.shared_catalogs` capability)."""
        return self.worker.catalogs

    def ask_pushed_bodies(self) -> bool:
        """No pushed bodies in a fleet: the channel carries invalidations only, and
        every worker re-reads (a follower on its next read), fenced by the store
        (`Policy.pushed_bodies`)."""
        return False


__all__ = ["FleetCounters", "FleetSource", "FleetWorker"]
