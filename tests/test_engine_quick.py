"""The differential test of the speed path (`Rereads`, `_core/_rereads.py`) against the
general rules it stands in for.

`FreshnessEngine.handle` of a plain ``resources/updated`` and `finish_read` of a server
reply take the common case in one pass (issue 25), through the parts' public accessors. Hypothesis plays the same random
steps into two engines, one quick and one with ``quick`` off (the general rules only),
and after every step both must have answered the same and hold the same: decisions,
results, statuses, hit rows, records, counters, the store, the changes heard and the
denials. Steps include what the quick path must hand on: sub-resource notifications,
pushed bodies, public and shared copies, hintless and multi-round-trip replies, local
copies, failures, evictions by a small store, other partitions and a lost stream.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from freshcache import Policy
from freshcache._core import (
    ChangesMissed,
    FreshnessEngine,
    ListenAcknowledged,
    ListenStarted,
    ReadReply,
    ReadResult,
    ReadTicket,
    RequestFailed,
    ResourceContents,
    ResourceUpdated,
    StreamLost,
)
from freshcache._core._copies import _WINDOWS
from freshcache._middleware._store import MemoryStore

LONG = os.environ.get("FRESHCACHE_LONG_PROPERTIES") == "1"
"""The long run plays 3,000 examples (CI: 250, about 20 s on a loaded 2-core machine)."""

URIS = ("u://a", "u://b", "u://a/x", "u://long/one", "u://")
PARTITIONS = (None, "alice")

REPLIES = ("ok", "ok", "ok", "public", "hintless", "rounds", "shared", "local", "unknown")
FAILURES = ("timeout", "denied", "not_found", "unreachable")

send = st.tuples(st.just("send"), st.sampled_from(URIS), st.sampled_from(PARTITIONS))
answer = st.tuples(
    st.just("answer"),
    st.integers(0, 5),
    st.sampled_from(REPLIES),
    st.sampled_from([None, 10_000, 3_600_000]),
    st.sampled_from(["same", "same", "new"]),
)
reread = st.tuples(  # a read sent and answered before anything else lands
    st.just("reread"),
    st.sampled_from(URIS[:2]),
    st.sampled_from(PARTITIONS),
    st.sampled_from(REPLIES + FAILURES),
    st.sampled_from([None, 0, 10_000, 3_600_000]),
    st.sampled_from(["same", "new", "two"]),
)
ops = st.one_of(
    send,
    send,
    answer,
    answer,
    reread,
    reread,
    reread,
    st.tuples(
        st.just("answer"),
        st.integers(0, 5),
        st.sampled_from(REPLIES + FAILURES),
        st.sampled_from([None, 0, -5, 10_000, 3_600_000]),
        st.sampled_from(["same", "new", "two"]),
    ),
    st.tuples(
        st.just("notify"),
        st.sampled_from(URIS),
        st.sampled_from(["trusted", "unknown", "none", "body"]),
    ),
    st.tuples(st.just("listen"), st.sets(st.sampled_from(URIS))),
    st.tuples(st.just("ack"), st.sets(st.sampled_from(URIS))),
    st.tuples(st.just("lose")),
    st.tuples(st.just("missed")),
    st.tuples(st.just("unusable")),
    st.tuples(st.just("tick"), st.sampled_from([0.0004, 0.5, 30.0])),
    st.tuples(st.just("select"), st.sets(st.sampled_from(URIS))),
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def result_of(result: ReadResult | None) -> Any:
    if result is None:
        return None
    return (
        result.state,
        result.uri,
        result.reason,
        result.contents,
        result.text,
        result.version,
        result.fetched_at,
        result.server_read,
        result.age,
        result.detail,
    )


def row_of(row: Any) -> Any:
    if isinstance(row, ReadResult):
        return ("no time bound", result_of(row))
    return ("until", row.expires_at, result_of(row.value))


def held(engine: FreshnessEngine, invalidations: list[Any]) -> dict[str, Any]:
    """Everything the two engines must agree on after a step."""
    records = {}
    for uri in URIS:  # (`_uris.get` touches no entry)
        record = engine.copies.records.get(uri)
        if record is not None:
            records[uri] = (
                record.generation,
                record.flags,
                record.partitions,
                record.invalid_reason,
                None if record.problems is None else sorted(record.problems, key=str),
                result_of(record.value),
                record.expires_at,
                record.ttl,
            )
    store = engine.copies.store
    assert isinstance(store, MemoryStore)
    in_use_order = list(store._entries)  # before the statuses below touch every entry
    return {
        "status": {(u, p): result_of(engine.status(u, p)) for u in URIS for p in PARTITIONS},
        "lookup": {(u, p): result_of(engine.lookup(u, p)) for u in URIS for p in PARTITIONS},
        "rows": {
            str(p): {u: row_of(r) for u, r in sorted(table.items())}
            for p, table in engine.hit_tables.items()
        },
        "records": records,
        "counters": engine.counters.as_dict(),
        "invalidations": engine.copies.invalidated,
        "store": (store.entry_count, store.bytes_held, in_use_order),
        "heard": (
            engine.heard.count,
            engine.heard.everything,
            sorted(engine.heard._changed),
            sorted(engine.heard._cleared),
        ),
        "denials": sorted(engine.denials.pairs, key=str),
        "fetched_at": engine.copies.fetched_at,
        "tracked": engine.tracked_uris,
        "records_apart": sorted(engine.copies.records._records),
        "remembered": list(engine.copies.records._remembered),
        "dropped_above": engine.copies.records.dropped_above,
        "invalidation_events": list(invalidations),
        "unusable": engine.unusable,
    }


def reply_for(
    uri: str, how: str, ttl_ms: int | None, shape: str, made: dict[str, ReadReply]
) -> ReadReply | RequestFailed:
    if how in FAILURES:
        return RequestFailed(how)  # type: ignore[arg-type]
    text = f"{uri} text"
    contents: tuple[ResourceContents, ...] = (ResourceContents(uri, text=text),)
    if shape == "two":
        contents = (*contents, ResourceContents(uri, text="more", mime_type="text/plain"))
    options: dict[str, Any] = {"ttl_ms": ttl_ms, "cache_scope": "private"}
    if how == "public":
        options["cache_scope"] = "public"
    elif how == "hintless":
        options = {"hintless": True}
    elif how == "rounds":
        options["multi_round_trip"] = True
    elif how == "shared":
        options["shared_copy"] = True
    elif how == "local":
        options["from_server"] = False
    elif how == "unknown":
        options["from_server"] = None
    reply = ReadReply(contents, **options)
    if shape == "same" and how == "ok":
        # A source that hands out the same immutable reply for an unchanged resource.
        return made.setdefault(f"{uri}|{ttl_ms}", reply)
    return reply


@settings(
    max_examples=3000 if LONG else 250, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    st.lists(ops, min_size=8, max_size=60),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.sampled_from([None, "alice"]),
    st.sampled_from([2, 3, 10_000]),
    # 350 and 700 bytes: a put that evicts the very record it stores (the bound).
    st.sampled_from([64 * 1024 * 1024, 700, 350]),
)
# The cases a random search meets seldom: an own read ending a denial, a read ending a
# failure at the same generation, a private read replacing the shared public copy.
@example(
    [
        ("reread", "u://a", None, "denied", None, "new"),
        ("reread", "u://a", None, "ok", 10_000, "new"),
    ]
    * 4,
    False,
    False,
    False,
    False,
    None,
    10_000,
    64 * 1024 * 1024,
)
@example(
    [
        ("reread", "u://b", "alice", "timeout", None, "new"),
        ("reread", "u://b", "alice", "ok", 0, "same"),
    ]
    * 4,
    True,
    False,
    False,
    False,
    "alice",
    3,
    64 * 1024 * 1024,
)
@example(
    [
        ("reread", "u://a", None, "public", 10_000, "new"),
        ("reread", "u://a", None, "ok", 10_000, "same"),
    ]
    * 4,
    False,
    True,
    True,
    False,
    None,
    10_000,
    64 * 1024 * 1024,
)
@example(
    [
        ("missed",),
        ("reread", "u://a", None, "ok", 10_000, "same"),
        ("reread", "u://b", None, "ok", 10_000, "same"),
        ("reread", "u://a", None, "ok", 10_000, "same"),
        ("notify", "u://a", "trusted"),
        ("reread", "u://a", None, "ok", 10_000, "same"),
    ],
    False,
    False,
    False,
    False,
    None,
    10_000,
    64 * 1024 * 1024,
)
def test_the_quick_path_does_what_the_general_rules_do(
    steps,
    subscription_backed,
    ttl_uncovered,
    share_public,
    pushed_bodies,
    principal,
    entries,
    max_bytes,
):
    clock = Clock()
    policy = Policy(
        subscription_backed=subscription_backed,
        uncovered="ttl" if ttl_uncovered else "read_before_use",
        share_public=share_public,
        pushed_bodies=pushed_bodies,
        stale_on_error=("u://a*",),
    )
    engines = []
    heard: list[list[Any]] = [[], []]  # each engine's `on_invalidation` events
    for quick in (True, False):
        engine = FreshnessEngine(
            store=MemoryStore(max_entries=entries, max_bytes=max_bytes),
            policy=policy,
            default_partition=principal,
            clock=clock,
            wall_clock=clock,
            on_invalidation=heard[0 if quick else 1].append,
        )
        engine.quick = quick
        engines.append(engine)
    quick_engine, general = engines
    assert quick_engine.quick and not general.quick
    tickets: list[tuple[ReadTicket, ReadTicket]] = []
    made: dict[str, ReadReply] = {}
    for engine in engines:
        # Most steps start from a live stream covering some URIs (what re-reads follow).
        engine.select(URIS[:3])
        watched = frozenset({URIS[0], URIS[1], URIS[3]})
        engine.handle(ListenStarted("s1", watched, True))
        engine.handle(ListenAcknowledged("s1", watched, True))
    sub = 1
    for op in steps:
        answers: list[Any] = []
        for engine in engines:
            match op:
                case ("send", uri, partition):
                    answers.append(engine.begin_read(uri, partition))
                case ("answer", index, how, ttl_ms, shape):
                    if not tickets:
                        continue
                    pair = tickets[index % len(tickets)]
                    ticket = pair[engines.index(engine)]
                    reply = reply_for(ticket.uri, how, ttl_ms, shape, made)
                    answers.append(result_of(engine.finish_read(ticket, reply)))
                case ("reread", uri, partition, how, ttl_ms, shape):
                    ticket = engine.begin_read(uri, partition)
                    reply = reply_for(uri, how, ttl_ms, shape, made)
                    answers.append(result_of(engine.finish_read(ticket, reply)))
                case ("notify", uri, envelope):
                    sid = {"trusted": f"s{sub}", "unknown": "nobody", "none": None}.get(
                        envelope, f"s{sub}"
                    )
                    body = (ResourceContents(uri, text="pushed"),) if envelope == "body" else None
                    answers.append(engine.handle(ResourceUpdated(uri, sid, body)))
                case ("listen", uris):
                    answers.append(
                        engine.handle(ListenStarted(f"s{sub + 1}", frozenset(uris), True))
                    )
                case ("ack", uris):
                    answers.append(
                        engine.handle(ListenAcknowledged(f"s{sub}", frozenset(uris), True))
                    )
                case ("lose",):
                    answers.append(engine.handle(StreamLost(f"s{sub}")))
                case ("missed",):
                    answers.append(engine.handle(ChangesMissed()))
                case ("unusable",):
                    answers.append(engine.server_unusable("gone"))
                case ("tick", seconds):
                    if engine is general:
                        clock.now += seconds
                case ("select", uris):
                    answers.append(engine.select(uris))
        match op:
            case ("send", *_):
                tickets.append((answers[0], answers[1]))
                answers = [(t.uri, t.partition, t.generation) for t in answers]
            case ("answer", index, *_) if tickets:
                tickets.pop(index % len(tickets))
            case ("listen", _):
                sub += 1
        if answers:
            assert answers[0] == answers[1], op
        assert held(quick_engine, heard[0]) == held(general, heard[1]), op


def test_the_quick_path_is_taken_for_a_plain_reread() -> None:
    """The comparison above compares something: a plain re-read takes the quick path
    (it builds both results in one call), and a quick-less engine does not."""
    import freshcache._core._rereads as engine_module

    calls: list[str] = []
    quick_results = engine_module.fresh_results

    def counting(*args: Any) -> Any:
        calls.append("quick")
        return quick_results(*args)

    engine_module.fresh_results = counting  # type: ignore[assignment]
    try:
        for quick in (True, False):
            engine = FreshnessEngine(store=MemoryStore())
            engine.quick = quick
            engine.select(["u://a"])
            engine.handle(ListenStarted("s1", frozenset({"u://a"}), False))
            [read] = engine.handle(ListenAcknowledged("s1", frozenset({"u://a"}), False))
            ticket = engine.begin_read("u://a", None)
            reply = ReadReply((ResourceContents("u://a", text="x"),), ttl_ms=1000)
            result = engine.finish_read(ticket, reply)
            assert result is not None and result.state == "fresh" and result.server_read
            assert engine.lookup("u://a", None) is not None
            assert engine.handle(ResourceUpdated("u://a", "s1")) == [
                read.__class__("u://a", None, "resources/updated")
            ]  # type: ignore[call-arg]
            assert engine.lookup("u://a", None) is None
    finally:
        engine_module.fresh_results = quick_results  # type: ignore[assignment]
    assert calls == ["quick"]


def test_the_ttl_ms_memo_stays_bounded() -> None:
    """Many ``ttlMs`` map to one window (here: all over `Policy.max_ttl`), so the quick
    path's ``ttlMs`` -> window memo is bounded on its own, not only with the windows
    (invariant 10; it grew by a key per reply before)."""
    engine = FreshnessEngine(store=MemoryStore(), policy=Policy(max_ttl=600.0))
    for i in range(5_000):
        ticket = engine.begin_read("u://a", None)
        # a server whose ttlMs is the time left in its own hour: over max_ttl
        reply = ReadReply((ResourceContents("u://a", text="x"),), ttl_ms=3_600_000 - i)
        assert engine.finish_read(ticket, reply) is not None
    assert len(engine.copies.windows) == 1
    assert len(engine.copies.ms_windows) <= _WINDOWS + 1
