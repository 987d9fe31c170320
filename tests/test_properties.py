"""Property tests: random interleavings against the sans-IO engine (DESIGN §2).

Hypothesis draws sequences of notifications, acknowledgments, stream losses, reads
sent and answered out of order, failures, local copies and clock steps. After every
step the invariants 1, 2, 6 and 9 are checked against a model kept here; invariant
8 (single flight) is checked on the middleware with concurrent readers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from freshcache import FreshCache, Policy
from freshcache._core import (
    FreshnessEngine,
    ListenAcknowledged,
    ListenStarted,
    ReadReply,
    ReadResult,
    RequestFailed,
    ResourceContents,
    ResourceUpdated,
    StreamClosed,
    StreamLost,
    UntrustedMessage,
)
from freshcache._middleware._store import MemoryStore
from freshcache.acceptance import InMemorySource, ReferenceServer

URIS = ("u://a", "u://b", "u://c")
PARTITIONS = (None, "alice", "bob")


@dataclass
class Model:
    """What the spec says happened, independent of the engine's book-keeping."""

    step: int = 0
    version: dict[str, int] = field(default_factory=lambda: dict.fromkeys(URIS, 1))
    invalidated_at: dict[str, int] = field(default_factory=lambda: dict.fromkeys(URIS, -1))
    sub_id: int = 0
    started: bool = False
    requested: frozenset[str] = frozenset()
    acked: bool = False
    covered: frozenset[str] = frozenset()
    in_flight: list[tuple[object, str, int, int, str | None]] = field(default_factory=list)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def reply_text(uri: str, version: int, sent_at: int, partition: str | None) -> str:
    return f"{uri}|v{version}|sent{sent_at}|{partition}"


def parse(result: ReadResult) -> tuple[int, str]:
    assert result.text is not None
    _, _, sent, partition = result.text.split("|")
    return int(sent.removeprefix("sent")), partition


ops = st.one_of(
    st.tuples(st.just("send"), st.sampled_from(URIS), st.sampled_from(PARTITIONS)),
    st.tuples(
        st.just("answer"),
        st.integers(0, 5),
        st.sampled_from(["ok", "ok", "timeout", "denied", "local"]),
    ),
    st.tuples(st.just("change"), st.sampled_from(URIS)),
    st.tuples(
        st.just("notify"), st.sampled_from(URIS), st.sampled_from(["trusted", "unknown", "none"])
    ),
    st.tuples(st.just("listen"), st.sets(st.sampled_from(URIS))),
    st.tuples(st.just("ack"), st.sets(st.sampled_from(URIS))),
    st.tuples(st.just("lose"), st.sampled_from(["lost", "closed"])),
    st.tuples(st.just("garbage")),
    st.tuples(st.just("tick"), st.sampled_from([0.5, 5.0, 30.0])),
    st.tuples(st.just("select"), st.sets(st.sampled_from(URIS))),
)


def lookups(engine: FreshnessEngine) -> dict[tuple[str, str | None], ReadResult | None]:
    return {(u, p): engine.lookup(u, p) for u in URIS for p in PARTITIONS}


def check_invariants(engine: FreshnessEngine, model: Model) -> None:
    for (uri, partition), result in lookups(engine).items():
        for seen in (result, engine.status(uri, partition)):
            if seen is None or seen.text is None:
                continue
            sent_at, owner = parse(seen)
            # Invariant 1: text only from a read sent after the latest invalidation.
            assert sent_at > model.invalidated_at[uri], (uri, seen.text, model.invalidated_at[uri])
            # Invariant 6: private entries never cross principals.
            assert owner == str(partition), (uri, partition, seen.text)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, min_size=1, max_size=40), st.booleans(), st.booleans())
