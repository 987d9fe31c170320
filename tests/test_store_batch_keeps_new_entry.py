"""A batching store (`_BATCH_FROM` entries or more) evicts only entries older than the
one just put: a reply that fits the bounds is kept, even when the batch's target
(1/64 under the bound) would have reached it."""

from __future__ import annotations

from freshcache._middleware._store import _BATCH_FROM, MemoryStore
from tests.test_engine import U, V, make, read


class Sized:
    def __init__(self, size: int) -> None:
        self.size = size


def test_a_reply_that_fits_the_byte_bound_is_kept() -> None:
    store = MemoryStore(max_entries=10_000, max_bytes=64_000)
    engine, _ = make(store=store)
    read(engine, "small", uri=V)
    big = "x" * 63_500  # its entry is ~63.9k: over the batch target, under the bound
    assert read(engine, big).state == "fresh"
    assert store.bytes_held <= store.max_bytes
    assert engine.lookup(U, None) is not None, "an entry that fits was evicted at once"
    assert engine.lookup(V, None) is None  # the older one made room


def test_a_batch_stops_short_of_the_entry_just_put() -> None:
    evicted: list[object] = []
    store = MemoryStore(max_entries=_BATCH_FROM, max_bytes=1_000)
    store.set_eviction_listener(evicted.append)
    for i in range(4):
        store.put_object(f"old{i}", Sized(10))
    store.put_object("new", Sized(995))  # 1,035 > 1,000: the batch aims at 985
    assert evicted == ["old0", "old1", "old2", "old3"]
    assert store.get_object("new") is not None
    assert store.bytes_held == 995


def test_a_batch_by_entry_count_keeps_the_entry_just_put() -> None:
    evicted: list[object] = []
    store = MemoryStore(max_entries=_BATCH_FROM, max_bytes=1 << 20)
    store.set_eviction_listener(evicted.append)
    for i in range(_BATCH_FROM + 1):
        store.put_object(i, Sized(1))
    assert _BATCH_FROM in store._entries  # the last one put is kept
    assert evicted == [0, 1]  # 1/64 under the bound: the two oldest
    assert store.entry_count == _BATCH_FROM - 1


def test_an_entry_larger_than_the_store_is_not_kept() -> None:
    evicted: list[object] = []
    store = MemoryStore(max_entries=_BATCH_FROM, max_bytes=100)
    store.set_eviction_listener(evicted.append)
    store.put_object("a", Sized(50))
    store.put_object("huge", Sized(101))
    assert (evicted, store.entry_count, store.bytes_held) == (["huge"], 1, 50)
