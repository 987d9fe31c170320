"""Server reads in flight: single flight, deadlines' background half, the re-read cap.

Every read of one URI and partition shares one flight (invariant 8); a flight re-reads
while invalidations overtake it and hands every waiter a result judged by the engine.
Reads the engine decided on (after a notification, an acknowledgment) are
*background* reads: at most `max_background` run at once, the rest wait in order; a
caller's own read never waits behind them (DESIGN §6).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup

from .._core import (
    AWAITING_FRESH_SOURCE,
    FRESH,
    FreshnessEngine,
    Partition,
    Policy,
    ReadReply,
    ReadResult,
    ReadTicket,
    RequestFailed,
    StreamEvent,
    problem_result,
)
from .._errors import ProtocolError
from .._sources._source import Source
from ._telemetry import Telemetry

log = logging.getLogger("freshcache")

REREAD_BATCH = 64
"""Queued re-reads a re-reader takes after one turn of the event loop. Each read
yields to the loop in its source anyway; the turn before a batch lets notifications
already queued land first, and bounds how long a source that never yields holds the
loop."""


def rewaits(policy: Policy) -> int:
    """The one waiter bound of single flight, for reads (`FreshCache.read`) and list
    walks (`Lister`) alike: how many times one caller waits for the shared read or walk.

    A caller woken to a result that a change or an eviction outdated meanwhile does
    not hand it out (invariant 1) and waits for the next one: at most
    `Policy.max_rereads` times more, then it says so with an explicit state instead
    of waiting on."""
    return policy.max_rereads + 1


class Watchers(Protocol):
    """Who is told of settled reads (`ChangeFeed`): only while ``active``."""

    active: bool

    def observe(self, result: ReadResult) -> None: ...


def _event() -> anyio.Event | asyncio.Event:
    """asyncio's own `Event` where asyncio runs (a dozen calls fewer to make, wait on and
    set than anyio's, which wraps it), else anyio's."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # another event loop (anyio's trio backend)
        return anyio.Event()
    return asyncio.Event()


@dataclass(slots=True)
class _Flight:
    """One server read that every concurrent caller of the same URI shares."""

    background: bool = False
    """Started by a decision (notification, ack), not by a caller: counts against
    ``max_concurrent_reads``."""
    ticket: ReadTicket | None = None
    result: ReadResult | None = None
    error: ProtocolError | None = None
    """A configuration problem the source raised: every caller waiting gets it."""
    reread_wanted: str | None = None
    """The cause of a background read the engine decided on while this one flew."""
    finished: bool = False
    _done: anyio.Event | asyncio.Event | None = None
    """Made by the first caller who waits: most background re-reads have none."""

    async def wait(self) -> None:
        """Until the flight's result is set."""
        if not self.finished:
            if self._done is None:
                self._done = _event()
            await self._done.wait()

    def finish(self) -> None:
        self.finished = True
        if self._done is not None:
            self._done.set()


_ANYIO_TASKS: Any = None
"""anyio's record of each asyncio task's innermost cancel scope (see `_Inline`), taken
by `_anyio_tasks` at a cache's first read in a task: anyio loads its asyncio backend
when the event loop first runs it, and importing freshcache does not (issue 38, item 3)."""


def _anyio_tasks() -> bool:
    """Whether anyio's task record can be read (`_ANYIO_TASKS`); looked up once."""
    global _ANYIO_TASKS
    if _ANYIO_TASKS is None:
        try:
            from anyio._backends._asyncio import _task_states
        except ImportError:  # pragma: no cover - another anyio: every read then gets a task
            _ANYIO_TASKS = False
        else:
            _ANYIO_TASKS = _task_states
    return _ANYIO_TASKS is not False


def _anyio_scope() -> object:
    """The current task's innermost anyio cancel scope (``None``: none yet)."""
    state = _ANYIO_TASKS.get(asyncio.current_task())
    return None if state is None else state.cancel_scope


