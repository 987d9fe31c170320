"""The default store: bounded by entries and by bytes; evictions are reported."""

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


def test_the_byte_bound_evicts_until_the_new_entry_fits():
    store = MemoryStore(max_entries=100, max_bytes=1000)
    evicted = []
    store.set_eviction_listener(evicted.append)
    for n in range(3):
        store.put(key(n), entry(400))
    assert evicted == [key(0)]
    assert store.bytes_held == 800


def test_an_entry_larger_than_the_store_is_not_kept_and_counts_as_evicted():
    store = MemoryStore(max_entries=10, max_bytes=100)
    evicted = []
    store.set_eviction_listener(evicted.append)
    store.put(key(1), entry(50))
    store.put(key(1), entry(500))
    assert store.get(key(1)) is None
    assert evicted == [key(1)]


def test_discard_removes_without_reporting_an_eviction():
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
