"""The stream driver: carries out the `ListenSupervisor`'s decisions (DESIGN §4).

One task per open ``subscriptions/listen`` stream reads the source's events into the
engine; the driver opens and closes streams when the supervisor says so and wakes it
at its deadlines (the acknowledgment timeout, the next retry). It decides nothing:
when to open, replace or close a stream is the supervisor's; what an event means is
the engine's.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass

import anyio
from anyio.abc import TaskGroup
from opentelemetry.trace import Span
from typing_extensions import assert_never

from .._core import (
    Decision,
    FreshnessEngine,
    ListenAcknowledged,
    ListenStarted,
    ListenUnsupported,
    Partition,
    ReadResource,
    ResourceListChanged,
    ResourceUpdated,
    StreamClosed,
    StreamEvent,
    StreamLost,
    UntrustedMessage,
)
from .._core._streams import (
    CloseStream,
    ListenSupervisor,
    OpenStream,
    StreamDecision,
    StreamOutcome,
)
from .._sources._source import ServerInfo, Source
from ._telemetry import JSONRPC_REQUEST_ID, Telemetry

log = logging.getLogger("freshcache")


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


class StreamDriver:
    """Runs the subscription streams of one `FreshCache`."""

    def __init__(
        self,
        *,
        source: Source,
        engine: FreshnessEngine,
        supervisor: ListenSupervisor,
        telemetry: Telemetry,
        carry_out: Callable[[list[Decision]], None],
        enabled: bool,
    ) -> None:
        self._source = source
        if engine.policy.pushed_bodies:
            ask = source.ask_pushed_bodies  # embedResources on every listen; the engine judges
            if ask is not None:
                ask()
        self.engine = engine
        self.supervisor = supervisor
        self._telemetry = telemetry
        self._carry_out = carry_out
        self.reread: Callable[[str, Partition, str], None] | None = None
        """Carries out a `ReadResource` decision (`ReadFlights.schedule`), as
        ``carry_out`` would, one call sooner: a notification's one decision."""
        self.enabled = enabled
        self.driving = False
        """True once discovery is done and the supervisor is being obeyed."""
        self.closing = False
        """Set when the cache closes: streams that end then decide nothing."""
        self.loop_turns = 0
        """How often the run loop went to sleep (an idle cache: a handful, ever)."""
        self._open: dict[int, _Stream] = {}
        self._wake = anyio.Event()
        self._sleeping_until: float | None = None
        """The deadline the run loop sleeps until (None: no deadline)."""
        self._tg: TaskGroup | None = None
        self._settling: anyio.Event | None = None
        """Set (and dropped) at the next step of a stream's opening: see `ack_pending`."""

    def ack_pending(self, uri: str | None) -> int | None:
        """The stream attempt whose acknowledgment a read of ``uri`` (``None``: the
        resource list) should wait for (`ListenSupervisor.awaits_ack`); 0 while
        discovery is under way and a stream may follow it; ``None``: read now."""
        if not self.enabled or self.engine.listen_supported is False:
            return None
        if not self.driving:
            return None if self.supervisor.unsupported else 0
        return self.supervisor.awaits_ack(uri)

    async def first_ack(self, uri: str | None, partition: Partition) -> None:
        """Until the first acknowledgment a read of ``uri`` (``None``: the resource
        list) should wait for has come, or no longer matters.

        The read that ack asks for is then the caller's read: one server read per
        selected URI and one walk at start, not one before the ack and one after
        (DESIGN §8, `FreshnessEngine.waits_for_ack`). One attempt is waited for: if it
        ends unacknowledged the caller reads at once, and so does a caller whose wait
        is cut short (`FreshCache` waits at most half its deadline: a slow ack then
        costs a second read, not the caller's answer).
        """
        waited_for: int | None = None
        while True:
            attempt = self.ack_pending(uri)
            if attempt is None or (waited_for is not None and attempt != waited_for):
                return
            if attempt:  # (0: discovery is under way, a stream may follow it)
                waited_for = attempt
            await self.settling()
            if uri is not None and not self.engine.waits_for_ack(uri, partition):
                return

    async def settling(self) -> None:
        """Until the next step of a stream's opening (discovery done, an ack, an end)."""
        if self._settling is None:
            self._settling = anyio.Event()
        await self._settling.wait()

    def _settled(self) -> None:
        if self._settling is not None:
            self._settling.set()
            self._settling = None

    def want(self, uris: frozenset[str]) -> None:
        """The engine asked for a stream over ``uris`` (its `Relisten`)."""
        if self.driving:
            now = anyio.current_time()
            self.obey(self.supervisor.want(uris, now, lists=self.engine.lists_wanted))

    async def run(
        self, tg: TaskGroup, discover: Callable[[], Awaitable[ServerInfo | None]]
    ) -> None:
        """Discover, then carry out the supervisor's decisions and wake it at its deadlines."""
        self._tg = tg
        # Discover even when listening is off: it is also where the source learns which
        # revision to speak (a 2025-11-25 server refuses requests before initialize).
        try:
            info = await discover()
            if not self.enabled:
                self._carry_out(self.engine.handle(ListenUnsupported("listening disabled")))
                return
            if info is not None and info.listen is False:
                self._carry_out(self.engine.handle(ListenUnsupported(info.detail or "no listen")))
                return
            self.driving = True
            self.obey(
                self.supervisor.want(
                    self.engine.selected, anyio.current_time(), lists=self.engine.lists_wanted
                )
            )
        finally:
            self._settled()  # reads waiting for discovery look again
        while not self.supervisor.unsupported:
            self._wake = anyio.Event()
            ticked = self.supervisor.tick(anyio.current_time())
            self._carry_out_streams(ticked)
            if ticked:
                self._settled()
            deadline = self._sleeping_until = self.supervisor.next_deadline()
            delay = math.inf if deadline is None else max(0.0, deadline - anyio.current_time())
            self.loop_turns += 1
            with anyio.move_on_after(delay):
                await self._wake.wait()

    def obey(self, decisions: list[StreamDecision]) -> None:
        """Carry out decisions made outside the run loop; wake it only if that matters.

        The loop sleeps until the supervisor's next deadline: it is woken when a
        decision was carried out, that deadline moved, or listening became unsupported
        (the loop then ends instead of sleeping on as a dead task); never "just in
        case" (an idle cache must cost no CPU, DESIGN invariant 15).
        """
        self._carry_out_streams(decisions)
        self._settled()  # (an ack, an end, a new attempt: reads waiting look again)
        if (
            decisions
            or self.supervisor.unsupported
            or self.supervisor.next_deadline() != self._sleeping_until
        ):
            self._wake.set()

    def _carry_out_streams(self, decisions: list[StreamDecision]) -> None:
        assert self._tg is not None
        for decision in decisions:
            match decision:
                case OpenStream(attempt=attempt, uris=uris):
                    stream = _Stream(attempt, uris, anyio.CancelScope())
                    self._open[attempt] = stream
                    self._tg.start_soon(self._consume, stream)
                case CloseStream(attempt=attempt):
                    closing = self._open.pop(attempt, None)
                    if closing is not None:
                        closing.scope.cancel()
                        if closing.subscription_id is not None:
                            self.engine.cancel_subscription(closing.subscription_id)
                case _:
                    assert_never(decision)

    async def _consume(self, stream: _Stream) -> None:
        """Read one stream's events into the engine until it ends or is closed."""
        with self._telemetry.listen_span(stream.uris, stream.attempt) as span:
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
                if self._open.get(stream.attempt) is stream:
                    # It ended by itself: the supervisor decides what comes next.
                    del self._open[stream.attempt]
                    if outcome != "cancelled" and not self.closing:
                        self._record_relisten(stream, outcome)
                        ended = self.supervisor.ended(
                            stream.attempt, _OUTCOMES[outcome], anyio.current_time()
                        )
                        self.obey(ended)

    async def _consume_events(self, stream: _Stream) -> str:
        async with aclosing(self._source.listen(stream.uris, True)) as events:
            async for event in events:
                outcome = self._feed(stream, event)
                if outcome is not None:
                    return outcome
        # The iterator ended without a final event: that is a loss.
        return self._feed(stream, StreamLost(stream.subscription_id, "stream ended")) or "lost"

    def _record_relisten(self, stream: _Stream, outcome: str) -> None:
        self._telemetry.relisten(outcome if stream.acknowledged else f"{outcome}_before_ack")
        log.info("subscription %s %s", stream.subscription_id, outcome)

    def _feed(self, stream: _Stream, event: StreamEvent) -> str | None:
        """Hand one event to the engine; the stream's outcome when the event ended it."""
        if event.__class__ is ResourceUpdated:  # most events: straight to the engine
            decisions = self.engine.handle(event)
            if decisions:
                reread = self.reread
                if reread is not None and len(decisions) == 1:
                    read = decisions[0]
                    if read.__class__ is ReadResource:  # (what `_carry_out` would do)
                        reread(read.uri, read.partition, read.cause)
                        return None
                self._carry_out(decisions)
            return None
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
                self.obey(self.supervisor.acknowledged(stream.attempt, anyio.current_time()))
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
