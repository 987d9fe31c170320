"""Property tests aimed at the seams issue 22 closed: where a piece of the promise used to
be decided outside the engine.

- **2025-11-25 subscribe/unsubscribe answered in every order.** A model server takes
  the client's subscribe/unsubscribe requests for one URI and processes them in any
  order it likes (refusing some), answers them in any order, or never; the client
  wants and stops wanting the URI at any moment, gives up on requests, sends early
  (the wait's deadline passed) and loses its channel. After every step: whenever the
  ledger (`freshcache._core._subscribe_order.SubscribeLedger`) says the URI is
  covered, the server holds the subscription *and* no unsubscribe for it the server
  has yet to process is in flight on this channel (so nothing can undo it unseen; a
  subscribe still to be processed can only add the subscription).
- **`context()` with notifications interleaved between its reads.** The engine is
  driven by a model server; `read_all` (the `Context` snapshot) reads a few URIs whose
  server reads take a drawn number of scheduler turns, while another task changes the
  server, notifies, sends change hints for URIs never read and lets time pass. The
  `Context` returned must carry no text older than the newest change the client heard
  of before it returned, and its withheld parts carry no text.
- **Fleet reads for allowed and denied principals, public and private answers, Valkey
  up and down.** Two workers' real `SharedReads` over a real Valkey (one per module),
  each with its own engine; principals are allowed and denied at any moment, the
  server answers public or private, the store goes down and comes back. After every
  read: a principal never gets another principal's private text, and never gets text
  while its own latest server read was refused (on the worker that heard the refusal,
  and on every worker when the store took the denial marker).

The default run is short (a few hundred examples in all, seconds). Set
``FRESHCACHE_LONG_PROPERTIES=1`` for the long run: 100,000 examples per test (the
fleet test talks to Valkey on every step: budget an hour or more)::

    FRESHCACHE_LONG_PROPERTIES=1 python -m pytest -q -p no:cacheprovider tests/test_properties_judge.py

``FRESHCACHE_JUDGE_EXAMPLES=N`` sets the examples per test for a run in between (8,000
for the two sans-IO tests: about a minute).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from freshcache import Policy
from freshcache._core import (
    FRESH,
    FreshnessEngine,
    ListenAcknowledged,
    ListenStarted,
    ReadReply,
    ReadResult,
    RequestFailed,
    ResourceContents,
    ResourceUpdated,
)
from freshcache._core._subscribe_order import SUBSCRIBE, UNSUBSCRIBE, Op
from freshcache._middleware._context import read_all
from freshcache._middleware._store import MemoryStore
from freshcache._protocol._legacy import LegacySession
from tests.test_properties import Clock

LONG = os.environ.get("FRESHCACHE_LONG_PROPERTIES") == "1"
ASKED = 100_000 if LONG else int(os.environ.get("FRESHCACHE_JUDGE_EXAMPLES", "0"))
"""The examples per test asked for from outside (0: each test's own short default)."""

# The suite's 120 s per test fits the short run; a longer run asked for gets a bound
# scaled with it (0.25 s an example: the fleet test's Valkey steps on a loaded
# machine), so the documented long run can finish (it died at 120 s in 3 of 5 tests).
pytestmark = pytest.mark.timeout(max(120.0, 0.25 * ASKED))


def examples(default: int) -> settings:
    return settings(
        max_examples=ASKED or default,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


U = "u://a"

# ---------------------------------------------------------------------- 2025 ordering


@dataclass
class _Request:
    op: Op
    epoch: int
    processed: bool = False
    refused: bool = False


@dataclass
class _Server2025:
    subscribed: bool = False
    epoch: int = 0
    in_flight: list[_Request] = field(default_factory=list)
    """Sent, on any channel: unprocessed (the server may still act on them) or
    processed and not yet answered."""


_steps_2025 = st.lists(
    st.one_of(
        st.tuples(st.just("want"), st.booleans()),
        st.tuples(st.just("send"), st.booleans()),  # True: early (the wait's deadline passed)
        st.tuples(st.just("process"), st.integers(0, 5), st.booleans()),  # index, refuse
        st.tuples(st.just("answer"), st.integers(0, 5)),
        st.tuples(st.just("abandon"), st.integers(0, 5)),
        st.just(("end",)),
    ),
    max_size=40,
)


@examples(1_000)
@given(_steps_2025)
@example(  # a subscribe given up on (its listen closed at its ack deadline), sent again
    [
        ("want", True),
        ("send", False),
        ("abandon", 0),
        ("want", True),
        ("send", False),
        ("process", 1, False),
        ("answer", 0),
        ("process", 0, False),
    ]
)
@example(  # the same, the unsubscribe given up on: that one may still undo the subscribe
    [
        ("want", True),
        ("send", False),
        ("process", 0, False),
        ("answer", 0),
        ("want", False),
        ("send", False),
        ("abandon", 0),
        ("want", True),
        ("send", False),
        ("process", 1, False),
        ("answer", 0),
        ("process", 0, False),
    ]
)
@example(  # the unsubscribe given up on and overtaken: the server finishes it last
    [
        ("want", True),
        ("send", False),
        ("process", 0, False),
        ("answer", 0),
        ("want", False),
        ("send", False),
        ("abandon", 0),
        ("want", True),
        ("send", False),
        ("process", 1, False),
        ("answer", 0),
    ]
)
@example(  # subscribe sent early while the unsubscribe is pending, answered first
    [
        ("want", True),
        ("send", False),
        ("process", 0, False),
        ("answer", 0),
        ("want", False),
        ("send", False),
        ("want", True),
        ("send", True),
        ("process", 1, False),
        ("answer", 0),
        ("process", 0, False),
        ("answer", 0),
    ]
)
def test_2025_coverage_holds_whatever_order_the_server_answers_in(steps):
    session = LegacySession(subscribe=True, initialized=True)
    ledger = session.ledger
    server = _Server2025()
    for step in steps:
        match step:
            case ("want", wanted):
                if wanted:
                    session.to_subscribe([U])
                else:
                    session.to_unsubscribe([])
            case ("send", early):
                ops = ledger._uris.get(U)
                unsent = next((op for op in ops.queue if not op.sent), None) if ops else None
                if unsent is not None and (early or ledger.may_send(unsent)):
                    op = ledger.next_op(U, unsent.kind)
                    assert op is unsent
                    server.in_flight.append(_Request(op, server.epoch))
            case ("process", index, refuse):
                waiting = [r for r in server.in_flight if not r.processed]
                if waiting:
                    request = waiting[index % len(waiting)]
                    request.processed, request.refused = True, refuse
                    if request.epoch == server.epoch and not refuse:
                        server.subscribed = request.op.kind == SUBSCRIBE
            case ("answer", index):
                done = [r for r in server.in_flight if r.processed]
                if done:
                    request = done[index % len(done)]
                    server.in_flight.remove(request)
                    ledger.settle(request.op, not request.refused)
            case ("abandon", index):
                if server.in_flight:
                    request = server.in_flight[index % len(server.in_flight)]
                    ledger.settle(request.op, None)  # the client gives up; the server may not
            case ("end",):
                session.ended()
                server.epoch += 1
                server.subscribed = False  # a new session: the server remembers nothing
        if ledger.covers(U):
            assert server.subscribed, steps
            assert not [
                r
                for r in server.in_flight
                if r.epoch == server.epoch and not r.processed and r.op.kind == UNSUBSCRIBE
            ], steps


def test_2025_coverage_is_reached_when_the_server_behaves():
    """The property above cannot pass by never covering: in order, it covers."""
    session = LegacySession(subscribe=True, initialized=True)
    for wanted in (True, False, True):
        uris = session.to_subscribe([U]) if wanted else session.to_unsubscribe([])
        (op,) = (session.ledger.next_op(uri, SUBSCRIBE if wanted else UNSUBSCRIBE) for uri in uris)
        assert op is not None and session.ledger.may_send(op)
        session.ledger.settle(op, True)
    assert session.subscribed == {U}


def test_2025_a_subscribe_given_up_on_does_not_outlive_the_next_one():
    """A subscribe never answered (its listen closed at its ack deadline on a loaded
    machine) only adds the subscription whenever the server acts on it: the next
    subscribe answered in order covers the URI (only an unsubscribe given up on keeps it
    uncovered until the channel ends)."""
    session = LegacySession(subscribe=True, initialized=True)
    ledger = session.ledger
    (lost,) = (ledger.next_op(uri, SUBSCRIBE) for uri in session.to_subscribe([U]))
    assert lost is not None
    ledger.settle(lost, None)
    assert not ledger.covers(U) and session.to_subscribe([U]) == [U]
    again = ledger.next_op(U, SUBSCRIBE)
    assert again is not None and ledger.may_send(again)
    ledger.settle(again, True)
    assert session.subscribed == {U}


# ---------------------------------------------------------------------- context()

CONTEXT_URIS = ("u://a", "u://b", "u://c")


@dataclass
class _Model:
    version: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CONTEXT_URIS, 1))
    heard: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CONTEXT_URIS, 0))
    """The newest version of each URI the client has heard a change of."""


