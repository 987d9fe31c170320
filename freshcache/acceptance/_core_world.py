"""The bare-engine level (``--wire core``): rows played on `FreshnessEngine` and
`ListenSupervisor` alone, synchronously, with virtual clocks.

No `FreshCache`, no source, no event loop and no sleeps: this world is the middleware.
It carries out every decision itself: a `ReadResource` becomes `begin_read`, the
`ReferenceServer`'s answer and `finish_read`; a `Relist` walks the list pages; the
supervisor's `OpenStream`/`CloseStream` open and close subscriptions on the reference
server, whose queued messages are turned into stream events for `handle`. Two clocks:
the TTL clock moves only on *time passes*; the stream clock (ack deadlines, backoff)
jumps to the supervisor's next retry when a wanted stream is backing off, so a
reconnect costs no waiting.

Reads the server holds (*hold reads*) stay pending until *release reads*; a caller's
read that meets a held read gets what the engine says when its deadline passes
(`note_timeout`), as a cache whose read timeout ran out.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from freshcache import (
    AWAITING_FRESH_SOURCE,
    FRESH,
    BackoffSettings,
    Catalog,
    CatalogKind,
    ListenAcknowledged,
    ListenStarted,
    ListenUnsupported,
    ListResult,
    MemoryStore,
    Partition,
    Policy,
    ReadReply,
    ReadResult,
    RequestFailed,
    StreamClosed,
    StreamEvent,
    StreamLost,
)
from freshcache.testing import (
    CloseStream,
    Decision,
    FreshnessEngine,
    ListenSupervisor,
    ListWalk,
    OpenStream,
    Push,
    ReadResource,
    ReadTicket,
    ReconnectBudget,
    ReferenceServer,
    Relist,
    Relisten,
    StreamDecision,
    problem_result,
    push_event,
)

from ._format import Case
from ._mutation import mutate_everything
from ._runner import (
    CaseReport,
    Observation,
    Setup,
    VirtualClock,
    check,
    compared,
    engine_unplayable,
    expected_text,
    fleet_unplayable,
    note_result,
    report,
    step_phrases,
)
from ._steering import apply_to_reference, configure_reference
from ._steps import (
    ALIASES,
    Given,
    NextRead,
    Notify,
    Observe,
    ReadUnselected,
    Select,
    ServerChange,
    ServerSets,
    TimePasses,
    bulk_uri,
    catalog_kind,
)
from ._timeline import Timeline, alias_of, answer, heard

ACK_TIMEOUT = 2.0
MAX_TURNS = 10_000
"""Decisions carried out in one settle before the world calls it a livelock."""


@dataclass(slots=True)
class _Stream:
    attempt: int
    subscription_id: str
    receive: MemoryObjectReceiveStream[Push]


@dataclass(slots=True)
class _Flight:
    """One server read under way (until judged), as `_flights` keeps them."""

    uri: str
    partition: Partition
    ticket: ReadTicket | None = None
    held: ReadReply | RequestFailed | None = None
    """The answer a held read will deliver (decided when it arrived)."""
    result: ReadResult | None = None
    sent: int = 0


@dataclass(slots=True)
class _Reader:
    """A caller's read waiting in the background (*background read*)."""

    uri: str
    partition: Partition
    flight: _Flight | None = None
    result: ReadResult | None = None
    ack: int | None = None
    """The stream attempt whose first acknowledgment the read waits for, as
    `FreshCache._after_ack` does (its read is then the ack's)."""


