"""What only the default store promises: LRU order within its bounds, its argument
checks and its repr. The contract every store keeps is `tests/test_store_contract.py`."""

from __future__ import annotations

import pytest

from freshcache import ConfigurationError, MemoryStore
from freshcache._core import Entry, ReadResult


def entry(size: int) -> Entry:
    return Entry(ReadResult("fresh", "x://"), 0, 0.0, 1.0, "private", size)


def key(n: int):
    return ("server", "resources/read", f"x://{n}", None)


def test_the_entry_bound_evicts_the_least_recently_used():
    store = MemoryStore(max_entries=2, max_bytes=10**6)
    evicted = []
    store.set_eviction_listener(evicted.append)
    store.put(key(1), entry(10))
    store.put(key(2), entry(10))
    assert store.get(key(1)) is not None  # 1 is now more recent than 2
    store.put(key(3), entry(10))
    assert evicted == [key(2)]
    assert store.entry_count == 2


def test_a_large_store_evicts_the_least_recently_used_in_one_batch_below_its_bound():
    store = MemoryStore(max_entries=640, max_bytes=10**9)
    evicted = []
    store.set_eviction_listener(evicted.append)
    for n in range(640):
        store.put(key(n), entry(10))
    for n in range(0, 20, 2):
        assert store.get(key(n)) is not None  # used again: now the most recent
    store.discard(key(1))
    assert evicted == [] and store.entry_count == 639
    store.put(key(640), entry(10))
    store.put(key(641), entry(10))  # passes the bound: down to 640 - 640 // 64 at once
    least_recent = [key(n) for n in range(1, 20, 2) if n != 1] + [key(n) for n in range(20, 652)]
    assert evicted == least_recent[:11]
    assert (store.entry_count, store.bytes_held) == (630, 6300)
    store.put(key(642), entry(10))
    assert len(evicted) == 11  # within its bound again: nothing more


def test_a_large_store_evicts_a_batch_below_its_byte_bound_too():
    store = MemoryStore(max_entries=1000, max_bytes=6400)
    evicted = []
    store.set_eviction_listener(evicted.append)
    for n in range(641):
        store.put(key(n), entry(10))
    assert evicted == [key(n) for n in range(11)]
    assert store.bytes_held == 6300


def test_the_repr_shows_the_counts():
    store = MemoryStore()
    evicted = []
    store.set_eviction_listener(evicted.append)
    store.put(key(1), entry(1))
    store.discard(key(1))
    store.discard(key(2))
    assert (store.get(key(1)), evicted) == (None, [])
    assert "entries=0" in repr(store)


@pytest.mark.parametrize("kwargs", [{"max_entries": 0}, {"max_bytes": 0}], ids=["entries", "bytes"])
def test_bounds_must_be_positive(kwargs):
    with pytest.raises(ConfigurationError):
        MemoryStore(**kwargs)