class _Inline:
    """Runs a caller's flight in the caller's own task (asyncio only) (issue 38, item 2).

    A cold miss then costs no task and no loop turn of its own: the caller drives the
    read and has its result when the read ends. Exceptions reach the coroutine as a
    task would deliver them (its own scopes may be the ones cancelling).

    If the caller leaves first (its deadline passed), the read should go on in the
    background. A coroutine can change tasks only where it holds nothing bound to its
    task: an anyio cancel scope (httpx's timeouts, the SDK's, the stdio source's), an
    ``asyncio.timeout`` (redis-py's), or anything else it waits on. So it is handed to a
    task of its own (`ReadFlights._adopt`) only when it waits at a bare yield
    (``asyncio.sleep(0)``) outside any scope of its own; otherwise the caller's
    cancellation reaches it, as it would reach a task, and a background read is queued
    in its place. Reads start in a task each; once one is seen waiting on nothing but
    bare yields they run inline, until one is seen waiting on something else (a future,
    a scope: `ReadFlights.inline`). So only a source that answers without waiting on
    anything (an in-memory one) reads inline, and only a caller that leaves a read
    that waits for the first time cuts it short.
    """

    __slots__ = ("_coro", "_flights", "_key", "_task")

    def __init__(
        self,
        coro: Coroutine[Any, Any, None],
        flights: ReadFlights | None,
        key: tuple[str, Partition] | None = None,
    ) -> None:
        self._coro = coro
        self._flights = flights
        """``None`` once adopted: the task driving it now is the coroutine's own."""
        self._key = key
        self._task: asyncio.Task[Any] | None = None
        """The caller's task while it drives the read (`ReadFlights.close` cancels it)."""

    def __await__(self) -> Generator[Any, None, None]:
        flights = self._flights
        if flights is None:  # adopted: it waited at a bare yield, it goes on from there
            yield None
            yield from self._drive(None, None)
            return
        self._task = task = asyncio.current_task()
        flights._inline_runs.add(self)
        # anyio keeps one state per task while it lives: read its scope at each yield
        # from it (`_anyio_scope` asks again only if the task had none yet).
        state = _ANYIO_TASKS.get(task)
        try:
            yield from self._drive(flights, None if state is None else state.cancel_scope, state)
        finally:
            flights._inline_runs.discard(self)

    def _drive(
        self, flights: ReadFlights | None, outer: object, state: Any = None
    ) -> Generator[Any, None, None]:
        coro = self._coro
        error: BaseException | None = None
        while True:
            try:
                yielded = coro.send(None) if error is None else coro.throw(error)
            except StopIteration:
                return
            except BaseException:
                if error is None or flights is None:
                    raise
                if flights.closing and isinstance(error, asyncio.CancelledError):
                    # (`ReadFlights.close`): the flight was settled on the way out,
                    # and that is what the caller gets.
                    if self._task is not None:
                        self._task.uncancel()
                    return
                if self._key is not None:  # the caller left: a background read instead
                    flights.schedule(*self._key, "read")
                raise
            error = None
            bare = yielded is None
            inside = flights is not None and (
                not bare
                or (state.cancel_scope if state is not None else _anyio_scope()) is not outer
            )
            if inside and flights.inline:  # type: ignore[union-attr]
                flights.inline = False  # type: ignore[union-attr]  # (see the docstring)
            try:
                yield yielded
            except BaseException as exc:
                if flights is None or inside or flights.closing:
                    error = exc  # delivered as a task delivers it
                    continue
                try:  # the caller leaves: the read goes on in a task of its own
                    flights._adopt(_Inline(coro, None))
                except BaseException:  # no task can be started any more: it ends here
                    error = exc
                    continue
                raise


