"""`FreshCache`: ties a source, the engine and the store together (DESIGN §4, "middleware").

The fresh-hit path is one dict lookup, plus one clock compare when the row has a
``ttlMs`` bound (a subscription-backed row has none: `_core._hits`). Everything else
lives here: single flight (one server read per URI and principal however many callers
wait), per-call deadlines (the read goes on in the background after the caller gave
up), carrying out the engine's decisions, and the listen supervisor that keeps one
subscription stream open, re-listens with backoff after a loss and swaps streams
when the selection changes (the new stream is acknowledged before the old one closes,
so no change falls between them).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider
from typing_extensions import Self, assert_never

from .._core import (
    Decision,
    FreshnessEngine,
    Invalidation,
    ListReply,
    ListResult,
    Partition,
    Policy,
    ReadResource,
    ReadResult,
    ReconnectBudget,
    Relist,
    Relisten,
    Store,
    StreamEvent,
)
from .._core._backoff import BackoffSettings
from .._core._hits import NO_HITS
from .._core._streams import ListenSupervisor
from .._errors import ConfigurationError, FreshCacheError, UnsupportedVersionError
from .._sources._source import ServerInfo, Source
from ._catalogs import CatalogMethods
from ._context import ChangeFeed, Context, StateChanges, read_all
from ._flights import ReadFlights, rewaits
from ._listening import StreamDriver
from ._passthrough import Prompts
from ._setup import (
    check_arguments,
    check_count,
    checked_deadline,
    describe,
    discover,
    with_fleet,
)
from ._store import MemoryStore
from ._telemetry import Telemetry
from ._tools import ToolCalls

if TYPE_CHECKING:
    from .._fleet._worker import FleetWorker
    from ..fleet import Fleet

log = logging.getLogger("freshcache")

_TIMEOUT = getattr(asyncio, "timeout", None)
"""`asyncio.timeout` (Python 3.11+), else ``None`` (a cancel scope then)."""


class FreshCache(CatalogMethods, ToolCalls, Prompts):
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
        fleet: str | Fleet | None = None,
    ) -> None:
        check_arguments(source, select, read_timeout, max_concurrent_reads, ack_timeout)
        # fleet hook (freshcache.fleet): the worker wraps the source; reads and
        # streams go through it, the hit path does not.
        self._fleet: FleetWorker | None
        self._fleet, source, backoff = with_fleet(fleet, source, meter_provider, backoff)
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
        self._streams = StreamDriver(
            source=source,
            engine=self.engine,
            supervisor=ListenSupervisor(ReconnectBudget(backoff), ack_timeout),
            telemetry=self.telemetry,
            carry_out=self._carry_out,
            enabled=listen,
        )
        self._changes = ChangeFeed(self.status, lambda: self.engine.selected, self.engine.remembers)
        self._flights = ReadFlights(
            source=source,
            engine=self.engine,
            telemetry=self.telemetry,
            feed_hints=self._feed_hints,
            max_background=max_concurrent_reads,
            changes=self._changes,
            principal=principal,
        )
        self._streams.reread = self._flights.schedule
        if self._fleet is not None:  # fleet hook
            self._fleet.bind(self.engine, self._carry_out, self._streams.want)
        self._set_up_lists()
        self._tg: TaskGroup | None = None
        self.server_info: ServerInfo | None = None
        self._unusable: FreshCacheError | None = None
        """Set when discovery showed the server cannot be used (raised at each read)."""
        self._discovered = anyio.Event()
        self._discovered_yet = False
        """Set once the first discovery settled (it may show the server unusable)."""
        self._entered = False

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        if self._entered:
            raise FreshCacheError("this FreshCache was already entered; make a new one")
        self._entered = True
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self._flights.tg = self._lister.tg = tg
        self._carry_out(self.engine.select(self._initial_selection))
        if self._fleet is not None:  # fleet hook
            tg.start_soon(self._fleet.run)
        tg.start_soon(self._streams.run, tg, self._discover)
        await anyio.lowlevel.checkpoint()  # discovery first: requests wait for its revision
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        tg = self._tg
        assert tg is not None
        self._streams.closing = True
        self._flights.close()
        self._changes.close()
        tg.cancel_scope.cancel()
        try:
            if exc is not None and not isinstance(exc, anyio.get_cancelled_exc_class()):
                # The body's own error goes out as it is (a documented FreshCacheError),
                # never wrapped in the task group's ExceptionGroup.
                exc_type, exc, tb = None, None, None
            await tg.__aexit__(exc_type, exc, tb)
        finally:
            self._tg = None
            self.telemetry.flush_hits()  # the spans traced hits still owe
            with anyio.CancelScope(shield=True):
                await self.source.aclose()
        return None

    # ------------------------------------------------------------------ reads

    if TYPE_CHECKING:

        async def read(
            self, uri: str, *, timeout: float | None = None, principal: str | None = None
        ) -> ReadResult:
            """Hand out ``uri``: fresh text, or an explicit state saying why not.

            Does whatever server read the rules require and waits for it up to
            ``timeout`` seconds (default: ``read_timeout``); after that it returns
            ``awaiting_fresh_source`` (``timeout``) and the read goes on in the background.
            """
            ...

    else:

        async def read(self, uri, timeout=None, principal=None):
            """Hand out ``uri``: fresh text, or an explicit state saying why not.

            Does whatever server read the rules require and waits for it up to
            ``timeout`` seconds (default: ``read_timeout``); after that it returns
            ``awaiting_fresh_source`` (``timeout``) and the read goes on in the background.
            """
            # The hit path (DESIGN §8). Its options are keyword-only for type checkers
            # (above); at run time they are plain defaults, because CPython fills
            # keyword-only defaults from a dict on every call, a third of an awaited
            # dict lookup's cost. A row without a time bound is the result itself and
            # reads no clock; a ``ttlMs`` row is compared against the clock every time
            # (`_core._hits` says why no timer can stand in for that compare).
            if principal is None:
                try:
                    hit = self._hits[uri]
                except KeyError:
                    return await self._read_miss(uri, principal, timeout)
            else:
                hit = self._hit_tables.get(principal, NO_HITS).get(uri)
                if hit is None:
                    return await self._read_miss(uri, principal, timeout)
            if hit.__class__ is ReadResult:
                return hit
            if self._clock() < hit.expires_at:
                return hit.value
            return await self._read_miss(uri, principal, timeout)

    async def _read_counting_hits(  # type: ignore[no-untyped-def]
        self, uri, timeout=None, principal=None
    ) -> ReadResult:
        """`read` with a meter: hits counted (traced with ``trace_hits``); plain defaults."""
        table = self._hits if principal is None else self._hit_tables.get(principal, NO_HITS)
        hit: Any = table.get(uri)  # a `Hit` row (see `read`), then its result
        if hit is not None:
            if hit.__class__ is not ReadResult:
                hit = hit.value if self._clock() < hit.expires_at else None
            if hit is not None:
                self._counts.hits += 1
                if self.telemetry.trace_hits:
                    self.telemetry.traced_hit(hit, self._wall_clock())
                return hit  # type: ignore[no-any-return]
        return await self._read_miss(uri, principal, timeout)

    async def _read_miss(
        self, uri: str, principal: str | None, timeout: float | None
    ) -> ReadResult:
        partition = self.principal if principal is None else principal
        if not self.telemetry.live():  # no span, no count: nothing would read them
            return await self._read_slow(uri, partition, timeout)
        with self.telemetry.read_span(uri) as span:
            result = await self._read_slow(uri, partition, timeout)
            self.telemetry.read_result(span, result, self._wall_clock())
            return result

    def status(self, uri: str, *, principal: str | None = None) -> ReadResult:
        """What `read` would hand out right now, without any I/O."""
        # A fresh row answers as a hit does (the engine wrote it); the rest is judged.
        table = self._hits if principal is None else self._hit_tables.get(principal, NO_HITS)
        hit: Any = table.get(uri)
        if hit is not None:
            if hit.__class__ is ReadResult:
                return hit
            if self._clock() < hit.expires_at:
                return hit.value  # type: ignore[no-any-return]
        return self.engine.status(uri, self.principal if principal is None else principal)

    async def _read_slow(self, uri: str, partition: Partition, timeout: float | None) -> ReadResult:
        if self._tg is None:
            raise FreshCacheError("use FreshCache inside 'async with' before reading")
        if self._unusable is not None:
            raise self._unusable
        if (uri.__class__ is not str and not isinstance(uri, str)) or not uri:
            raise ConfigurationError(f"uri must be a non-empty string, got {uri!r}")
        # (``read_timeout`` was checked when the cache was made)
        deadline = self.read_timeout if timeout is None else checked_deadline(timeout, 0.0)
        cached = self.engine.lookup(uri, partition)
        if cached is not None:
            return cached
        if _TIMEOUT is not None and self._flights.on_asyncio():
            # asyncio's own timeout: the same deadline as a cancel scope, at a third of
            # its cost on a miss (issue 38, item 2).
            timer = _TIMEOUT(deadline)
            try:
                async with timer:
                    return await _read_judged(self, uri, partition, deadline)
            except TimeoutError:
                if not timer.expired():
                    raise
            return self.engine.note_timeout(uri, partition)
        with anyio.move_on_after(deadline):
            return await _read_judged(self, uri, partition, deadline)
        return self.engine.note_timeout(uri, partition)

    def _feed_hints(self, hints: tuple[StreamEvent, ...]) -> None:
        """Hints carried on a request's own answer count before its reply is judged."""
        for hint in hints:
            self._carry_out(self.engine.handle_hint(hint))

    # ------------------------------------------------------------------ agent steps

    async def context(
        self, uris: Iterable[str], *, timeout: float | None = None, principal: str | None = None
    ) -> Context:
        """Read ``uris`` at once: the fresh texts for a prompt, the rest withheld with a reason.

        Reads run concurrently and share single flight and the deadline of `read`
        (``timeout``, default ``read_timeout``); a URI asked for twice is read once.
        """
        if isinstance(uris, str):
            raise ConfigurationError(f"context() takes a list of URIs, got the string {uris!r}")
        deadline = checked_deadline(timeout, self.read_timeout)
        partition = self.principal if principal is None else principal
        return await read_all(self.read, uris, deadline, principal, self.engine, partition)

    def changes(self, *, max_pending: int = 256) -> StateChanges:
        """Subscribe to state changes of URIs (`StateChange`) and of catalogs someone asked
        for (`CatalogChange`), as the default principal sees them.

        Subscribed at once; iterate with ``async for`` (inside ``async with`` to stop
        early). A consumer ``max_pending`` changes behind gets one `ChangesDropped`
        instead of the backlog. Costs nothing while nobody is subscribed.
        """
        check_count("max_pending", max_pending)
        return self._changes.subscribe(max_pending)

    # ------------------------------------------------------------------ lists

    async def list_resources(
        self, *, timeout: float | None = None, principal: str | None = None
    ) -> ListResult:
        """Every page of ``resources/list``, cached page by page with its own ``ttlMs``."""
        partition = self.principal if principal is None else principal
        deadline = checked_deadline(timeout, self.read_timeout)
        if self._unusable is not None:
            raise self._unusable
        if not self._streams.supervisor.acknowledged_once and partition == self.principal:
            # A walk asked for while the first listen opens would be walked again once
            # its acknowledgment asks for a re-list: it waits for that acknowledgment (at
            # most half its deadline) and joins the re-list it starts (DESIGN §8).
            start = anyio.current_time()
            with anyio.move_on_after(deadline / 2):
                await self._streams.first_ack(None, partition)
            deadline = max(deadline - (anyio.current_time() - start), 1e-3)
        return await self._lister.resources(partition, deadline)

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
                    self._flights.schedule(uri, partition, cause)
                case Relist(kind=kind, cause=cause):
                    self._lister.relist(kind, cause)
                case Relisten(resource_uris=uris):
                    # Losses were already reported by the stream that saw them; a new
                    # selection may need a new stream. The supervisor decides.
                    self._streams.want(uris)
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
        return self._streams.supervisor.retry_at

    def _invalidated(self, event: Invalidation) -> None:
        if self.telemetry.live():  # (else the clock is not read either)
            self.telemetry.invalidated(event, self._clock())
        if self._changes.active:
            self._changes.invalidated(event.uri, event.cause)
        if self._fleet is not None:  # fleet hook: hints heard here go to every worker
            self._fleet.heard_locally(event)

    def _unusable_now(self, exc: FreshCacheError) -> None:
        """A configuration problem: the engine hands nothing out from now on."""
        if self._unusable is None:
            self._unusable = exc
        self.engine.server_unusable(str(exc))

    async def _discover(self) -> ServerInfo | None:
        try:
            info = await discover(self.source, self.telemetry, self.ack_timeout, self._unusable_now)
            if info is not None:
                self.server_info = info  # spans say which revision negotiation settled on:
                self.telemetry.protocol_version = (
                    info.protocol_version or self.telemetry.protocol_version
                )
            return info
        finally:
            self._discovered_yet = True  # (read on every miss: a call less than `is_set`)
            self._discovered.set()

    # ------------------------------------------------------------------ introspection

    @property
    def pending_reads(self) -> int:
        """Server reads under way now (one per URI and principal: single flight)."""
        return len(self._flights)

    @property
    def queued_reads(self) -> int:
        """Background re-reads decided (a notification, an acknowledgment) and not sent
        yet: behind `max_concurrent_reads`, or until a re-reader's next turn. Nothing
        more is read until something happens only when this and `pending_reads` are 0."""
        return self._flights.queued

    @property
    def max_concurrent_reads(self) -> int:
        """Cap on background re-reads in flight at once (the caller's reads go first)."""
        return self._flights.max_background

    @property
    def relisting(self) -> bool:
        """Whether a list walk is under way (a caller's or a background re-list)."""
        return self._lister.running

    def describe(self) -> dict[str, Any]:
        """A snapshot for status output: stream, selection, counters, store use."""
        return describe(self, self._fleet)


