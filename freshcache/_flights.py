"""Server reads in flight: single flight, deadlines' background half, the re-read cap.

Every read of one URI and partition shares one flight (invariant 8); a flight re-reads
while invalidations overtake it and hands every waiter a result judged by the engine.
Reads the engine decided on (after a notification, an acknowledgment) are
*background* reads: at most `max_background` run at once, the rest wait in order; a
caller's own read never waits behind them (DESIGN §6).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from anyio.abc import TaskGroup

from ._core import (
    AWAITING_FRESH_SOURCE,
    FRESH,
    FreshnessEngine,
    Partition,
    ReadReply,
    ReadResult,
    ReadTicket,
    RequestFailed,
    StreamEvent,
    problem_result,
)
from ._errors import ProtocolError
from ._source import Source
from ._telemetry import Telemetry

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
    error: ProtocolError | None = None
    """A configuration problem the source raised: every caller waiting gets it."""


class ReadFlights:
    """The flights of one `FreshCache`."""

    def __init__(
        self,
        *,
        source: Source,
        engine: FreshnessEngine,
        telemetry: Telemetry,
        feed_hints: Callable[[tuple[StreamEvent, ...]], None],
        max_background: int,
        on_settled: Callable[[Partition, ReadResult], None] | None = None,
    ) -> None:
        self._source = source
        self._engine = engine
        self._telemetry = telemetry
        self._feed_hints = feed_hints
        self.max_background = max_background
        self._on_settled = on_settled
        """Told of every flight's result (`FreshCache.changes`)."""
        self.tg: TaskGroup | None = None
        self._flights: dict[tuple[str, Partition], _Flight] = {}
        self._queued: dict[tuple[str, Partition], str] = {}
        """Background reads waiting for a place, in order, with their cause."""
        self._background_running = 0

    def __len__(self) -> int:
        return len(self._flights)

    def get(self, key: tuple[str, Partition]) -> _Flight | None:
        return self._flights.get(key)

    def launch_now(self, uri: str, partition: Partition) -> _Flight:
        """A caller's own read: sent at once, ahead of queued background reads."""
        self._queued.pop((uri, partition), None)
        return self._launch(uri, partition, "read", background=False)

    def _launch(self, uri: str, partition: Partition, cause: str, *, background: bool) -> _Flight:
        assert self.tg is not None
        flight = _Flight(done=anyio.Event(), background=background)
        if background:
            self._background_running += 1
        self._flights[(uri, partition)] = flight
        # The task inherits the current context: its request span is a child of the
        # caller's read span, or of the listen span for re-reads a notification caused.
        self.tg.start_soon(self._fly, uri, partition, flight, cause)
        return flight

    async def _fly(self, uri: str, partition: Partition, flight: _Flight, cause: str) -> None:
        result: ReadResult | None = None
        unjudged: ReadTicket | None = None
        try:
            # Let notifications already queued land first: a burst of invalidations
            # then costs one read sent after the last of them, not one read each.
            await anyio.lowlevel.checkpoint()
            for _ in range(self._engine.policy.max_rereads):
                ticket = unjudged = self._engine.begin_read(uri, partition)
                flight.ticket = ticket
                self._telemetry.server_read(cause)
                with self._telemetry.request("resources/read", uri=uri) as span:
                    try:
                        reply = await self._read(uri, partition)
                    except ProtocolError as exc:
                        # Not a state of the resource: the caller misconfigured something.
                        flight.error = exc
                        reply = RequestFailed("server_error", f"{type(exc).__name__}: {exc}")
                    if isinstance(reply, RequestFailed):
                        self._telemetry.request_failed(span, reply)
                self._feed_hints(reply.hints)
                unjudged = None
                result = self._engine.finish_read(ticket, reply)
                if result is not None:
                    if result.state == FRESH:
                        self._telemetry.fresh_again(uri, self._engine.clock())
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
                self._engine.abandon_read(unjudged)
            if result is None:  # cancelled: leave nothing half-done behind
                result = problem_result(uri, AWAITING_FRESH_SOURCE, "invalidated")
            flight.result = result
            if self._flights.get((uri, partition)) is flight:
                del self._flights[(uri, partition)]
            flight.done.set()
            if self._on_settled is not None:
                self._on_settled(partition, result)
            if flight.background:
                self._background_running -= 1
                self._start_queued()

    def schedule(self, uri: str, partition: Partition, cause: str) -> None:
        """A background read the engine decided on: now, or when a place frees up."""
        key = (uri, partition)
        if key in self._flights or key in self._queued or self.tg is None:
            return
        if self._background_running < self.max_background:
            self._launch(uri, partition, cause, background=True)
        else:
            self._queued[key] = cause

    def _start_queued(self) -> None:
        while self._queued and self._background_running < self.max_background:
            key = next(iter(self._queued))
            cause = self._queued.pop(key)
            if key not in self._flights and self.tg is not None:
                self._launch(key[0], key[1], cause, background=True)

    async def _read(self, uri: str, partition: Partition) -> ReadReply | RequestFailed:
        try:
            return await self._source.read_resource(uri, partition)
        except (anyio.get_cancelled_exc_class(), ProtocolError):
            raise
        except Exception as exc:  # a source bug must not tear the cache down
            log.warning("source %s failed reading %s: %r", self._source.identity, uri, exc)
            return RequestFailed("server_error", f"source raised {type(exc).__name__}: {exc}")
