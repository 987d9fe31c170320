"""The engine on replies without caching hints (MCP 2025-11-25: no ``ttlMs`` and no
``cacheScope``): what counts as fresh, for how long, for whom (DESIGN §6)."""

from __future__ import annotations

import pytest

from freshcache import ConfigurationError, Policy
from freshcache._core import (
    FreshnessEngine,
    ListenAcknowledged,
    ListenStarted,
    ReadReply,
    ResourceContents,
    ResourceUpdated,
    StreamLost,
)
from freshcache._middleware._store import MemoryStore

U = "guide://shipping/approval"
V = "guide://shipping/rates"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(policy: Policy | None = None) -> tuple[FreshnessEngine, Clock]:
    clock = Clock()
    engine = FreshnessEngine(
        store=MemoryStore(), policy=policy, clock=clock, wall_clock=lambda: 1e9
    )
    return engine, clock


def read(engine: FreshnessEngine, text: str, uri: str = U, partition: str | None = None):
    ticket = engine.begin_read(uri, partition)
    reply = ReadReply((ResourceContents(uri, text=text),), hintless=True)
    return engine.finish_read(ticket, reply)


def covered(engine: FreshnessEngine, uris=(U,), sid: str = "session-1") -> None:
    engine.handle(ListenStarted(sid, frozenset(uris), True))
    engine.handle(ListenAcknowledged(sid, frozenset(uris), True))


def test_a_selected_uri_a_live_subscribe_covers_stays_fresh_until_notified():
    engine, clock = make()
    engine.select([U])
    covered(engine)
    assert read(engine, "v1").state == "fresh"
    clock.now += 10**6
    hit = engine.lookup(U, None)
    assert hit is not None and hit.text == "v1" and hit.server_read is False
    engine.handle(ResourceUpdated(U, "session-1"))
    assert engine.lookup(U, None) is None
    assert engine.status(U).reason == "invalidated"


def test_coverage_ends_with_the_channel_and_the_copy_is_no_longer_served():
    engine, _ = make()
    engine.select([U])
    covered(engine)
    read(engine, "v1")
    engine.handle(StreamLost("session-1", "the GET stream broke"))
    assert engine.lookup(U, None) is None
    assert engine.status(U).reason == "stream_lost"


def test_a_selected_uri_no_subscribe_covers_is_read_before_each_use():
    engine, _ = make()
    engine.select([U])
    engine.handle(ListenStarted("session-1", frozenset({U}), True))
    engine.handle(ListenAcknowledged("session-1", frozenset(), True))  # subscribe refused
    assert read(engine, "v1").state == "fresh"
    assert engine.lookup(U, None) is None
    assert engine.status(U).reason == "uncovered"


def test_an_unselected_read_counts_as_ttl_zero():
    engine, _ = make()
    assert read(engine, "v1", uri=V).state == "fresh"
    assert engine.lookup(V, None) is None
    assert engine.status(V).reason == "expired"


def test_hintless_results_are_private_to_the_principal_that_read_them():
    engine, _ = make(Policy(share_public=True, hintless_ttl=60.0))
    read(engine, "alice's", uri=V, partition="alice")
    assert engine.lookup(V, "alice") is not None
    assert engine.lookup(V, "bob") is None


def test_the_opt_in_default_ttl_applies_to_unselected_reads_only():
    engine, clock = make(Policy(hintless_ttl=30.0))
    engine.select([U])
    read(engine, "v1", uri=V)
    read(engine, "u1", uri=U)  # selected, uncovered: still read before use
    clock.now += 29.9
    assert engine.lookup(V, None) is not None
    assert engine.lookup(U, None) is None
    clock.now += 0.1
    assert engine.lookup(V, None) is None


def test_the_opt_in_default_ttl_is_still_cut_short_by_a_notification():
    engine, _ = make(Policy(hintless_ttl=300.0))
    read(engine, "v1", uri=V)
    engine.handle(ResourceUpdated(V, None))
    assert engine.lookup(V, None) is None


@pytest.mark.parametrize("value", [-1, "10", float("nan")], ids=["negative", "string", "nan"])
def test_a_bad_default_ttl_is_refused_with_its_value(value):
    with pytest.raises(ConfigurationError, match="hintless_ttl"):
        Policy(hintless_ttl=value)