async def _read_judged(
    self: FreshCache, uri: str, partition: Partition, deadline: float
) -> ReadResult:
    """`FreshCache._read_slow` within its deadline: the server read (shared, or the
    caller's own in its own task), judged again when the caller has it. (A function of
    the cache, not a method: the class stays under 400 lines, tests/test_class_size.py.)"""
    key = (uri, partition)
    waits = rewaits(self.engine.policy)  # counts the waits no change of this URI asked for
    if (
        not self._streams.supervisor.acknowledged_once  # (a cold start only)
        and self.engine.waits_for_ack(uri, partition)
        and self._flights.get(key) is None
    ):
        # (at most half the deadline: a read sent then still has the other half)
        with anyio.move_on_after(deadline / 2):
            await self._streams.first_ack(uri, partition)
            cached = self.engine.lookup(uri, partition)
            if cached is not None:
                return cached
    while waits:
        flight = self._flights.get(key)
        if flight is not None:
            await flight.wait()
        elif self._flights.inline:  # (learned on asyncio only)
            # The caller runs its own read (no task, no loop turn of its own);
            # if its deadline passes, the read goes on in a task (`_Inline`).
            flight, inline = self._flights.fly_inline(uri, partition)
            await inline
            if self._flights:
                # Other reads in flight: one turn, as a waiter takes to wake, so
                # replies landing in this turn (a context's other reads) are taken
                # in before this result is judged and marked (`read_all`: an
                # eviction they cause is seen then, not as a later change).
                await self._flights.turn()
        else:
            flight = self._flights.launch_now(uri, partition)
            await flight.wait()
        if flight.error is not None:
            if isinstance(flight.error, UnsupportedVersionError):
                self._unusable_now(flight.error)  # no version in common: for good
            raise flight.error
        result, ticket = flight.result, flight.ticket
        assert result is not None
        if result.contents and not self._discovered_yet:
            await self._discovered.wait()  # (within the deadline)
        if self._unusable is not None:
            raise self._unusable  # the engine no longer hands anything out
        # An invalidation may have landed between the reply and this wake-up:
        # text from before it must not be handed out (invariant 1).
        if result.contents and (ticket is None or not self.engine.is_current(ticket)):
            if ticket is None or not self.engine.changed_since(ticket):
                waits -= 1  # (an eviction: a change of this URI is waited for)
            continue
        return result
    return self.engine.status(uri, partition)  # evictions kept overtaking it


__all__ = ["FreshCache", "ListReply", "ListResult"]