@dataclass(slots=True)
class CoreWorld:
    """Plays rows on the bare engine and supervisor (see module doc)."""

    name = "core"
    server: ReferenceServer = field(default_factory=ReferenceServer)
    clock: VirtualClock = field(default_factory=VirtualClock)
    stream_clock: float = 0.0
    principal: str | None = None
    engine: FreshnessEngine = field(init=False)
    supervisor: ListenSupervisor = field(init=False)
    holding: bool = False
    relist_wanted: bool = False
    catalogs_wanted: set[CatalogKind] = field(default_factory=set)
    """Catalogs a `Relist` asked for: walked in the background (`settle`), as a cache does."""
    page_delay: float = 0.0
    """Seconds each list page after the first takes (``given later list pages take``)."""
    listening: bool = False
    _streams: dict[int, _Stream] = field(default_factory=dict)
    _flights: dict[tuple[str, Partition], _Flight] = field(default_factory=dict)
    _scheduled: deque[tuple[str, Partition]] = field(default_factory=deque)
    _readers: list[_Reader] = field(default_factory=list)
    timeline: Timeline = field(default_factory=Timeline)

    # ------------------------------------------------------------------ lifecycle

    def start(self, setup: Setup) -> None:
        self.page_delay = setup.later_pages_delay_ms / 1000
        self.principal = setup.principal
        configure_reference(self.server, setup)
        bound = {} if setup.store_entries is None else {"max_entries": setup.store_entries}
        self.engine = FreshnessEngine(
            store=MemoryStore(**bound),
            policy=Policy(**setup.policy),
            server_id="core://reference",
            default_partition=setup.principal,
            clock=self.clock,
            wall_clock=self.clock.wall,
        )
        backoff = BackoffSettings(base=0.002, cap=0.01, quick_death=0.0)
        self.supervisor = ListenSupervisor(ReconnectBudget(backoff), ACK_TIMEOUT)
        self.carry_out(self.engine.select(setup.selected))
        # Discovery: a server without listen is told to the engine; else streams begin.
        if not self.server.down and not self.server.listen_supported:
            self.carry_out(self.engine.handle(ListenUnsupported("no listen")))
        else:
            self.listening = True
            self.obey(self.supervisor.want(self.engine.selected, self.stream_clock))
        self.settle()
        if setup.cached:
            for uri in (ALIASES["selected"], ALIASES["other"]):
                self.read(uri)
            self.settle()

    def stop(self) -> None:
        for stream in list(self._streams.values()):
            self.server.unsubscribe(stream.subscription_id)
            stream.receive.close()
        self._streams.clear()

    @property
    def stream_status(self) -> str:
        return self.engine.stream_status

    def server_reads(self) -> int:
        return self.server.reads

    def unplayable(self, case: Case) -> str | None:
        if any(isinstance(s, Observe) and s.how == "context" for s in case.row.steps):
            return "no FreshCache at the bare-engine level: context() is the cache's"
        if any(isinstance(s, Observe) and s.how == "call_tool" for s in case.row.steps):
            return (
                "no FreshCache at the bare-engine level: call_tool (its re-list and its one "
                "retry) is the cache's"
            )
        return engine_unplayable(case)

    # ------------------------------------------------------------------ decisions

    def carry_out(self, decisions: list[Decision]) -> None:
        for decision in decisions:
            match decision:
                case ReadResource(uri=uri, partition=partition):
                    key = (uri, partition)
                    if key not in self._flights and key not in self._scheduled:
                        self._scheduled.append(key)
                case Relist(kind="resources"):
                    self.relist_wanted = True
                case Relist(kind=kind):
                    self.catalogs_wanted.add(catalog_kind(kind))
                case Relisten(resource_uris=uris):
                    if self.listening:
                        lists = self.engine.lists_wanted
                        self.obey(self.supervisor.want(uris, self.stream_clock, lists=lists))

    def obey(self, decisions: list[StreamDecision]) -> None:
        for decision in decisions:
            match decision:
                case OpenStream(attempt=attempt, uris=uris):
                    self._open(attempt, uris)
                case CloseStream(attempt=attempt):
                    stream = self._streams.pop(attempt, None)
                    if stream is not None:
                        self.engine.cancel_subscription(stream.subscription_id)
                        self.server.unsubscribe(stream.subscription_id)
                        stream.receive.close()

    def _open(self, attempt: int, uris: frozenset[str]) -> None:
        server = self.server
        sid = f"listen-{server.next_subscription_id()}"
        self.timeline.note("listen sent")
        self.carry_out(self.engine.handle(ListenStarted(sid, uris, True)))
        if not server.listen_supported:
            self._ended(attempt, sid, ListenUnsupported("listening switched off"), "unsupported")
            return
        registered = server.subscribe(
            sid, uris, True, frozenset({"tools", "prompts"}), embed=self.engine.policy.pushed_bodies
        )
        if registered is None:
            self._ended(attempt, sid, StreamLost(sid, "connection refused"), "lost")
            return
        self._streams[attempt] = _Stream(attempt, sid, registered[1])

    def _ended(self, attempt: int, sid: str, event: StreamEvent, outcome: str) -> None:
        stream = self._streams.pop(attempt, None)
        if stream is not None:
            stream.receive.close()
        self.server.unsubscribe(sid)
        self.carry_out(self.engine.handle(event))
        assert outcome in ("lost", "closed", "unsupported")
        self.obey(self.supervisor.ended(attempt, outcome, self.stream_clock))  # type: ignore[arg-type]

    def _drain(self, stream: _Stream) -> bool:
        """Feed what the server queued on ``stream``; whether anything was."""
        sid, fed = stream.subscription_id, False
        while self._streams.get(stream.attempt) is stream:
            try:
                push = stream.receive.receive_nowait()
            except anyio.WouldBlock:
                return fed
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                self._ended(stream.attempt, sid, StreamLost(sid, "stream ended"), "lost")
                return True
            fed = True
            event = push_event(sid, push)
            said = heard(event)  # on the timeline as the cache's source would say it
            if said is not None:
                self.timeline.note(said)
            match event:
                case ListenAcknowledged():
                    self.carry_out(self.engine.handle(event))
                    self.obey(self.supervisor.acknowledged(stream.attempt, self.stream_clock))
                case StreamClosed():
                    self._ended(stream.attempt, sid, event, "closed")
                case StreamLost():
                    self._ended(stream.attempt, sid, event, "lost")
                case _:
                    self.carry_out(self.engine.handle(event))
        return fed

    # ------------------------------------------------------------------ reads

    def _launch(self, uri: str, partition: Partition) -> _Flight:
        flight = _Flight(uri, partition)
        self._flights[(uri, partition)] = flight
        self._fly(flight)
        return flight

    def _fly(self, flight: _Flight) -> None:
        """Send reads for ``flight`` until one is judged, or the server holds one."""
        engine = self.engine
        while flight.sent < engine.policy.max_rereads:
            flight.ticket = engine.begin_read(flight.uri, flight.partition)
            flight.sent += 1
            self.timeline.note(f"read sent {alias_of(flight.uri)}")
            reply = self.server._answer(flight.uri, flight.partition)
            if self.holding:
                flight.held = reply
                return
            if self._judge(flight, reply):
                return
        self._land(
            flight,
            problem_result(flight.uri, AWAITING_FRESH_SOURCE, "invalidated", server_read=True),
        )

    def _judge(self, flight: _Flight, reply: ReadReply | RequestFailed) -> bool:
        self.timeline.note(answer(flight.uri, reply))
        for hint in reply.hints:
            self.carry_out(self.engine.handle_hint(hint))
        assert flight.ticket is not None
        result = self.engine.finish_read(flight.ticket, reply)
        if result is None:
            return False  # an invalidation overtook it: read again
        self._land(flight, result)
        return True

    def _land(self, flight: _Flight, result: ReadResult) -> None:
        flight.result = result
        if self._flights.get((flight.uri, flight.partition)) is flight:
            del self._flights[(flight.uri, flight.partition)]

    def _release(self) -> None:
        self.holding = False
        for flight in [f for f in self._flights.values() if f.held is not None]:
            reply, flight.held = flight.held, None
            assert reply is not None
            if not self._judge(flight, reply):
                self._fly(flight)

    def _wait(self, reader: _Reader) -> bool:
        """Move ``reader`` on as `FreshCache.read` does; whether it has its result."""
        engine = self.engine
        for _ in range(engine.policy.max_rereads + 1):
            flight = reader.flight
            if flight is None:
                key = (reader.uri, reader.partition)
                flight = reader.flight = self._flights.get(key) or self._launch(*key)
            if flight.result is None:
                return False  # held at the server
            result, ticket = flight.result, flight.ticket
            if result.contents and (ticket is None or not engine.is_current(ticket)):
                reader.flight = None  # text from before an invalidation: read again
                continue
            reader.result = result
            return True
        reader.result = problem_result(reader.uri, AWAITING_FRESH_SOURCE, "invalidated")
        return True

    def read(self, uri: str, principal: str | None = None) -> ReadResult:
        partition = self.principal if principal is None else principal
        cached = self.engine.lookup(uri, partition)
        if cached is not None:
            return cached
        reader = _Reader(uri, partition)
        if self._wait(reader):
            assert reader.result is not None
            return reader.result
        return self.engine.note_timeout(uri, partition)  # the caller's deadline passed

    def read_later(self, uri: str) -> None:
        partition = self.principal
        cached = self.engine.lookup(uri, partition)
        reader = _Reader(uri, partition, result=cached)
        if cached is None:
            if self.engine.waits_for_ack(uri, partition):
                reader.ack = self.supervisor.awaits_ack(uri)
            if reader.ack is None:
                self._wait(reader)
        self._readers.append(reader)

    def await_background(self) -> ReadResult:
        self.settle()
        reader = self._readers.pop(0)
        if reader.result is None:
            raise AssertionError("the background read is still held at the server")
        return reader.result

    # ------------------------------------------------------------------ lists

    def list_resources(self, partition: Partition = None) -> ListResult:
        walk = ListWalk(self.engine, partition)
        while (ticket := walk.next_page()) is not None:
            reply = self.server.list_page(ticket.cursor)
            self._slow(ticket.cursor)
            for hint in reply.hints:
                self.carry_out(self.engine.handle_hint(hint))
            walk.landed(ticket, reply)
        assert walk.result is not None
        return walk.result

    def catalog(self, kind: CatalogKind, principal: str | None = None) -> Catalog:
        """A catalog as `FreshCache.tools` & co. hand it out: the hit, else one walk."""
        partition = self.principal if principal is None else principal
        hit = self.engine.catalog_lookup(kind, partition)
        if hit is not None:
            return hit
        done = self.engine.begin_catalog(kind, partition)
        self.carry_out(self.engine.catalog_asked())
        while (ticket := done.walk.next_page()) is not None:
            reply = self.server.catalogs.page(kind, ticket.cursor, partition, down=self.server.down)
            self._slow(ticket.cursor)
            done.walk.landed(ticket, reply)
        return self.engine.settle_catalog(done)

    def _slow(self, cursor: str | None) -> None:
        """A page after the first lands `page_delay` later (the TTL clock moves)."""
        if cursor is not None:
            self.clock.advance(self.page_delay)

    # ------------------------------------------------------------------ steps

    def act(self, step: ServerSets | Notify | NextRead | ServerChange) -> None:
        match step:
            case ServerChange(what="hold_reads"):
                self.holding = True
            case ServerChange(what="release_reads"):
                self._release()
            case _:
                apply_to_reference(self.server, step, self.principal)

    def settle(self) -> None:
        """Carry out everything due until nothing is (no event loop: no waiting)."""
        for _ in range(MAX_TURNS):
            if self._turn():
                continue
            retry = self.supervisor.retry_at
            if retry is not None and self._wants_stream():
                self.stream_clock = max(self.stream_clock, retry)  # the backoff, skipped
                continue
            return
        raise AssertionError(f"the engine did not settle after {MAX_TURNS} turns")

    def _turn(self) -> bool:
        """Carry out one batch of what is due; whether there was any."""
        moved = False
        for stream in list(self._streams.values()):
            moved |= self._drain(stream)
        decisions = self.supervisor.tick(self.stream_clock)
        if decisions:
            self.obey(decisions)
            moved = True
        if self.relist_wanted:
            # Before the reads decided with it: a cache's read tasks first let what is
            # already queued run, and its list walk is one of those.
            self.relist_wanted = False
            listed = self.list_resources(self.principal)
            if listed.state == FRESH:
                uris = (r.uri for r in listed.resources)
                self.carry_out(self.engine.list_complete(uris, self.principal))
            moved = True
        while self.catalogs_wanted:
            self.catalog(self.catalogs_wanted.pop())  # a background re-list
            moved = True
        while self._scheduled:
            key = self._scheduled.popleft()
            if key not in self._flights:
                self._launch(*key)
                moved = True
        for reader in self._readers:
            if reader.ack is not None and self.supervisor.awaits_ack(reader.uri) != reader.ack:
                reader.ack = None  # acknowledged (or that attempt failed): read now
                reader.result = self.engine.lookup(reader.uri, reader.partition)
                if reader.result is None:
                    self._wait(reader)
                moved = True
            if reader.result is None and reader.flight is not None:
                moved |= reader.flight.result is not None and self._wait(reader)
        return moved

    def _wants_stream(self) -> bool:
        server, selected = self.server, self.engine.selected
        if not self.listening or server.down or not selected or self.supervisor.unsupported:
            return False
        if server.acks_held:
            return not server.listens_for(selected)
        return self.engine.stream_status != "live"