def _engine(clock: Clock, policy: Policy | None = None) -> FreshnessEngine:
    return FreshnessEngine(
        store=MemoryStore(max_entries=8), policy=policy, clock=clock, wall_clock=clock
    )


_events = st.lists(
    st.one_of(
        st.tuples(st.just("notify"), st.sampled_from(CONTEXT_URIS)),
        st.tuples(st.just("silent"), st.sampled_from(CONTEXT_URIS)),
        st.tuples(st.just("hint"), st.sampled_from(("u://never", *CONTEXT_URIS))),
        st.tuples(st.just("time"), st.integers(0, 3)),
        st.tuples(st.just("pause"), st.integers(0, 4)),
    ),
    max_size=12,
)


@examples(500)
@given(
    _events,
    st.dictionaries(st.sampled_from(CONTEXT_URIS), st.integers(0, 6)),
    st.lists(st.sampled_from(CONTEXT_URIS), min_size=1, max_size=4),
    st.sets(st.sampled_from(CONTEXT_URIS)),
)
def test_context_never_carries_text_older_than_a_change_heard_before_it_returned(
    events, delays, asked, warm
):
    clock = Clock()
    engine = _engine(clock)
    model = _Model()
    returned: list[tuple[Any, dict[str, int]]] = []

    async def read(uri: str, *, timeout: float, principal: str | None) -> ReadResult:
        hit = engine.lookup(uri, None)
        if hit is not None:
            return hit
        for _ in range(3):
            ticket = engine.begin_read(uri, None)
            text = f"{model.version[uri]}"  # what the server holds when the read is sent
            for _ in range(delays.get(uri, 0)):
                await anyio.lowlevel.checkpoint()
            reply = ReadReply((ResourceContents(uri, text=text),), ttl_ms=2_000)
            result = engine.finish_read(ticket, reply)
            if result is not None and engine.is_current(ticket):
                return result
        return engine.status(uri, None)

    async def meddle() -> None:
        for event in events:
            match event:
                case ("notify", uri):
                    model.version[uri] += 1
                    model.heard[uri] = model.version[uri]
                    engine.handle(ResourceUpdated(uri, None))
                case ("silent", uri):
                    model.version[uri] += 1  # a change nobody told the client of
                case ("hint", uri):
                    if uri in model.version:
                        model.heard[uri] = model.version[uri]
                    engine.handle_hint(ResourceUpdated(uri, None))
                case ("time", seconds):
                    clock.now += seconds
                case ("pause", turns):
                    for _ in range(turns):
                        await anyio.lowlevel.checkpoint()

    async def main() -> None:
        for uri in sorted(warm):
            await read(uri, timeout=1.0, principal=None)
        async with anyio.create_task_group() as tg:
            tg.start_soon(meddle)

            async def step() -> None:
                context = await read_all(read, asked, 5.0, None, engine, None)
                returned.append((context, dict(model.heard)))  # nothing awaited in between

            tg.start_soon(step)

    anyio.run(main)
    ((context, heard),) = returned
    for result in context.fresh:
        assert result.state == FRESH and result.text is not None
        assert int(result.text) >= heard[result.uri], (result, heard)
    assert all(result.text is None for result in context.withheld)
    assert [r.uri for r in (*context.fresh, *context.withheld)] != [] and {
        r.uri for r in (*context.fresh, *context.withheld)
    } == set(asked)