def test_random_interleavings_keep_the_invariants(steps, subscription_backed, ttl_uncovered):
    clock = Clock()
    engine = FreshnessEngine(
        store=MemoryStore(),
        policy=Policy(
            subscription_backed=subscription_backed,
            uncovered="ttl" if ttl_uncovered else "read_before_use",
        ),
        clock=clock,
        wall_clock=clock,
    )
    model = Model()
    engine.select(URIS[:2])
    for op in steps:
        model.step += 1
        before = lookups(engine)
        match op:
            case ("send", uri, partition):
                ticket = engine.begin_read(uri, partition)
                # The server decides the answer when the request arrives.
                model.in_flight.append((ticket, uri, model.version[uri], model.step, partition))
            case ("answer", index, how):
                if not model.in_flight:
                    continue
                ticket, uri, version, sent_at, partition = model.in_flight.pop(
                    index % len(model.in_flight)
                )
                text = reply_text(uri, version, sent_at, partition)
                contents = (ResourceContents(uri, text=text),)
                reply: ReadReply | RequestFailed
                if how == "ok":
                    reply = ReadReply(contents, ttl_ms=10_000, cache_scope="private")
                elif how == "local":
                    reply = ReadReply(contents, ttl_ms=10_000, from_server=False)
                else:
                    reply = RequestFailed(how)  # type: ignore[arg-type]
                result = engine.finish_read(ticket, reply)  # type: ignore[arg-type]
                if result is not None and result.text is not None:
                    # What the caller is handed obeys invariant 1 too.
                    assert parse(result)[0] > model.invalidated_at[uri]
                    assert how == "ok"
            case ("change", uri):
                model.version[uri] += 1
            case ("notify", uri, envelope):
                sid = {"trusted": f"s{model.sub_id}", "unknown": "nobody", "none": None}[envelope]
                engine.handle(ResourceUpdated(uri, sid))
                model.invalidated_at[uri] = model.step
                # Invariant 2: other URIs are untouched.
                after = lookups(engine)
                for (other, partition), result in before.items():
                    if other != uri:
                        assert after[(other, partition)] == result
            case ("listen", uris):
                model.sub_id += 1
                model.started = True
                model.requested = frozenset(uris)
                model.acked = False
                engine.handle(ListenStarted(f"s{model.sub_id}", frozenset(uris), True))
            case ("ack", uris):
                engine.handle(ListenAcknowledged(f"s{model.sub_id}", frozenset(uris), True))
                if model.started and not model.acked:
                    model.acked = True
                    # An acknowledgment cannot cover what the listen did not ask for.
                    model.covered = frozenset(uris) & model.requested
            case ("lose", how):
                sid = f"s{model.sub_id}"
                if how == "lost":
                    engine.handle(StreamLost(sid))
                    if model.acked:
                        for uri in model.covered:
                            model.invalidated_at[uri] = model.step
                else:
                    engine.handle(StreamClosed(sid))
                model.started = False
                model.acked = False
                model.covered = frozenset()
            case ("garbage",):
                engine.handle(UntrustedMessage("garbage", "s0"))
                # Invariant 9: nothing became fresher.
                after = lookups(engine)
                for key, result in after.items():
                    if before[key] is None:
                        assert result is None
            case ("tick", seconds):
                clock.now += seconds
            case ("select", uris):
                engine.select(uris)
        check_invariants(engine, model)


@pytest.mark.anyio
@settings(max_examples=60, deadline=None)
@given(readers=st.integers(2, 25), notify_after=st.integers(0, 25))
async def test_concurrent_readers_share_one_server_read_that_obeys_invariant_1(
    readers, notify_after
):
    """Invariant 8: N concurrent reads of one URI cost one server read (or two when a
    notification overtakes the first), and every waiter gets the post-notification text."""
    server = ReferenceServer()
    uri = "guide://x"
    server.set(uri, "v1", ttl_ms=0)
    async with FreshCache(InMemorySource(server), listen=False, read_timeout=5.0) as cache:
        server.hold_reads()
        results: list[ReadResult] = []

        async def reader() -> None:
            results.append(await cache.read(uri))

        async with anyio.create_task_group() as tg:
            for n in range(readers):
                tg.start_soon(reader)
                if n == notify_after:
                    await anyio.wait_all_tasks_blocked()
                    server.set(uri, "v2")
                    cache.engine.handle(ResourceUpdated(uri, None))
            await anyio.wait_all_tasks_blocked()
            server.release_reads()
        assert len(results) == readers
        notified = notify_after < readers
        assert all(r.text == ("v2" if notified else "v1") for r in results), [
            r.text for r in results
        ]
        assert server.reads == (2 if notified else 1)