def play_core(case: Case) -> CaseReport:
    """Play one case on a fresh `CoreWorld`; never raises for a failing case."""
    started = time.perf_counter()
    world = CoreWorld()
    reason = fleet_unplayable(case, fleet_world=False) or world.unplayable(case)
    if reason is not None:
        return CaseReport(case.id, case.where, True, expected_text(case), "-", skipped=reason)
    setup = Setup.from_givens([s for s in case.row.steps if isinstance(s, Given)])
    last: Observation | None = None
    failures: list[str] = []
    actual: str | None = None
    try:
        world.start(setup)
        try:
            baseline = world.server_reads()
            world.timeline.begin()
            for phrase, step in zip(step_phrases(case), case.row.steps, strict=True):
                if not isinstance(step, Given):
                    world.timeline.note(f"step: {phrase}")
                    last = _do(world, step, last)
                    world.settle()
                    note_result(world.timeline, step, last)
            reads = world.server_reads() - baseline
            failures = check(case.row.expect, last, world, reads)
            actual = compared(case.row.expect, last, world, reads)
        finally:
            world.stop()
    except Exception as exc:  # a crash is a failed case, reported with its cause
        failures = [f"crashed: {type(exc).__name__}: {exc}"]
    return report(case, last, failures, started, actual, world.timeline)