# ---------------------------------------------------------------------- the fleet


@pytest.fixture(scope="module")
def valkey_url() -> Iterator[str]:
    from tests.valkey_support import Valkey

    server = Valkey()
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


PRINCIPALS = ("alice", "bob", None)


@dataclass
class _FleetServer:
    """Answers reads by its ACL; private text names its reader, public text does not."""

    scope: str
    denied: set[str | None] = field(default_factory=set)
    version: int = 1
    reads: list[tuple[str | None, bool]] = field(default_factory=list)

    async def read_resource(self, uri: str, principal: str | None) -> ReadReply | RequestFailed:
        allowed = principal not in self.denied
        self.reads.append((principal, allowed))
        if not allowed:
            return RequestFailed("denied", "not you")
        owner = "pub" if self.scope == "public" else str(principal)
        return ReadReply(
            (ResourceContents(uri, text=f"{owner}:{self.version}"),),
            ttl_ms=60_000,
            cache_scope=self.scope,  # type: ignore[arg-type]
        )


class _Down(Exception):
    pass


class _Switch:
    """The store as one worker sees it: every command fails while ``down``."""

    def __init__(self, shared: Any, announced: set[tuple[str, Any]]) -> None:
        self.shared = shared
        self.down = False
        self.announced = announced
        """What the channel announced to every worker: (URI, partition) denials (a
        marker written is announced in the same script)."""
        self.standings: list[Any] = []
        """Every worker's `Standing`: a denial announced ends the principal's there."""

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.shared, name)
        if not callable(target):
            return target

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                raise _Down(name)
            answer = await target(*args, **kwargs)
            if name == "deny":
                self.announced.add((args[0], args[1]))
                for standing in self.standings:
                    standing.heard_refusal(args[0], self.shared.tag(args[1]))
            elif name == "allow":
                self.announced.discard((args[0], args[1]))
            return answer

        return call


