"""One worker of a fleet: its channel, its lease, its registered selection, its source.

`FleetWorker` wraps the cache's `Source` (`FleetSource`) so that the engine, the
flights and the stream driver stay as they are:

- *reads* go through the shared store: a current entry is a reply (its text was
  read by a server read sent after the URI's last fleet-wide invalidation: the
  `FILL` fence); otherwise one worker takes the single-flight lock of that
  generation and reads the server, the others wait for its fill;
- *listening*: the lease holder opens the real ``subscriptions/listen`` stream for
  the union of the workers' selections and publishes what it hears; every other
  worker's "stream" is the channel: acknowledged when the listener announces a
  live stream that asked for all its URIs, lost when the listener goes, the lease
  changes hands, the channel breaks or skips a sequence number (fail closed);
- *hints* a worker's own answers carried are published to the fleet.

The hit path never sees any of this: each worker's engine keeps its own index, and
channel messages drop rows from it.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectSendStream
from opentelemetry import metrics, trace
from redis.asyncio import Redis

from .._core import (
    Decision,
    FreshnessEngine,
    Invalidation,
    ListenAcknowledged,
    ListenStarted,
    ListenUnsupported,
    ListReply,
    Partition,
    ReadReply,
    RequestFailed,
    ResourceUpdated,
    StreamClosed,
    StreamEvent,
    StreamLost,
)
from .._source import ServerInfo, Source
from ..fleet import Fleet
from ._store import Peeked, SharedStore

log = logging.getLogger("freshcache.fleet")

Notice = tuple[str, Any]
"""What the worker tells an open follower stream: (``live`` | ``down`` | ``lost`` |
``tick``, details)."""


@dataclass(eq=False, slots=True)
class _Follower:
    subscription_id: str
    uris: frozenset[str]
    notices: MemoryObjectSendStream[Notice]
    acknowledged: bool = False


@dataclass(slots=True)
class FleetCounters:
    """Running totals of one worker's fleet traffic."""

    store_replies: int = 0
    """Reads answered from the shared store (no server read)."""
    fills: int = 0
    fenced_writes: int = 0
    """Fills the generation fence refused (the URI changed while they were read)."""
    fill_waits: int = 0
    """Reads that waited for another worker's fill."""
    direct_reads: int = 0
    """Server reads that bypassed the store (uncovered URI, store down, pending hint)."""
    remote_invalidations: int = 0
    gaps: int = 0
    channel_losses: int = 0
    lease_changes: int = 0
    published: int = 0


@dataclass(slots=True)
class _Binding:
    engine: FreshnessEngine
    carry_out: Callable[[list[Decision]], None]
    want_stream: Callable[[frozenset[str]], None]
    share_public: bool
    subscription_backed: bool
    max_ttl_ms: float
    selected: Callable[[], frozenset[str]] = field(default=frozenset)