def _do(world: CoreWorld, step: object, last: Observation | None) -> Observation | None:
    match step:
        case Observe(how="read", uri=uri, principal=principal):
            return world.read(uri, principal)
        case Observe(how="status", uri=uri, principal=principal):
            return world.engine.status(uri, world.principal if principal is None else principal)
        case Observe(how="list"):
            return world.list_resources(world.principal)
        case Observe(how="background", uri=uri):
            world.read_later(uri)
            return last
        case Observe(how="await_background"):
            return world.await_background()
        case Observe(how="catalog", uri=kind, principal=principal):
            return world.catalog(catalog_kind(kind), principal)
        case Observe(how="catalog_status", uri=kind):
            return world.engine.catalog_status(catalog_kind(kind), world.principal)
        case Observe(how="mutate_catalog", uri=kind):
            mutate_everything(world.catalog(catalog_kind(kind)))
            return world.catalog(catalog_kind(kind))
        case TimePasses(seconds=seconds):
            world.clock.advance(seconds)
            return last
        case Select(uris=uris):
            world.carry_out(world.engine.select(uris))
            return last
        case ServerSets() | Notify() | NextRead() | ServerChange():
            world.act(step)
            return last
        case ReadUnselected(count=count):
            for n in range(count):
                world.act(ServerSets(bulk_uri(n), "v1", notify=False))
                last = world.read(bulk_uri(n))
            return last
        case _:
            raise AssertionError(f"unhandled step {step!r}")