def _worker(engine: FreshnessEngine, shared: _Switch, share_public: bool) -> Any:
    from types import SimpleNamespace

    from freshcache._core import Standing
    from freshcache._fleet._reads import SharedReads
    from freshcache._fleet._worker import Binding, FleetCounters
    from freshcache.fleet import Fleet

    worker = SimpleNamespace(
        bound=Binding(engine, lambda d: None, lambda u: None, share_public, False, 60_000.0),
        channel=SimpleNamespace(usable=True),
        outbox=SimpleNamespace(pending=lambda uri: False),
        config=Fleet("redis://x/0", fill_lock=0.05, op_timeout=0.5),
        shared=shared,
        id="w",
        counters=FleetCounters(),
        telemetry=SimpleNamespace(
            fenced_off=lambda uri, generation: None, answered=lambda source: None
        ),
        store_answered=lambda: None,
        standing=Standing(shared.shared.tag),
    )
    worker.reads = SharedReads(worker)  # type: ignore[arg-type]
    # As `FleetWorker.bind` sets it: absence of a denial proves nothing.
    engine.denied_elsewhere = worker.standing
    return worker


_fleet_steps = st.lists(
    st.one_of(
        st.tuples(st.just("read"), st.integers(0, 1), st.sampled_from(PRINCIPALS)),
        st.tuples(st.just("deny"), st.sampled_from(PRINCIPALS)),
        st.tuples(st.just("allow"), st.sampled_from(PRINCIPALS)),
        st.tuples(st.just("store"), st.booleans()),
    ),
    max_size=14,
)