class FleetWorker:
    """The fleet side of one `FreshCache` (see the module docstring)."""

    def __init__(
        self, config: Fleet, server_id: str, meter_provider: metrics.MeterProvider | None = None
    ) -> None:
        self.config = config
        self.id = secrets.token_hex(6)
        self.redis: Redis = Redis.from_url(
            config.url,
            socket_timeout=config.op_timeout,
            socket_connect_timeout=config.op_timeout,
            decode_responses=True,
        )
        self.shared = SharedStore(self.redis, config.namespace, server_id)
        self.counters = FleetCounters()
        self.usable = False
        """Subscribed to the channel with a known sequence baseline."""
        self.leading: str | None = None
        """Our lease value while this worker holds the listener lease."""
        self.leader: str | None = None
        """The lease holder last seen."""
        self._bound: _Binding | None = None
        self._tg: TaskGroup | None = None
        self._ready = anyio.Event()
        self._seq = 0
        self._remote = False
        self._followers: set[_Follower] = set()
        self._leader_scopes: set[anyio.CancelScope] = set()
        self._leader_covered: set[str] = set()
        self._leading_uris: frozenset[str] = frozenset()
        self._pending_out: dict[str, int] = {}
        self._outbox_send, self._outbox = anyio.create_memory_object_stream[str](10_000)
        self._channel_scope = anyio.CancelScope()
        self._next_follower = 0
        self._term = ""
        meter = metrics.get_meter("freshcache", meter_provider=meter_provider)
        self._fanout = meter.create_histogram(
            "freshcache.fleet.fanout_latency",
            unit="s",
            description="From a change's publication to this worker dropping its copy",
        )
        self._lease_metric = meter.create_counter(
            "freshcache.fleet.lease_changes", unit="{change}", description="Listener lease changes"
        )
        self._fenced_metric = meter.create_counter(
            "freshcache.fleet.fenced_writes",
            unit="{write}",
            description="Fills refused because the URI changed while they were read",
        )

    def bind(
        self,
        engine: FreshnessEngine,
        carry_out: Callable[[list[Decision]], None],
        want_stream: Callable[[frozenset[str]], None],
    ) -> None:
        """Called once by `FreshCache` with the engine it reads and writes."""
        policy = engine.policy
        self._bound = _Binding(
            engine=engine,
            carry_out=carry_out,
            want_stream=want_stream,
            share_public=policy.share_public,
            subscription_backed=policy.subscription_backed,
            max_ttl_ms=policy.max_ttl * 1000.0,
            selected=lambda: engine.selected,
        )

    def wrap(self, source: Source) -> FleetSource:
        return FleetSource(source, self)

    # ------------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        """The worker's background tasks; cancelled when the cache closes."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                self._ready.set()
                tg.start_soon(self._channel_loop)
                tg.start_soon(self._tick_loop)
                tg.start_soon(self._outbox_loop)
        finally:
            self._outbox_send.close()
            self._outbox.close()
            with anyio.CancelScope(shield=True), anyio.move_on_after(2 * self.config.op_timeout):
                try:
                    if self.leading is not None:
                        await self._announce_down("the listener closed")
                        await self.shared.release_lease(self.leading)
                    await self.shared.unregister(self.id)
                except Exception as exc:
                    log.debug("fleet worker %s could not say goodbye: %r", self.id, exc)
            with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
                await self.redis.aclose()

    def describe(self) -> dict[str, Any]:
        return {
            "worker": self.id,
            "store": "up" if self.usable else "down",
            "listener": self.leader.split(":")[0] if self.leader else None,
            "leading": self.leading is not None,
            "sequence": self._seq,
            "counters": {name: getattr(self.counters, name) for name in FleetCounters.__slots__},
        }

    # ------------------------------------------------------------------ the channel

    async def _channel_loop(self) -> None:
        delay = 0.05
        while True:
            self._channel_scope = anyio.CancelScope()
            with self._channel_scope:
                try:
                    await self._listen_channel()
                except anyio.get_cancelled_exc_class():
                    raise
                except Exception as exc:
                    self.counters.channel_losses += 1
                    self._fail_closed(f"the fleet channel broke: {exc!r}")
            await anyio.sleep(delay)
            delay = min(1.0, delay * 2) if not self.usable else 0.05

    async def _listen_channel(self) -> None:
        pubsub = self.redis.pubsub()
        try:
            await pubsub.subscribe(self.shared.channel)
            with anyio.fail_after(1.0):
                while True:
                    message = await pubsub.get_message(timeout=0.2)
                    if message is not None and message["type"] == "subscribe":
                        break
            # Subscribed first, then the baseline: nothing can fall between them.
            self._seq = await self.shared.sequence()
            self.usable = True
            log.debug("fleet worker %s on the channel at %d", self.id, self._seq)
            while True:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                if message is not None and message["type"] == "message":
                    self._dispatch(json.loads(message["data"]))
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(0.5):
                try:
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
                except Exception:  # the connection is gone already
                    log.debug("fleet channel close failed", exc_info=True)

    def _dispatch(self, message: dict[str, Any]) -> None:
        seq = int(message["s"])
        if seq <= self._seq:
            return  # already reflected in the store when we took the baseline
        if seq != self._seq + 1:
            self.counters.gaps += 1
            missed = f"missed fleet messages {self._seq + 1}..{seq - 1}"
            self._seq = seq
            self._fail_closed(missed)
            # the message itself is still applied below
        self._seq = seq
        kind = message["k"]
        mine = message["o"] == self.id
        if kind in ("live", "down"):
            payload = json.loads(message["p"])
            for follower in list(self._followers):
                follower.notices.send_nowait((kind, payload))
            return
        sent_at = message.get("t")
        if not mine:
            self._apply_remote(message["u"])
            if sent_at is not None:
                self._fanout.record(max(0.0, time.time() - sent_at / 1000.0), {"kind": kind})

    def _apply_remote(self, uri: str) -> None:
        bound = self._bound
        if bound is None:
            return
        self.counters.remote_invalidations += 1
        acked = next((f for f in self._followers if f.acknowledged), None)
        self._remote = True
        try:
            if acked is not None:
                decisions = bound.engine.handle(ResourceUpdated(uri, acked.subscription_id))
            else:
                decisions = bound.engine.handle_hint(ResourceUpdated(uri, None))
            bound.carry_out(decisions)
        finally:
            self._remote = False

    def _fail_closed(self, reason: str) -> None:
        """The channel can no longer vouch for us: drop the local index, lose coverage."""
        self.usable = False
        log.info("fleet worker %s fails closed: %s", self.id, reason)
        trace.get_current_span().add_event("freshcache.fleet.fail_closed", {"reason": reason})
        bound = self._bound
        if bound is not None:
            uris = sorted({uri for table in bound.engine.hit_tables.values() for uri in table})
            self._remote = True
            try:
                for uri in uris:
                    bound.carry_out(bound.engine.handle_hint(ResourceUpdated(uri, None)))
            finally:
                self._remote = False
        for follower in list(self._followers):
            follower.notices.send_nowait(("lost", reason))
        self._channel_scope.cancel()

    # ------------------------------------------------------------------ lease and registry

    async def _tick_loop(self) -> None:
        period = self.config.lease / 3.0
        last_renewed = anyio.current_time()
        while True:
            try:
                with anyio.fail_after(3 * self.config.op_timeout):
                    await self._tick()
                last_renewed = anyio.current_time()
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                log.debug("fleet tick failed: %r", exc)
                if self.usable:
                    self._fail_closed(f"the store did not answer: {exc!r}")
                if (
                    self.leading is not None
                    and anyio.current_time() - last_renewed > 2 * self.config.lease / 3
                ):
                    self._stop_leading("could not renew the listener lease")
            await anyio.sleep(period)

    async def _tick(self) -> None:
        px = int(self.config.selection_ttl * 1000)
        now_ms = int(time.time() * 1000)
        await self.shared.register(self.id, self._selection(), px, now_ms)
        lease_ms = int(self.config.lease * 1000)
        if self.leading is not None and not await self.shared.renew_lease(self.leading, lease_ms):
            self._stop_leading("the listener lease was lost")
        holder = await self.shared.lease_holder()
        if holder != self.leader:
            self.leader = holder
            self.counters.lease_changes += 1
            self._lease_metric.add(1, {"holder": "self" if holder == self.leading else "other"})
            trace.get_current_span().add_event(
                "freshcache.fleet.lease", {"holder": holder or "", "worker": self.id}
            )
        for follower in list(self._followers):
            follower.notices.send_nowait(("tick", holder))
        if self.leading is not None and self._bound is not None and self._leading_uris:
            # Only once live: a stream still opening already asked for the union it saw.
            union = await self.shared.union(now_ms) | self._selection()
            if not union <= self._leading_uris:
                self._bound.want_stream(union)

    def _selection(self) -> frozenset[str]:
        return self._bound.selected() if self._bound is not None else frozenset()

    async def try_lead(self) -> bool:
        if self.leading is not None:
            return True
        term = secrets.token_hex(6)
        holder = f"{self.id}:{term}"
        if await self.shared.take_lease(holder, int(self.config.lease * 1000)):
            self.leading, self._term, self.leader = holder, term, holder
            self._leader_covered = set()
            self.counters.lease_changes += 1
            self._lease_metric.add(1, {"holder": "self"})
            trace.get_current_span().add_event(
                "freshcache.fleet.lease", {"holder": holder, "worker": self.id}
            )
            log.info("fleet worker %s holds the listener lease", self.id)
            return True
        return False

    def _stop_leading(self, reason: str) -> None:
        if self.leading is None:
            return
        log.info("fleet worker %s stops listening: %s", self.id, reason)
        self.leading = None
        self._leading_uris = frozenset()
        for scope in list(self._leader_scopes):
            scope.cancel()

    # ------------------------------------------------------------------ publishing

    def heard_locally(self, event: Invalidation) -> None:
        """The engine's invalidation hook: hints heard on this worker's own answers go
        to the fleet (stream events are published by the stream paths themselves)."""
        if self._remote or event.subscription_id is not None:
            return
        if event.cause != "resources/updated":
            return
        self._pending_out[event.uri] = self._pending_out.get(event.uri, 0) + 1
        try:
            self._outbox_send.send_nowait(event.uri)
        except anyio.WouldBlock:
            self._sent(event.uri)

    def _sent(self, uri: str) -> None:
        left = self._pending_out.get(uri, 0) - 1
        if left > 0:
            self._pending_out[uri] = left
        else:
            self._pending_out.pop(uri, None)

    async def _outbox_loop(self) -> None:
        async for uri in self._outbox:
            try:
                with anyio.fail_after(2 * self.config.op_timeout):
                    await self.publish([uri], "hint")
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                log.warning("fleet worker %s lost a hint for %s: %r", self.id, uri, exc)
            finally:
                self._sent(uri)

    async def publish(self, uris: list[str], kind: str) -> None:
        await self.shared.invalidate(uris, self.id, kind, int(time.time() * 1000))
        self.counters.published += len(uris)

    async def _announce_down(self, reason: str) -> None:
        await self.shared.announce(
            self.id, "down", {"term": self._term, "reason": reason}, int(self.config.lease * 1000)
        )

    # ------------------------------------------------------------------ reads

    def pending(self, uri: str) -> bool:
        return uri in self._pending_out

    async def read_shared(
        self, inner: Source, uri: str, partition: Partition
    ) -> ReadReply | RequestFailed:
        bound = self._bound
        if (
            bound is None
            or not self.usable
            or uri in self._pending_out
            or not bound.engine.is_covered(uri)
        ):
            self.counters.direct_reads += 1
            return await inner.read_resource(uri, partition)
        deadline = anyio.current_time() + self.config.fill_lock
        delay = 0.002
        while True:
            peeked = await self._peek(uri, partition, bound)
            if peeked is None:
                self.counters.direct_reads += 1
                return await inner.read_resource(uri, partition)
            if peeked.reply is not None:
                self.counters.store_replies += 1
                return peeked.reply
            if peeked.locked:
                return await self._read_and_fill(inner, uri, partition, peeked, bound)
            if anyio.current_time() >= deadline:
                self.counters.direct_reads += 1
                return await inner.read_resource(uri, partition)
            # Another worker reads this generation for the fleet: wait for its fill.
            self.counters.fill_waits += 1
            await anyio.sleep(delay)
            delay = min(0.05, delay * 1.5)

    async def _peek(self, uri: str, partition: Partition, bound: _Binding) -> Peeked | None:
        try:
            with anyio.fail_after(self.config.op_timeout):
                return await self.shared.peek(
                    uri,
                    partition,
                    share_public=bound.share_public,
                    lock_for=self.id,
                    lock_ms=int(self.config.fill_lock * 1000),
                )
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            log.debug("fleet peek failed: %r", exc)
            return None

    async def _read_and_fill(
        self, inner: Source, uri: str, partition: Partition, fence: Peeked, bound: _Binding
    ) -> ReadReply | RequestFailed:
        reply = await inner.read_resource(uri, partition)
        try:
            with anyio.fail_after(self.config.op_timeout):
                expiry = self._expiry_ms(reply, bound)
                if expiry is not None and isinstance(reply, ReadReply):
                    public = reply.cache_scope == "public" and bound.share_public
                    if await self.shared.fill(
                        uri, partition, fence, reply, public=public, expiry_ms=expiry
                    ):
                        self.counters.fills += 1
                    else:
                        self.counters.fenced_writes += 1
                        self._fenced_metric.add(1)
                        trace.get_current_span().add_event(
                            "freshcache.fleet.fenced_write",
                            {"uri": uri, "generation": fence.generation},
                        )
                await self.shared.unlock(uri, partition, fence, self.id)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            log.debug("fleet fill failed: %r", exc)
        return reply

    def _expiry_ms(self, reply: ReadReply | RequestFailed, bound: _Binding) -> int | None:
        """How long the store keeps this reply, or ``None`` when it must not share it."""
        if not isinstance(reply, ReadReply):
            return None
        if reply.from_server is not True or reply.multi_round_trip or reply.hints:
            return None  # proves nothing about the server, or carried a change hint
        ttl = reply.ttl_ms or 0
        if ttl > 0:
            return max(1, int(min(ttl, bound.max_ttl_ms)))
        if bound.subscription_backed:
            return int(self.config.covered_entry_ttl * 1000)
        return None  # ttlMs 0: read before each use, nothing to share

    # ------------------------------------------------------------------ streams

    async def listen(
        self, inner: Source, uris: frozenset[str], list_changed: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        with anyio.move_on_after(5.0):
            await self._ready.wait()
        self._next_follower += 1
        sid = f"fleet:{self.id}:{self._next_follower}"
        leading = False
        if self.usable:
            try:
                with anyio.fail_after(2 * self.config.op_timeout):
                    leading = await self.try_lead()
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                log.debug("fleet lease attempt failed: %r", exc)
        if not self.usable and not leading:
            yield ListenStarted(sid, uris, list_changed)
            yield StreamLost(sid, "the fleet store is unreachable")
            return
        if leading:
            async with aclosing(self._lead(inner, uris, list_changed)) as events:
                async for event in events:
                    yield event
        else:
            async with aclosing(self._follow(sid, uris, list_changed)) as events:
                async for event in events:
                    yield event

    async def _lead(
        self, inner: Source, uris: frozenset[str], list_changed: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        assert self._tg is not None
        union = uris
        try:
            with anyio.fail_after(2 * self.config.op_timeout):
                union = await self.shared.union(int(time.time() * 1000)) | uris
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            log.debug("fleet union failed: %r", exc)
        send, receive = anyio.create_memory_object_stream[StreamEvent](1000)
        scope = anyio.CancelScope()
        self._leader_scopes.add(scope)
        self._tg.start_soon(self._pump, inner, union, list_changed, send, scope)
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
                            ending = await self._went_live(union, acked, event.list_changed)
                        case ResourceUpdated(uri=uri):
                            ending = await self._try(self.publish([uri], "updated"))
                        case StreamLost() | StreamClosed() | ListenUnsupported():
                            await self._try(self._lost_coverage(covered, "stream ended"))
                    yield event
                    if ending is not None or isinstance(
                        event, (StreamLost, StreamClosed, ListenUnsupported)
                    ):
                        break
            if ending is None and self.leading is None:
                ending = "the listener lease was lost"
            if ending is not None:
                await self._try(self._lost_coverage(covered, ending))
                self._stop_leading(ending)
                yield StreamLost(sid, ending)
        finally:
            scope.cancel()
            self._leader_scopes.discard(scope)

    async def _went_live(
        self, union: frozenset[str], covered: frozenset[str], list_changed: bool
    ) -> str | None:
        """A new listener stream was acknowledged: fence off what it newly covers
        (invariant 4 fleet-wide), then tell the followers."""
        newly = sorted(covered - self._leader_covered)
        self._leader_covered |= covered
        self._leading_uris = union
        payload = {
            "term": self._term,
            "holder": self.leading,
            "requested": sorted(union),
            "covered": sorted(covered),
            "list_changed": list_changed,
        }
        return await self._try(self._publish_live(newly, payload))

    async def _publish_live(self, newly: list[str], payload: dict[str, Any]) -> None:
        await self.publish(newly, "acknowledged")
        await self.shared.announce(self.id, "live", payload, int(self.config.lease * 1000))

    async def _lost_coverage(self, covered: frozenset[str], reason: str) -> None:
        self._leader_covered = set()
        await self.publish(sorted(covered), "lost")
        await self._announce_down(reason)

    async def _try(self, action: Any) -> str | None:
        """Run a store action; the reason to end the stream when the store failed."""
        try:
            with anyio.fail_after(4 * self.config.op_timeout):
                await action
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            return f"the fleet store failed: {exc!r}"
        return None

    async def _pump(
        self,
        inner: Source,
        union: frozenset[str],
        list_changed: bool,
        send: MemoryObjectSendStream[StreamEvent],
        scope: anyio.CancelScope,
    ) -> None:
        async with send:
            with scope:
                try:
                    async with aclosing(inner.listen(union, list_changed)) as events:
                        async for event in events:
                            await send.send(event)
                except anyio.get_cancelled_exc_class():
                    raise
                except Exception as exc:
                    send.send_nowait(StreamLost(None, repr(exc)))

    async def _follow(
        self, sid: str, uris: frozenset[str], list_changed: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        yield ListenStarted(sid, uris, list_changed)
        send, notices = anyio.create_memory_object_stream[Notice](1000)
        follower = _Follower(sid, uris, send)
        self._followers.add(follower)
        reason = "the fleet listener went away"
        covered: frozenset[str] = frozenset()
        try:
            live: dict[str, Any] | None = None
            try:
                with anyio.fail_after(2 * self.config.op_timeout):
                    px = int(self.config.selection_ttl * 1000)
                    await self.shared.register(self.id, uris, px, int(time.time() * 1000))
                    live = await self.shared.live()
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                reason = f"the fleet store failed: {exc!r}"
                notices.close()
            term: str | None = None
            async with notices:
                while True:
                    if (
                        term is None
                        and live is not None
                        and live.get("holder") == self.leader
                        and uris <= set(live["requested"])
                    ):
                        term = live["term"]
                        covered = uris & frozenset(live["covered"])
                        follower.acknowledged = True
                        yield ListenAcknowledged(
                            sid, covered, list_changed and bool(live["list_changed"])
                        )
                    try:
                        kind, detail = await notices.receive()
                    except anyio.EndOfStream:
                        break
                    if kind == "live":
                        if term is None:
                            live = detail
                        elif detail["term"] != term or not uris <= set(detail["requested"]):
                            reason = "the fleet listener changed"
                            break
                    elif kind in ("down", "lost"):
                        reason = str(detail.get("reason") if isinstance(detail, dict) else detail)
                        break
                    elif kind == "tick":
                        if term is not None and (live is None or detail != live.get("holder")):
                            reason = "the listener lease changed hands"
                            break
                        if detail is None and self.usable and await self._take_over():
                            reason = "taking over the listener lease"
                            break
                        if term is None and detail is not None and live is None:
                            try:
                                with anyio.fail_after(self.config.op_timeout):
                                    live = await self.shared.live()
                            except anyio.get_cancelled_exc_class():
                                raise
                            except Exception:
                                live = None
            follower.acknowledged = False
            if covered and self.usable:
                # Whoever notices a listener's loss fences off what it covered: an
                # entry read while it covered u proves nothing after the loss.
                await self._try(self.publish(sorted(covered), "lost"))
            yield StreamLost(sid, reason)
        finally:
            follower.acknowledged = False
            self._followers.discard(follower)
            send.close()
            notices.close()

    async def _take_over(self) -> bool:
        try:
            with anyio.fail_after(self.config.op_timeout):
                return await self.try_lead()
        except anyio.get_cancelled_exc_class():
            raise
        except Exception:
            return False


class FleetSource:
    """The cache's source as the fleet sees it: reads through the shared store,
    streams through the listener lease (see the module docstring)."""

    def __init__(self, inner: Source, worker: FleetWorker) -> None:
        self.inner = inner
        self.worker = worker

    @property
    def identity(self) -> str:
        return self.inner.identity

    async def start(self) -> ServerInfo:
        return await self.inner.start()

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def read_resource(self, uri: str, principal: Partition) -> ReadReply | RequestFailed:
        return await self.worker.read_shared(self.inner, uri, principal)

    async def list_resources(
        self, cursor: str | None, principal: Partition
    ) -> ListReply | RequestFailed:
        return await self.inner.list_resources(cursor, principal)

    def listen(self, uris: frozenset[str], list_changed: bool) -> AsyncGenerator[StreamEvent, None]:
        return self.worker.listen(self.inner, uris, list_changed)


__all__ = ["FleetCounters", "FleetSource", "FleetWorker"]