class _Watched:
    """Drives a flight in its own task exactly as the task would, noting whether it
    waited on anything but bare yields (`ReadFlights.inline` is learned from it)."""

    __slots__ = ("_coro", "bare")

    def __init__(self, coro: Coroutine[Any, Any, None]) -> None:
        self._coro = coro
        self.bare = True

    def __await__(self) -> Generator[Any, None, None]:
        coro = self._coro
        error: BaseException | None = None
        while True:
            try:
                yielded = coro.send(None) if error is None else coro.throw(error)
            except StopIteration:
                return
            error = None
            if yielded is not None:
                self.bare = False
            try:
                yield yielded
            except BaseException as exc:
                error = exc


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
        changes: Watchers | None = None,
        principal: Partition = None,
    ) -> None:
        self._source = source
        self._engine = engine
        self._telemetry = telemetry
        self._feed_hints = feed_hints
        self.max_background = max_background
        self._changes = changes
        self._principal = principal
        """While anyone watches ``changes`` (`FreshCache.changes`), it is told of every
        result of a flight of ``principal`` (the cache's default one)."""
        self.tg: TaskGroup | None = None
        self._flights: dict[tuple[str, Partition], _Flight] = {}
        self._queued: OrderedDict[tuple[str, Partition], str] = OrderedDict()
        """Background reads waiting for a place, in order, with their cause. Ordered:
        taking the oldest is O(1) however many were taken before (a plain dict scans
        the holes its taken keys left at its front until it is resized)."""
        self._background_running = 0
        """Re-reader tasks, busy or idle (at most `max_background`)."""
        self._idle: deque[anyio.Event] = deque()
        """Idle re-readers, each asleep on its own event."""
        self._asyncio: bool | None = None
        """Whether the event loop is asyncio's (asked at the first checkpoint)."""
        self.closing = False
        """Set by `close`: reads running in their callers' tasks end."""
        self._inline_runs: set[_Inline] = set()
        self.inline = False
        """Whether a caller's read runs in the caller's task (`_Inline`): from the
        first caller's read (in a task, `_fly_soon`) seen waiting on nothing but bare
        yields, until one is seen waiting on anything else."""

    def __len__(self) -> int:
        return len(self._flights)

    @property
    def queued(self) -> int:
        """Background re-reads decided and not yet taken by a re-reader."""
        return len(self._queued)

    async def _checkpoint(self) -> None:
        """`anyio.lowlevel.checkpoint`: a turn of the event loop for everything ready.

        On asyncio that is ``asyncio.sleep(0)``, which is all anyio's does after asking
        which event loop runs (a third of the checkpoint's cost, twice per re-read).
        """
        if self._asyncio is None:
            try:
                self._asyncio = asyncio.get_running_loop() is not None
            except RuntimeError:  # another event loop (anyio's trio backend)
                self._asyncio = False
        if self._asyncio:
            await asyncio.sleep(0)
        else:
            await anyio.lowlevel.checkpoint()

    async def turn(self) -> None:
        """One turn of the event loop (asyncio's: `fly_inline`'s callers only)."""
        await asyncio.sleep(0)

    def get(self, key: tuple[str, Partition]) -> _Flight | None:
        return self._flights.get(key)

    def on_asyncio(self) -> bool:
        """Whether the event loop is asyncio's (`_Inline` and `asyncio.timeout` need it)."""
        if self._asyncio is None:
            try:
                self._asyncio = asyncio.get_running_loop() is not None
            except RuntimeError:
                self._asyncio = False
        return self._asyncio

    def fly_inline(self, uri: str, partition: Partition) -> tuple[_Flight, _Inline]:
        """A caller's own read, run in the caller's task (`_Inline`): sent at once,
        ahead of queued background reads; awaiting the second item runs it until the
        flight is settled, or until the caller leaves (then it goes on in a task)."""
        self._queued.pop((uri, partition), None)
        key = (uri, partition)
        flight = self._flights[key] = _Flight()
        return flight, _Inline(self._fly(uri, partition, flight, "read"), self, key)

    def close(self) -> None:
        """The cache closes: reads running in their callers' tasks end (as reads in
        tasks of their own end with the cache's task group), settled as cut short."""
        self.closing = True
        for run in list(self._inline_runs):
            if run._task is not None:
                run._task.cancel()

    def _adopt(self, inline: _Inline) -> None:
        assert self.tg is not None
        self.tg.start_soon(_awaited, inline)

    def launch_now(self, uri: str, partition: Partition) -> _Flight:
        """A caller's own read: sent at once, ahead of queued background reads, in a task
        of its own, because it must be able to outlive its caller.

        When the caller's deadline passes the read goes on (it answers ``timeout`` and
        the reply still lands in the cache), and every caller who joined the flight
        waits for it whatever the first one does. A read that waits on a real
        transport holds things bound to the task it runs in (an anyio cancel scope:
        httpx's timeouts, the stdio source's and the SDK's deadlines; redis-py's
        ``asyncio.timeout``), so it cannot be moved to a task once it has started, and
        whether its caller will leave first is not known when it starts. Run in the
        caller's task instead, it would have to be cut short and sent again when the
        caller leaves: a second request exactly when the server is slow. Only a read
        seen waiting on nothing but bare yields (an in-memory source) runs in the
        caller's task (`fly_inline`, `_Inline`). Such a miss costs two turns of the event
        loop more than the transport's own exchange (the task's start, its waiter's
        wake-up) and about 300 Python calls, some 180 of them the task's
        (docs/speed.md)."""
        assert self.tg is not None
        self._queued.pop((uri, partition), None)
        flight = self._flights[(uri, partition)] = _Flight()
        # The task inherits the current context: its request span is a child of the
        # caller's read span.
        self.tg.start_soon(self._fly_soon, uri, partition, flight)
        return flight

    async def _fly_soon(self, uri: str, partition: Partition, flight: _Flight) -> None:
        """A caller's read in a task of its own (`launch_now`). The task starts after
        everything already queued on the event loop (a notification that landed meanwhile
        is taken in before the read is sent): no turn of its own before it (issue 38)."""
        if self.on_asyncio() and _anyio_tasks():
            watched = _Watched(self._fly(uri, partition, flight, "read"))
            await watched
            self.inline = watched.bare
            return
        await self._fly(uri, partition, flight, "read")

    async def _fly(
        self,
        uri: str,
        partition: Partition,
        flight: _Flight,
        cause: str,
        live: bool | None = None,
        attempts: int | None = None,
    ) -> None:
        """Read until a reply is judged (at most ``attempts`` times, by default the
        policy's ``max_rereads``), then settle ``flight``."""
        result: ReadResult | None = None
        unjudged: ReadTicket | None = None
        gave_up = False
        engine = self._engine
        # Asked once per flight (per batch of re-reads: ``live``): with nothing recording,
        # no span, metric or debug line is made for it at all (a provider installed
        # meanwhile is seen by the next one).
        if live is None:
            live = self._telemetry.live()
        if attempts is None:
            attempts = engine.policy.max_rereads
        try:
            for _ in range(attempts):
                ticket = unjudged = engine.begin_read(uri, partition)
                flight.ticket = ticket
                if live:
                    self._telemetry.server_read(cause)
                    with self._telemetry.request("resources/read", uri=uri) as span:
                        reply = await self._read(uri, partition, flight)
                        if isinstance(reply, RequestFailed):
                            self._telemetry.request_failed(span, reply)
                else:
                    try:  # (`_read` inlined: one coroutine less per re-read)
                        reply = await self._source.read_resource(uri, partition)
                    except Exception as exc:  # cancellation is a BaseException: not here
                        reply = self._read_failed(uri, flight, exc)
                if reply.hints:
                    self._feed_hints(reply.hints)
                unjudged = None
                result = engine.finish_read(ticket, reply)
                if result is not None:
                    if live and result.state == FRESH:
                        self._telemetry.fresh_again(uri, engine.clock())
                    break
                cause = "superseded"
            if result is None:
                gave_up = True
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
            self._settle(uri, partition, flight, result)
            if gave_up and flight.reread_wanted is not None:
                # The invalidation that overtook the last attempt asked for a re-read
                # this flight can no longer give: queue it, or nothing would follow it.
                self.schedule(uri, partition, flight.reread_wanted)

    def _settle(self, uri: str, partition: Partition, flight: _Flight, result: ReadResult) -> None:
        """Hand ``result`` to the flight's waiters and to `on_settled`; the flight ends."""
        flight.result = result
        if self._flights.get((uri, partition)) is flight:
            del self._flights[(uri, partition)]
        flight.finish()
        changes = self._changes
        if changes is not None and changes.active and partition == self._principal:
            changes.observe(result)

    def schedule(self, uri: str, partition: Partition, cause: str) -> None:
        """A background read the engine decided on: queued, and carried out in order
        by at most `max_background` re-reader tasks.

        A burst of re-reads (a reconnect, a notification per selected URI) costs at
        most ``max_background`` tasks, not one task per read: each re-reader takes the
        next queued read when its last one is judged. Untraced, an idle re-reader
        sleeps until a read is queued for it (one is woken per read): notifications
        that trickle in one per event-loop turn reuse the same few tasks, and at rest
        they do nothing. Traced, a re-reader starts in the context of the decision
        that caused its first read (so the request span has the right parent) and
        ends when the queue is empty.
        """
        key = (uri, partition)
        flying = self._flights.get(key)
        if flying is not None:
            flying.reread_wanted = cause  # it re-reads itself if this overtakes it
            return
        if key in self._queued or self.tg is None:
            return
        self._queued[key] = cause
        room = self._background_running < self.max_background
        if not room and not self._idle:
            return  # every re-reader is busy: one takes it when its read is judged
        traced = self._telemetry.live()
        if self._idle and (not traced or not room):
            # (Traced with no room left: an idle re-reader from before a provider was
            # installed takes it, with its old context, and then retires.)
            self._idle.popleft().set()
        elif room:
            self._background_running += 1
            # Started from the decision's context, with this read first: its request
            # span is a child of the listen span whose notification caused it.
            self.tg.start_soon(self._reread_queued, key if traced else None)

    async def _reread_queued(self, first: tuple[str, Partition] | None) -> None:
        try:
            while True:
                queued = self._queued
                while queued:
                    # One turn of the loop for a batch of queued re-reads: notifications
                    # already queued land first (see `_fly_soon`), so a burst of them
                    # costs one read sent after the last. The reads stay queued until
                    # taken (a caller's own read of one is not held behind the batch),
                    # and a notification for a queued URI does not queue it twice.
                    await self._checkpoint()
                    live = self._telemetry.live()
                    flights, engine = self._flights, self._engine
                    read, changes = self._source.read_resource, self._changes
                    for _ in range(REREAD_BATCH):
                        if not queued:
                            break
                        if first in queued:
                            assert first is not None
                            key, cause = first, queued.pop(first)
                        else:
                            key, cause = queued.popitem(last=False)
                        first = None
                        flying = flights.get(key)
                        if flying is not None:  # a caller's own read is under way
                            flying.reread_wanted = cause
                            continue
                        flight = flights[key] = _Flight(background=True)
                        if live:
                            await self._fly(key[0], key[1], flight, cause, live)
                            continue
                        # Nothing records: `_fly`'s first attempt, in this coroutine (any
                        # further one, after an invalidation overtook it, is `_fly`'s).
                        uri, partition = key
                        ticket = engine.begin_read(uri, partition)
                        flight.ticket = ticket
                        judging = False
                        try:
                            try:
                                reply = await read(uri, partition)
                            except Exception as exc:  # not a cancellation
                                reply = self._read_failed(uri, flight, exc)
                            if reply.hints:
                                self._feed_hints(reply.hints)
                            judging = True
                            result = engine.finish_read(ticket, reply)
                        except BaseException:
                            if not judging:  # cancelled mid-read: never judged
                                engine.abandon_read(ticket)
                            invalidated = problem_result(uri, AWAITING_FRESH_SOURCE, "invalidated")
                            self._settle(uri, partition, flight, invalidated)
                            raise
                        if result is None:  # overtaken: `_fly` goes on with its attempts
                            attempts = engine.policy.max_rereads - 1
                            await self._fly(uri, partition, flight, "superseded", False, attempts)
                            continue
                        # `_settle`, in place:
                        flight.result = result
                        if flights.get(key) is flight:
                            del flights[key]
                        flight.finished = True  # (`_Flight.finish`)
                        if flight._done is not None:
                            flight._done.set()
                        watched = changes is not None and changes.active
                        if watched and partition == self._principal:
                            changes.observe(result)  # type: ignore[union-attr]
                if self._telemetry.live():
                    return  # traced: a task per burst, each in its decision's context
                wake = anyio.Event()
                self._idle.append(wake)
                await wake.wait()
        finally:
            self._background_running -= 1

    async def _read(
        self, uri: str, partition: Partition, flight: _Flight
    ) -> ReadReply | RequestFailed:
        try:
            return await self._source.read_resource(uri, partition)
        except Exception as exc:  # cancellation is a BaseException: not caught here
            return self._read_failed(uri, flight, exc)

    def _read_failed(self, uri: str, flight: _Flight, exc: Exception) -> RequestFailed:
        if isinstance(exc, ProtocolError):
            # Not a state of the resource: the caller misconfigured something.
            flight.error = exc
            return RequestFailed("server_error", f"{type(exc).__name__}: {exc}")
        # A source bug must not tear the cache down.
        log.warning("source %s failed reading %s: %r", self._source.identity, uri, exc)
        return RequestFailed("server_error", f"source raised {type(exc).__name__}: {exc}")


async def _awaited(inline: _Inline) -> None:
    await inline