@examples(60)
@given(_fleet_steps, st.sampled_from(["public", "private"]), st.booleans())
@example(  # refused with the store up (marked), allowed, then read twice on the other
    # worker with the store down: the first is its own server read there (the marker
    # stays, the store is down), so the second is served from that copy (Standing)
    [
        ("deny", None),
        ("read", 0, None),
        ("allow", None),
        ("store", False),
        ("read", 1, None),
        ("read", 1, None),
    ],
    "public",
    False,
)
@example(  # issue 22's leak: bob refused on one worker, alice's public copy on the other
    [("deny", "bob"), ("read", 0, "bob"), ("read", 0, "alice"), ("read", 1, "bob")],
    "public",
    True,
)
@example(  # the store was down when bob was refused: that worker still remembers
    [
        ("deny", "bob"),
        ("store", False),
        ("read", 0, "bob"),
        ("store", True),
        ("read", 1, "alice"),
        ("read", 0, "bob"),
        ("allow", "bob"),
        ("read", 0, "bob"),
    ],
    "public",
    True,
)
@example(  # refused with the store up (marked), allowed, then its own read with the store
    # down: that read is served (it is the principal's own, from the server); the marker
    # stays, so no other copy serves it until a read with the store up ends it
    [("deny", None), ("read", 0, None), ("allow", None), ("store", False), ("read", 0, None)],
    "public",
    False,
)
@example(  # alice refused on worker 1 (marked fleet-wide): worker 0 hands her no copy of
    # its own from before the refusal either (only her own successful read ends it)
    [("read", 0, "alice"), ("deny", "alice"), ("read", 1, "alice"), ("read", 0, "alice")],
    "public",
    False,
)
@example(  # the same with private answers
    [("read", 0, "alice"), ("deny", "alice"), ("read", 1, "alice"), ("read", 0, "alice")],
    "private",
    False,
)
@example(  # private answers never cross principals, whatever the store holds
    [("read", 0, "alice"), ("read", 1, "bob"), ("store", False), ("read", 1, "alice")],
    "private",
    True,
)
def test_fleet_reads_never_serve_a_denied_principal_or_another_principals_text(
    valkey_url, steps, scope, share_public
):
    from redis.asyncio import Redis

    from freshcache._fleet._store import SharedStore

    server = _FleetServer(scope)
    facts: dict[str, Any] = {"local": set(), "marked": set(), "proved": set()}

    async def main() -> None:
        redis = Redis.from_url(valkey_url, decode_responses=True)
        await redis.flushdb()
        shared = SharedStore(redis, "prop", "server", b"k")
        announced: set[tuple[str, Any]] = set()
        switches = [_Switch(shared, announced), _Switch(shared, announced)]
        clock = Clock()
        policy = Policy(share_public=share_public)
        engines = [_engine(clock, policy), _engine(clock, policy)]
        workers = []
        for engine, switch in zip(engines, switches, strict=True):
            engine.select([U])
            engine.handle(ListenStarted("s", frozenset({U}), False))
            engine.handle(ListenAcknowledged("s", frozenset({U}), False))
            workers.append(_worker(engine, switch, share_public))
        for switch in switches:  # every worker hears the channel's denial announcements
            switch.standings = [worker.standing for worker in workers]
        try:
            for step in steps:
                match step:
                    case ("deny", who):
                        server.denied.add(who)
                    case ("allow", who):
                        server.denied.discard(who)
                    case ("store", up):
                        for switch, worker in zip(switches, workers, strict=True):
                            switch.down = not up
                            worker.channel.usable = up
                    case ("read", index, who):
                        await _fleet_read(index, who, engines, workers, server, facts)
        finally:
            await redis.aclose()

    anyio.run(main)


async def _fleet_read(
    index: int,
    who: str | None,
    engines: list[FreshnessEngine],
    workers: list[Any],
    server: _FleetServer,
    facts: dict[str, Any],
) -> None:
    engine, worker = engines[index], workers[index]
    result = engine.lookup(U, who)
    own_reads = len(server.reads)
    if result is None:
        ticket = engine.begin_read(U, who)
        reply = await worker.reads.read(server, U, who)
        result = engine.finish_read(ticket, reply) or engine.status(U, who)
    up = worker.channel.usable
    this_call = server.reads[own_reads:]
    for principal, allowed in this_call:  # this principal's own reads
        was_denied_here = (index, principal) in facts["local"]
        if allowed:
            facts["local"].discard((index, principal))
            facts["proved"].add((index, principal))
            if up and (was_denied_here or principal in facts["marked"]):
                facts["marked"].discard(principal)
        else:
            facts["local"].add((index, principal))
            facts["proved"].discard((index, principal))
            if up:  # the marker is written and announced: every worker hears it
                facts["marked"].add(principal)
                facts["proved"] -= {(i, principal) for i in range(len(workers))}
    if result.text is None:
        return
    owner, _ = result.text.split(":")
    assert owner in ("pub", str(who)), (who, result)  # never another principal's text
    assert (index, who) not in facts["local"], (who, index, result, facts)
    if result.server_read:  # only ever this call's own read, one the server allowed
        assert (who, True) in this_call, (who, index, result, this_call)
    else:  # a copy (local or the store's) never serves a principal a marker stands
        # for, unless its own server read succeeded on this worker since every refusal
        # it heard (`Standing`): that read is newer than the marker it could not end
        assert who not in facts["marked"] or (index, who) in facts["proved"], (
            who,
            index,
            result,
            facts,
        )
