"""Property tests at the seams: re-listens with slow acks, hints, selection swaps, evictions.

Hypothesis drives the sans-IO `FreshnessEngine` with a manual clock, a tiny bounded
store (so entries are evicted all the time) and a model server with a version per URI.
It draws sequences of silent and notified server changes, reads whose replies land
late (interleaved with everything else), stream drops and graceful closes, re-listens
whose acknowledgment comes many steps later and covers the full filter or a subset,
change hints carried on a read's own answer, notifications with unknown or missing
subscription ids, selection changes, reads of many distinct unselected URIs, change
events for URIs never read, and time passing.

After every step the oracle checks, for every URI and partition, whatever
``engine.lookup`` and ``engine.status`` would hand out as text:

- invariant 1 (refined): the server read that produced it was sent after the latest
  invalidation of that URI: a ``resources/updated`` for it (any envelope, hints on
  answers included) or the loss of an acknowledged stream that covered it;
- invariant 4: a read sent before the acknowledgment of the stream that newly covers
  the URI (not covered by another live acknowledged stream at that moment, e.g.
  during a selection swap) is fresh only by its own TTL and, for a URI selected at
  that acknowledgment, only where the policy lets uncovered URIs live by TTL;
- TTL expiry: past its ``ttlMs`` text is fresh only for a selected URI that a live
  acknowledged stream covers, under ``Policy(subscription_backed=True)``;
- invariant 5: a selected URI no live acknowledged stream covers is never fresh
  under the default ``read_before_use`` policy;
- invariant 6: private text never crosses partitions.

A second test checks invariant 10 after every step: the engine holds at most a
small constant more per-URI records than there are URIs holding an entry, selected
or with a read in flight, besides the records of URIs whose last word was a failure,
a discarded reply or an invalidation (the engine may remember a bounded number of
those for `status`). A URI read successfully and then evicted must be forgotten.

The suite's run draws 400 examples per test (the two took 38 s of CPU at 1,000, the
most of any property test); every failure found so far is kept as an ``@example`` and
plays in every run. ``FRESHCACHE_SEAMS_EXAMPLES=N`` draws N; set
``FRESHCACHE_LONG_PROPERTIES=1`` for the long run (100,000 examples per test; several
minutes)::

    FRESHCACHE_LONG_PROPERTIES=1 python -m pytest -q tests/test_properties_seams.py
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from freshcache import Policy
from freshcache._core import (
    FRESH,
    Entry,
    EntryKey,
    FreshnessEngine,
    ListenAcknowledged,
    ListenStarted,
    ReadReply,
    ReadTicket,
    RequestFailed,
    ResourceContents,
    ResourceUpdated,
    StreamClosed,
    StreamLost,
)
from freshcache._middleware._store import MemoryStore
from tests.test_properties import PARTITIONS, URIS, Clock, parse, reply_text

LONG = os.environ.get("FRESHCACHE_LONG_PROPERTIES") == "1"
EXAMPLES = 100_000 if LONG else int(os.environ.get("FRESHCACHE_SEAMS_EXAMPLES", 400))
BOOKKEEPING_SLACK = 4
"""How many records beyond (entries + selected + in flight) a lazy sweep may keep."""


class WatchedStore(MemoryStore):
    """A `MemoryStore` that also tells the oracle which keys it holds."""

    def __init__(self, *, max_entries: int) -> None:
        super().__init__(max_entries=max_entries)
        self.keys: set[EntryKey] = set()

    def put(self, key: EntryKey, entry: Entry) -> None:
        self.keys.add(key)  # first: the put itself may evict the new key
        super().put(key, entry)

    def discard(self, key: EntryKey) -> None:
        self.keys.discard(key)
        super().discard(key)

    def set_eviction_listener(self, listener: Callable[[EntryKey], None]) -> None:
        def evicted(key: EntryKey) -> None:
            self.keys.discard(key)
            listener(key)

        super().set_eviction_listener(evicted)

    def claim(self, owner: object, listener: Callable[[Any, Any], None]) -> None:
        # The engine's listener in place of the one above (told what was held, too).
        def evicted(key: Any, held: Any) -> None:
            self.keys.discard(key)
            listener(key, held)

        super().claim(owner, evicted)


@dataclass
class Stream:
    requested: frozenset[str]
    acked: bool = False
    covered: frozenset[str] = frozenset()


@dataclass
class Flight:
    ticket: ReadTicket
    uri: str
    version: int
    sent_at: int
    partition: str | None


@dataclass
class Seams:
    """The model: what happened, kept apart from the engine's bookkeeping."""

    policy: Policy
    clock: Clock = field(default_factory=Clock)
    step: int = 0
    version: dict[str, int] = field(default_factory=dict)
    invalidated_at: dict[str, int] = field(default_factory=dict)
    newly_covered_at: dict[str, tuple[int, bool]] = field(default_factory=dict)
    """URI -> (step of the latest ack that newly covered it, selected at that ack)."""
    landed: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Stored text -> (clock when its reply landed, its TTL in seconds)."""
    streams: dict[str, Stream] = field(default_factory=dict)
    next_sid: int = 0
    selected: frozenset[str] = frozenset()
    in_flight: list[Flight] = field(default_factory=list)
    known: set[str] = field(default_factory=lambda: set(URIS))
    spoke: set[str] = field(default_factory=set)
    """URIs a failure, a discarded reply or an invalidation touched: their record may be
    remembered a while for `status` (a bounded number of them) after it is idle."""
    fresh_names: int = 0

    def covered(self) -> frozenset[str]:
        out: frozenset[str] = frozenset()
        for stream in self.streams.values():
            if stream.acked:
                out |= stream.covered
        return out

    def pick(self, index: int, *, acked: bool | None = None) -> str | None:
        sids = [s for s, st_ in self.streams.items() if acked is None or st_.acked == acked]
        return sids[index % len(sids)] if sids else None

    def new_uri(self, prefix: str) -> str:
        self.fresh_names += 1
        uri = f"u://{prefix}{self.fresh_names}"
        self.known.add(uri)
        return uri

    def invalidate(self, uri: str) -> None:
        self.invalidated_at[uri] = self.step
        self.spoke.add(uri)


uri_st = st.sampled_from(URIS)
# The default partition is the one selection, acks and re-reads act on: drawn most.
partition_st = st.sampled_from((None, None, *PARTITIONS))
sends = st.tuples(st.just("send"), uri_st, partition_st)
answers = st.tuples(
    st.just("answer"),
    st.integers(0, 7),
    st.sampled_from(["ok", "ok", "ok", "timeout", "denied", "local"]),
    st.sampled_from([10_000, 10_000, 0, 60_000]),
    st.booleans(),  # a change hint for the URI rode on this read's own answer
)
reads = st.tuples(st.just("read"), uri_st, partition_st, st.sampled_from([10_000, 60_000]))
listens = st.tuples(st.just("listen"), st.none() | st.frozensets(uri_st))
acks = st.tuples(
    st.just("ack"), st.integers(0, 3), st.none() | st.frozensets(uri_st), st.booleans()
)
ops = st.one_of(
    # Reads are what every seam is about: drawn more often, answered at once or late.
    reads,
    reads,
    sends,
    answers,
    st.tuples(st.just("change"), uri_st, st.booleans()),
    st.tuples(
        st.just("notify"), uri_st, st.sampled_from(["trusted", "pending", "unknown", "none"])
    ),
    listens,
    listens,
    acks,
    acks,
    st.tuples(st.just("retire"), st.integers(0, 3)),
    st.tuples(st.just("lose"), st.integers(0, 3), st.sampled_from(["lost", "closed", "all"])),
    st.tuples(st.just("select"), st.frozensets(uri_st)),
    st.tuples(st.just("tick"), st.sampled_from([0.5, 5.0, 30.0])),
    st.tuples(st.just("read_new"), st.integers(1, 6), st.booleans()),
    st.tuples(st.just("notify_new"), st.integers(1, 6)),
)


def play(engine: FreshnessEngine, model: Seams, op: tuple[object, ...]) -> None:
    """Carry out one drawn step on the engine and on the model."""
    match op:
        case ("send", str(uri), partition):
            ticket = engine.begin_read(uri, partition)
            # The server decides the answer when the request arrives: now.
            version = model.version.get(uri, 1)
            model.in_flight.append(Flight(ticket, uri, version, model.step, partition))
        case ("read", str(uri), partition, int(ttl_ms)):
            ticket = engine.begin_read(uri, partition)
            flight = Flight(ticket, uri, model.version.get(uri, 1), model.step, partition)
            answer(engine, model, flight, "ok", ttl_ms, hinted=False)
        case ("answer", int(index), how, int(ttl_ms), bool(hinted)):
            if not model.in_flight:
                return
            flight = model.in_flight.pop(index % len(model.in_flight))
            answer(engine, model, flight, str(how), ttl_ms, hinted=hinted)
        case ("change", str(uri), bool(notified)):
            model.version[uri] = model.version.get(uri, 1) + 1
            if notified:
                sid = next(
                    (s for s, st_ in model.streams.items() if st_.acked and uri in st_.covered),
                    None,
                )
                engine.handle(ResourceUpdated(uri, sid))
                model.invalidate(uri)
        case ("notify", str(uri), envelope):
            sid = {
                "trusted": model.pick(0, acked=True),
                "pending": model.pick(0, acked=False),
                "unknown": "nobody",
                "none": None,
            }[str(envelope)]
            engine.handle(ResourceUpdated(uri, sid))
            model.invalidate(uri)
        case ("listen", uris):
            requested = model.selected if uris is None else uris
            model.next_sid += 1
            sid = f"s{model.next_sid}"
            model.streams[sid] = Stream(frozenset(requested))
            engine.handle(ListenStarted(sid, frozenset(requested), True))
        case ("ack", int(index), subset, bool(swap)):
            pending = model.pick(index, acked=False)
            if pending is None:
                return
            stream = model.streams[pending]
            honoured = stream.requested if subset is None else subset & stream.requested
            before = model.covered()
            engine.handle(ListenAcknowledged(pending, honoured, True))
            stream.acked, stream.covered = True, honoured
            for uri in honoured - before:
                model.newly_covered_at[uri] = (model.step, uri in model.selected)
                model.spoke.add(uri)
            if swap:
                # The cache closes the stream this one replaces once it is acknowledged.
                for sid in [s for s in model.streams if s != pending]:
                    engine.cancel_subscription(sid)
                    del model.streams[sid]
        case ("retire", int(index)):
            sid = model.pick(index)
            if sid is not None:
                engine.cancel_subscription(sid)
                del model.streams[sid]
        case ("lose", int(index), how):
            sid = model.pick(index)
            if sid is None:
                return
            gone = list(model.streams) if how == "all" else [sid]
            if how == "closed":
                engine.handle(StreamClosed(sid))
            else:
                engine.handle(StreamLost(None if how == "all" else sid))
                for lost in gone:
                    for uri in model.streams[lost].covered:
                        model.invalidate(uri)
            for lost in gone:
                del model.streams[lost]
        case ("select", uris):
            engine.select(uris)
            model.selected = frozenset(uris)
        case ("tick", float(seconds)):
            model.clock.now += seconds
        case ("read_new", int(count), bool(lands)):
            for _ in range(count):
                uri = model.new_uri("n")
                flight = Flight(engine.begin_read(uri, None), uri, 1, model.step, None)
                if lands:
                    answer(engine, model, flight, "ok", 10_000, hinted=False)
                else:
                    model.in_flight.append(flight)
        case ("notify_new", int(count)):
            for _ in range(count):
                uri = model.new_uri("m")
                engine.handle(ResourceUpdated(uri, None))
                model.invalidate(uri)
        case _:
            raise AssertionError(f"unknown step {op!r}")


def answer(
    engine: FreshnessEngine, model: Seams, flight: Flight, how: str, ttl_ms: int, *, hinted: bool
) -> None:
    uri = flight.uri
    text = reply_text(uri, flight.version, flight.sent_at, flight.partition)
    contents = (ResourceContents(uri, text=text),)
    reply: ReadReply | RequestFailed
    if how == "ok":
        reply = ReadReply(contents, ttl_ms=ttl_ms, cache_scope="private")
    elif how == "local":
        reply = ReadReply(contents, ttl_ms=ttl_ms, from_server=False)
    else:
        reply = RequestFailed(how)
    if hinted:
        # The cache feeds `reply.hints` to the engine before judging the reply.
        engine.handle(ResourceUpdated(uri, None))
        model.invalidate(uri)
    model.landed[text] = (model.clock.now, engine.policy.ttl_seconds(ttl_ms))
    result = engine.finish_read(flight.ticket, reply)
    if result is None or result.state != FRESH:
        model.spoke.add(uri)
    if result is not None and result.state == FRESH:
        # What the caller is handed obeys invariant 1 too.
        assert how == "ok", result
        assert parse(result)[0] > model.invalidated_at.get(uri, -1), (uri, result.text)


def check_fresh_text(engine: FreshnessEngine, model: Seams) -> None:
    covered = model.covered()
    policy = engine.policy
    for uri in model.known:
        selected = uri in model.selected
        for partition in PARTITIONS:
            for seen in (engine.lookup(uri, partition), engine.status(uri, partition)):
                if seen is None or seen.text is None:
                    continue
                why = (uri, partition, seen.text, model.step)
                sent_at, owner = parse(seen)
                assert seen.state == FRESH, why
                assert owner == str(partition), why  # invariant 6
                assert sent_at > model.invalidated_at.get(uri, -1), why  # invariant 1
                landed_at, ttl = model.landed[seen.text]
                within_ttl = model.clock.now < landed_at + ttl
                acked_at, selected_at_ack = model.newly_covered_at.get(uri, (-1, False))
                if sent_at < acked_at:
                    # Invariant 4: a copy from before the ack of the stream that now
                    # covers the URI stays what it was; the ack never vouches for it.
                    assert within_ttl, ("pre-ack copy fresh past its TTL", *why)
                    assert not selected_at_ack or policy.uncovered == "ttl", (
                        "pre-ack copy of a selected URI fresh after the ack",
                        *why,
                    )
                if not within_ttl:
                    assert policy.subscription_backed and selected and uri in covered, why
                if selected and policy.uncovered == "read_before_use":
                    assert uri in covered, ("uncovered selected URI fresh", *why)  # invariant 5


def check_bookkeeping(engine: FreshnessEngine, model: Seams, store: WatchedStore) -> None:
    needed = {key[2] for key in store.keys} | model.selected | {f.uri for f in model.in_flight}
    remembered = model.spoke - needed
    assert engine.tracked_uris <= len(needed) + len(remembered) + BOOKKEEPING_SLACK, (
        engine.tracked_uris,
        sorted(needed),
        sorted(remembered),
    )


def run(
    steps: list[tuple[object, ...]],
    policy: Policy,
    max_entries: int,
    check: Callable[[FreshnessEngine, Seams, WatchedStore], None],
) -> None:
    model = Seams(policy)
    store = WatchedStore(max_entries=max_entries)
    engine = FreshnessEngine(store=store, policy=policy, clock=model.clock, wall_clock=model.clock)
    model.selected = frozenset(URIS[:2])
    engine.select(model.selected)  # no stream yet: everything before the very first ack
    for op in steps:
        model.step += 1
        play(engine, model, op)
        check(engine, model, store)


policies = st.builds(
    Policy,
    subscription_backed=st.booleans(),
    uncovered=st.sampled_from(["read_before_use", "ttl"]),
)
# Runs of a few steps each, concatenated: long sequences on average (the seams need
# several steps in a row), yet hypothesis still shrinks a failure down to one or two.
sequences = st.lists(st.lists(ops, min_size=1, max_size=6), min_size=1, max_size=10).map(
    lambda runs: [op for run in runs for op in run]
)
long_enough = pytest.mark.timeout(0 if LONG else 120)  # 0: no limit for the long run
seams_settings = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@long_enough
@seams_settings
@given(sequences, policies, st.integers(1, 3))
# The minimal failures found so far, replayed on every run.
@example(  # a copy read before the very first ack is fresh after it
    [("read", "u://a", None, 10_000), ("listen", None), ("ack", 0, None, False)], Policy(), 1
)
@example(  # deselected while covered, stream replaced: fresh past its TTL
    [
        ("listen", None),
        ("ack", 0, None, False),
        ("read", "u://a", None, 10_000),
        ("select", frozenset()),
        ("listen", None),
        ("ack", 0, None, True),
        ("tick", 30.0),
    ],
    Policy(subscription_backed=True),
    3,
)
@example(  # read before the ack while selected, deselected before it, selected after it
    [
        ("listen", None),
        ("read", "u://a", None, 10_000),
        ("select", frozenset()),
        ("ack", 0, None, False),
        ("tick", 30.0),
        ("select", frozenset({"u://a"})),
    ],
    Policy(subscription_backed=True),
    3,
)
def test_text_handed_out_is_never_older_than_the_latest_invalidation_at_every_seam(
    steps, policy, max_entries
):
    run(steps, policy, max_entries, lambda engine, model, _: check_fresh_text(engine, model))


@long_enough
@seams_settings
@given(sequences, policies, st.integers(1, 3))
@example([("read_new", 5, True), ("read", "u://a", None, 10_000)], Policy(), 1)
def test_per_uri_records_stay_bounded_by_entries_selection_and_reads_in_flight(
    steps, policy, max_entries
):
    run(steps, policy, max_entries, check_bookkeeping)
