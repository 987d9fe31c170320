"""`FreshCache`: ties a source, the engine and the store together (DESIGN §4, "middleware").

The fresh-hit path is one dict lookup and one clock read. Everything else lives
here: single flight (one server read per URI and principal however many callers
wait), per-call deadlines (the read goes on in the background after the caller gave
up), carrying out the engine's decisions, and the listen supervisor that keeps one
subscription stream open, re-listens with backoff after a loss and swaps streams
when the selection changes (the new stream is acknowledged before the old one closes,
so no change falls between them).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from contextlib import aclosing
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import Span, TracerProvider
from typing_extensions import Self, assert_never

from ._core import (
    AWAITING_FRESH_SOURCE,
    FRESH,
    Decision,
    FreshnessEngine,
    Invalidation,
    ListenAcknowledged,
    ListenStarted,
    ListenUnsupported,
    ListReply,
    Partition,
    Policy,
    ReadReply,
    ReadResource,
    ReadResult,
    ReadTicket,
    ReconnectBudget,
    Relist,
    Relisten,
    RequestFailed,
    ResourceInfo,
    ResourceListChanged,
    Store,
    StreamClosed,
    StreamEvent,
    StreamLost,
    UntrustedMessage,
    problem_result,
)
from ._core._backoff import BackoffSettings
from ._core._engine import NO_HITS
from ._core._streams import (
    CloseStream,
    ListenSupervisor,
    OpenStream,
    StreamDecision,
    StreamOutcome,
)
from ._errors import ConfigurationError, FreshCacheError
from ._source import ServerInfo, Source
from ._store import MemoryStore
from ._telemetry import JSONRPC_REQUEST_ID, Telemetry

log = logging.getLogger("freshcache")


@dataclass(slots=True)
class _Flight:
    """One server read that every concurrent caller of the same URI shares."""

    done: anyio.Event
    background: bool = False
    """Started by a decision (notification, ack), not by a caller: counts against
    ``max_concurrent_reads``."""
    ticket: ReadTicket | None = None
    result: ReadResult | None = None


@dataclass(frozen=True, slots=True)
class ListResult:
    """The answer to `FreshCache.list_resources`."""

    state: str
    """``fresh``, ``awaiting_fresh_source``, ``denied`` or ``not_found``."""
    resources: tuple[ResourceInfo, ...] = ()
    reason: str | None = None
    server_read: bool = False
    detail: str | None = None


@dataclass(slots=True)
class _Stream:
    """One running ``subscriptions/listen`` stream (attempt numbers: `ListenSupervisor`)."""

    attempt: int
    uris: frozenset[str]
    scope: anyio.CancelScope
    subscription_id: str | int | None = None
    acknowledged: bool = False
    span: Span | None = None


_OUTCOMES: dict[str, StreamOutcome] = {
    "lost": "lost",
    "closed": "closed",
    "unsupported": "unsupported",
}


class FreshCache:
    """A freshness-checking cache of MCP resources around one `Source`.

    Use as an async context manager::

        async with FreshCache(HttpSource(url), select=[uri]) as cache:
            result = await cache.read(uri)
    """

    def __init__(
        self,
        source: Source,
        *,
        select: Iterable[str] = (),
        read_timeout: float = 5.0,
        policy: Policy | None = None,
        store: Store | None = None,
        principal: str | None = None,
        listen: bool = True,
        ack_timeout: float = 10.0,
        backoff: BackoffSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        trace_hits: bool = False,
        max_concurrent_reads: int = 16,
    ) -> None:
        if isinstance(select, str):
            raise ConfigurationError(
                f"select= takes a list of URIs, got the string {select!r}; write [{select!r}]"
            )
        _check_timeout("read_timeout", read_timeout)
        if not isinstance(max_concurrent_reads, int) or max_concurrent_reads < 1:
            raise ConfigurationError(
                f"max_concurrent_reads must be a whole number >= 1, got {max_concurrent_reads!r}"
            )
        _check_timeout("ack_timeout", ack_timeout)
        if not isinstance(source, Source):
            raise ConfigurationError(
                f"source must be a freshcache Source (HttpSource, StdioSource, ...), got {source!r}"
            )
        self.source = source
        self.read_timeout = read_timeout
        self.principal = principal
        self.ack_timeout = ack_timeout
        self._listen_enabled = listen
        self.store: Store = store if store is not None else MemoryStore()
        self.telemetry = Telemetry(
            tracer_provider=tracer_provider, meter_provider=meter_provider, trace_hits=trace_hits
        )
        self.telemetry.watch_store(lambda: self.store.entry_count, lambda: self.store.bytes_held)
        self.engine = FreshnessEngine(
            store=self.store,
            policy=policy,
            server_id=source.identity,
            default_partition=principal,
            clock=clock,
            wall_clock=wall_clock,
            on_invalidation=self._invalidated,
        )
        self._hits = self.engine.hits
        self._hit_tables = self.engine.hit_tables
        self._counts = self.telemetry.counts
        if trace_hits or self.telemetry.metering:
            # Chosen once here, so the default hit path pays nothing for the options.
            self.read = self._read_counting_hits  # type: ignore[method-assign]
        self._clock = clock
        self._wall_clock = wall_clock
        self._initial_selection = list(select)
        self._streams = ListenSupervisor(ReconnectBudget(backoff), ack_timeout)
        self._open_streams: dict[int, _Stream] = {}
        self._driving = False
        self._closing = False
        self._wake = anyio.Event()
        self._flights: dict[tuple[str, Partition], _Flight] = {}
        self.max_concurrent_reads = max_concurrent_reads
        """Cap on background re-reads in flight at once; a caller's own read never waits
        behind them."""
        self._queued: dict[tuple[str, Partition], str] = {}
        """Background reads waiting for a place, in order, with their cause."""
        self._background_running = 0
        self._relisting = False
        self._tg: TaskGroup | None = None
        self.server_info: ServerInfo | None = None
        self._entered = False

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        if self._entered:
            raise FreshCacheError("this FreshCache was already entered; make a new one")
        self._entered = True
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self._carry_out(self.engine.select(self._initial_selection))
        tg.start_soon(self._drive_streams)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        tg = self._tg
        assert tg is not None
        self._closing = True
        tg.cancel_scope.cancel()
        try:
            await tg.__aexit__(exc_type, exc, tb)
        finally:
            self._tg = None
            with anyio.CancelScope(shield=True):
                await self.source.aclose()
        return None

    # ------------------------------------------------------------------ reads

    async def read(
        self, uri: str, *, timeout: float | None = None, principal: str | None = None
    ) -> ReadResult:
        """Hand out ``uri``: fresh text, or an explicit state saying why not.

        Does whatever server read the rules require and waits for it up to
        ``timeout`` seconds (default: ``read_timeout``); after that it returns
        ``awaiting_fresh_source`` (``timeout``) and the read goes on in the background.
        """
        # The hit path: one table lookup and one clock read, for every partition.
        hit = (self._hits if principal is None else self._hit_tables.get(principal, NO_HITS)).get(
            uri
        )
        if hit is not None and self._clock() < hit[0]:
            return hit[1]
        return await self._read_miss(uri, principal, timeout)

    async def _read_counting_hits(
        self, uri: str, *, timeout: float | None = None, principal: str | None = None
    ) -> ReadResult:
        """`read` when a meter is configured: fresh hits are counted too."""
        hit = (self._hits if principal is None else self._hit_tables.get(principal, NO_HITS)).get(
            uri
        )
        if hit is not None and self._clock() < hit[0]:
            self._counts.hits += 1
            if self.telemetry.trace_hits:
                self.telemetry.traced_hit(hit[1], self._wall_clock())
            return hit[1]
        return await self._read_miss(uri, principal, timeout)

    async def _read_miss(
        self, uri: str, principal: str | None, timeout: float | None
    ) -> ReadResult:
        partition = self.principal if principal is None else principal
        with self.telemetry.read_span(uri) as span:
            result = await self._read_slow(uri, partition, timeout)
            self.telemetry.read_result(span, result, self._wall_clock())
            return result

    def status(self, uri: str, *, principal: str | None = None) -> ReadResult:
        """What `read` would hand out right now, without any I/O."""
        return self.engine.status(uri, self.principal if principal is None else principal)

    async def _read_slow(self, uri: str, partition: Partition, timeout: float | None) -> ReadResult:
        if self._tg is None:
            raise FreshCacheError("use FreshCache inside 'async with' before reading")
        if not isinstance(uri, str) or not uri:
            raise ConfigurationError(f"uri must be a non-empty string, got {uri!r}")
        deadline = self.read_timeout if timeout is None else timeout
        _check_timeout("timeout", deadline)
        cached = self.engine.lookup(uri, partition)
        if cached is not None:
            return cached
        key = (uri, partition)
        with anyio.move_on_after(deadline):
            while True:
                flight = self._flights.get(key)
                if flight is None:
                    self._queued.pop(key, None)  # the caller's own read goes first
                    flight = self._launch(uri, partition)
                await flight.done.wait()
                result, ticket = flight.result, flight.ticket
                assert result is not None
                # An invalidation may have landed between the reply and this wake-up:
                # text from before it must not be handed out (invariant 1).
                if result.contents and (ticket is None or not self.engine.is_current(ticket)):
                    continue
                return result
        return self.engine.note_timeout(uri, partition)

    def _launch(
        self, uri: str, partition: Partition, cause: str = "read", *, background: bool = False
    ) -> _Flight:
        assert self._tg is not None
        flight = _Flight(done=anyio.Event(), background=background)
        if background:
            self._background_running += 1
        self._flights[(uri, partition)] = flight
        # The task inherits the current context: its request span is a child of the
        # caller's read span, or of the listen span for re-reads a notification caused.
        self._tg.start_soon(self._fly, uri, partition, flight, cause)
        return flight

    async def _fly(self, uri: str, partition: Partition, flight: _Flight, cause: str) -> None:
        result: ReadResult | None = None
        unjudged: ReadTicket | None = None
        try:
            # Let notifications already queued land first: a burst of invalidations
            # then costs one read sent after the last of them, not one read each.
            await anyio.lowlevel.checkpoint()
            for _ in range(self.engine.policy.max_rereads):
                ticket = unjudged = self.engine.begin_read(uri, partition)
                flight.ticket = ticket
                self.telemetry.server_read(cause)
                with self.telemetry.request("resources/read", uri=uri) as span:
                    reply = await self._source_read(uri, partition)
                    if isinstance(reply, RequestFailed):
                        self.telemetry.request_failed(span, reply)
                self._feed_hints(reply.hints)
                unjudged = None
                result = self.engine.finish_read(ticket, reply)
                if result is not None:
                    if result.state == FRESH:
                        self.telemetry.fresh_again(uri, self._clock())
                    break
                cause = "superseded"
            if result is None:
                result = problem_result(
                    uri,
                    AWAITING_FRESH_SOURCE,
                    "invalidated",
                    server_read=True,
                    detail="invalidations kept overtaking the re-read",
                )
        finally:
            if unjudged is not None:  # cancelled mid-read: the reply will never be judged
                self.engine.abandon_read(unjudged)
            if result is None:  # cancelled: leave nothing half-done behind
                result = problem_result(uri, AWAITING_FRESH_SOURCE, "invalidated")
            flight.result = result
            if self._flights.get((uri, partition)) is flight:
                del self._flights[(uri, partition)]
            flight.done.set()
            if flight.background:
                self._background_running -= 1
                self._start_queued()

    def _schedule(self, uri: str, partition: Partition, cause: str) -> None:
        """A background read the engine decided on: now, or when a place frees up."""
        key = (uri, partition)
        if key in self._flights or key in self._queued or self._tg is None:
            return
        if self._background_running < self.max_concurrent_reads:
            self._launch(uri, partition, cause, background=True)
        else:
            self._queued[key] = cause

    def _start_queued(self) -> None:
        while self._queued and self._background_running < self.max_concurrent_reads:
            key = next(iter(self._queued))
            cause = self._queued.pop(key)
            if key not in self._flights and self._tg is not None:
                self._launch(key[0], key[1], cause, background=True)

    def _feed_hints(self, hints: tuple[StreamEvent, ...]) -> None:
        """Hints carried on a request's own answer count before its reply is judged."""
        for hint in hints:
            self._carry_out(self.engine.handle(hint))

    async def _source_read(self, uri: str, partition: Partition) -> ReadReply | RequestFailed:
        try:
            return await self.source.read_resource(uri, partition)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:  # a source bug must not tear the cache down
            log.warning("source %s failed reading %s: %r", self.source.identity, uri, exc)
            return RequestFailed("server_error", f"source raised {type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------ lists

    async def list_resources(
        self, *, timeout: float | None = None, principal: str | None = None
    ) -> ListResult:
        """Every page of ``resources/list``, cached page by page with its own ``ttlMs``."""
        partition = self.principal if principal is None else principal
        deadline = self.read_timeout if timeout is None else timeout
        _check_timeout("timeout", deadline)
        with anyio.move_on_after(deadline):
            return await self._walk_list(partition)
        return ListResult(AWAITING_FRESH_SOURCE, reason="timeout", server_read=True)

    async def _walk_list(self, partition: Partition) -> ListResult:
        for _ in range(self.engine.policy.max_rereads):
            resources: list[ResourceInfo] = []
            cursor: str | None = None
            server_read = False
            restarted = False
            seen: set[str | None] = set()
            while True:
                page = self.engine.lookup_list_page(cursor, partition)
                if page is None:
                    ticket = self.engine.begin_list(cursor, partition)
                    server_read = True
                    with self.telemetry.request("resources/list") as span:
                        try:
                            reply = await self.source.list_resources(cursor, partition)
                        except anyio.get_cancelled_exc_class():
                            raise
                        except Exception as exc:
                            reply = RequestFailed("server_error", f"source raised {exc!r}")
                        if isinstance(reply, RequestFailed):
                            self.telemetry.request_failed(span, reply)
                    self._feed_hints(reply.hints)
                    judged = self.engine.finish_list(ticket, reply)
                    if judged is None or (
                        isinstance(judged, RequestFailed)
                        and judged.kind == "not_found"
                        and cursor is not None
                    ):
                        restarted = True  # list changed or cursor went bad: from the top
                        break
                    if isinstance(judged, RequestFailed):
                        return _list_failure(judged)
                    page = judged
                resources.extend(page.resources)
                seen.add(cursor)
                cursor = page.next_cursor
                if cursor is None or cursor in seen:
                    break
            if not restarted:
                return ListResult(FRESH, tuple(resources), server_read=server_read)
        return ListResult(AWAITING_FRESH_SOURCE, reason="invalidated", server_read=True)

    async def _relist(self) -> None:
        if self._relisting:
            return
        self._relisting = True
        try:
            result = await self._walk_list(self.principal)
        finally:
            self._relisting = False
        if result.state == FRESH:
            self._carry_out(
                self.engine.list_complete((r.uri for r in result.resources), self.principal)
            )

    # ------------------------------------------------------------------ selection

    def select(self, uris: Iterable[str]) -> None:
        """Replace the set of selected URIs (those the agent relies on)."""
        if isinstance(uris, str):
            raise ConfigurationError(f"select() takes a list of URIs, got the string {uris!r}")
        if self._tg is None:
            self._initial_selection = list(uris)
            return
        self._carry_out(self.engine.select(uris))

    @property
    def selected(self) -> frozenset[str]:
        """The URIs the agent relies on now."""
        return self.engine.selected

    # ------------------------------------------------------------------ decisions

    def _carry_out(self, decisions: list[Decision]) -> None:
        for decision in decisions:
            match decision:
                case ReadResource(uri=uri, partition=partition, cause=cause):
                    self._schedule(uri, partition, cause)
                case Relist():
                    if self._tg is not None:
                        self._tg.start_soon(self._relist)
                case Relisten(resource_uris=uris):
                    # Losses were already reported by the stream that saw them; a new
                    # selection may need a new stream. The supervisor decides.
                    if self._driving:
                        self._obey(self._streams.want(uris, anyio.current_time()))
                case _:
                    assert_never(decision)

    # ------------------------------------------------------------------ listening

    @property
    def stream_status(self) -> str:
        """``idle``, ``opening``, ``live``, ``closed``, ``lost``, ``unsupported``, ``disabled``."""
        if not self._listen_enabled:
            return "disabled"
        return self.engine.stream_status

    @property
    def retry_at(self) -> float | None:
        """Event-loop time of the next re-listen attempt while backing off, else ``None``."""
        return self._streams.retry_at

    async def _drive_streams(self) -> None:
        """Carry out the `ListenSupervisor`'s decisions and wake it at its deadlines."""
        if not self._listen_enabled:
            self._carry_out(self.engine.handle(ListenUnsupported("listening disabled")))
            return
        info = await self._discover()
        if info is not None and info.listen is False:
            self._carry_out(self.engine.handle(ListenUnsupported(info.detail or "no listen")))
            return
        self._driving = True
        self._obey(self._streams.want(self.engine.selected, anyio.current_time()))
        while not self._streams.unsupported:
            self._wake = anyio.Event()
            self._obey(self._streams.tick(anyio.current_time()))
            deadline = self._streams.next_deadline()
            delay = math.inf if deadline is None else max(0.0, deadline - anyio.current_time())
            with anyio.move_on_after(delay):
                await self._wake.wait()

    def _obey(self, decisions: list[StreamDecision]) -> None:
        assert self._tg is not None
        for decision in decisions:
            match decision:
                case OpenStream(attempt=attempt, uris=uris):
                    stream = _Stream(attempt, uris, anyio.CancelScope())
                    self._open_streams[attempt] = stream
                    self._tg.start_soon(self._consume, stream)
                case CloseStream(attempt=attempt):
                    closing = self._open_streams.pop(attempt, None)
                    if closing is not None:
                        closing.scope.cancel()
                        if closing.subscription_id is not None:
                            self.engine.cancel_subscription(closing.subscription_id)
                case _:
                    assert_never(decision)
        self._wake.set()  # deadlines may have moved

    async def _consume(self, stream: _Stream) -> None:
        """Read one stream's events into the engine until it ends or is closed."""
        with self.telemetry.listen_span(stream.uris, stream.attempt) as span:
            stream.span = span
            outcome = "cancelled"
            try:
                with stream.scope:
                    outcome = await self._consume_events(stream)
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                log.warning("subscription stream failed: %r", exc)
                outcome = (
                    self._feed(stream, StreamLost(stream.subscription_id, repr(exc))) or "lost"
                )
            finally:
                Telemetry.event(span, "freshcache.stream_end", outcome=outcome)
                if self._open_streams.get(stream.attempt) is stream:
                    # It ended by itself: the supervisor decides what comes next.
                    del self._open_streams[stream.attempt]
                    if outcome != "cancelled" and not self._closing:
                        self._record_relisten(stream, outcome)
                        ended = self._streams.ended(
                            stream.attempt, _OUTCOMES[outcome], anyio.current_time()
                        )
                        self._obey(ended)

    async def _consume_events(self, stream: _Stream) -> str:
        async with aclosing(self.source.listen(stream.uris, True)) as events:
            async for event in events:
                outcome = self._feed(stream, event)
                if outcome is not None:
                    return outcome
        # The iterator ended without a final event: that is a loss.
        return self._feed(stream, StreamLost(stream.subscription_id, "stream ended")) or "lost"

    def _record_relisten(self, stream: _Stream, outcome: str) -> None:
        self.telemetry.relisten(outcome if stream.acknowledged else f"{outcome}_before_ack")
        log.info("subscription %s %s", stream.subscription_id, outcome)

    def _feed(self, stream: _Stream, event: StreamEvent) -> str | None:
        """Hand one event to the engine; the stream's outcome when the event ended it."""
        span = stream.span
        outcome: str | None = None
        match event:
            case ListenStarted(subscription_id=sid):
                stream.subscription_id = sid
                if span is not None:
                    span.set_attribute(JSONRPC_REQUEST_ID, str(sid))
            case ListenAcknowledged(subscription_id=sid) if sid == stream.subscription_id:
                stream.acknowledged = True
                if span is not None:
                    Telemetry.event(
                        span,
                        "freshcache.acknowledged",
                        subscription_id=str(sid),
                        resource_uris=sorted(event.resource_uris),
                        list_changed=event.list_changed,
                    )
                # The engine first (it sees what the new stream newly covers while an
                # old one still covers the rest), then the supervisor (closes the old).
                self._carry_out(self.engine.handle(event))
                self._obey(self._streams.acknowledged(stream.attempt, anyio.current_time()))
                return None
            case StreamLost(detail=detail):
                outcome = "lost"
                if span is not None:
                    Telemetry.event(span, "freshcache.stream_lost", detail=detail)
            case StreamClosed():
                outcome = "closed"
                if span is not None:
                    Telemetry.event(span, "freshcache.stream_closed")
            case ListenUnsupported(detail=detail):
                outcome = "unsupported"
                if span is not None:
                    Telemetry.event(span, "freshcache.listen_unsupported", detail=detail)
            case UntrustedMessage(detail=detail) if span is not None:
                Telemetry.event(span, "freshcache.untrusted_message", detail=detail)
            case ResourceListChanged() if span is not None:
                Telemetry.event(span, "freshcache.list_changed")
            case _:
                pass
        self._carry_out(self.engine.handle(event))
        return outcome

    def _invalidated(self, event: Invalidation) -> None:
        self.telemetry.invalidated(event, self._clock())

    async def _discover(self) -> ServerInfo | None:
        try:
            with anyio.fail_after(self.ack_timeout), self.telemetry.request("server/discover"):
                info = await self.source.start()
        except anyio.get_cancelled_exc_class():
            raise
        except TimeoutError:
            log.warning(
                "server %s did not answer discovery in %.1fs",
                self.source.identity,
                self.ack_timeout,
            )
            return None
        except FreshCacheError:
            raise
        except Exception as exc:
            log.warning("server %s discovery failed: %r", self.source.identity, exc)
            return None
        self.server_info = info
        return info

    # ------------------------------------------------------------------ introspection

    @property
    def pending_reads(self) -> int:
        """Server reads under way now (one per URI and principal: single flight)."""
        return len(self._flights)

    @property
    def relisting(self) -> bool:
        """Whether a re-list is under way."""
        return self._relisting

    def describe(self) -> dict[str, Any]:
        """A snapshot for status output: stream, selection, counters, store use."""
        counters = self.engine.counters
        return {
            "server": self.source.identity,
            "stream": self.stream_status,
            "retry_in": None
            if self._streams.retry_at is None
            else max(0.0, self._streams.retry_at - anyio.current_time()),
            "selected": sorted(self.engine.selected),
            "covered": sorted(self.engine.covered),
            "entries": self.store.entry_count,
            "bytes": self.store.bytes_held,
            "counters": {name: getattr(counters, name) for name in counters.__slots__},
        }


def _check_timeout(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
        raise ConfigurationError(f"{name} must be a number of seconds >= 0, got {value!r}")


def _list_failure(failure: RequestFailed) -> ListResult:
    match failure.kind:
        case "denied" | "not_found":
            return ListResult(
                failure.kind, reason=failure.kind, server_read=True, detail=failure.detail
            )
        case _:
            return ListResult(
                AWAITING_FRESH_SOURCE, reason=failure.kind, server_read=True, detail=failure.detail
            )


__all__ = ["FreshCache", "ListReply", "ListResult"]
