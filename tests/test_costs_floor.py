"""What this round's cost cuts must not change (issue 25): a version digested on first
use is the version, frozen records filled slot by slot stay frozen dataclasses, a
notification finds subscribed parents of every length, and the default store keeps
its bounds and LRU order on one ordered table."""

from __future__ import annotations

import dataclasses
import inspect
import pickle

import pytest

from freshcache import MemoryStore
from freshcache._core import (
    Entry,
    FreshnessEngine,
    ListenAcknowledged,
    ListenStarted,
    ReadReply,
    ReadResult,
    ResourceContents,
    ResourceUpdated,
    version_of,
)
from freshcache._core._model import fresh_result, served_copy
from freshcache._core._slots import filled_by_slots


def stored(engine: FreshnessEngine, uri: str, text: str) -> ReadResult:
    ticket = engine.begin_read(uri, None)
    result = engine.finish_read(
        ticket, ReadReply((ResourceContents(uri, text=text),), ttl_ms=60_000)
    )
    assert result is not None and result.state == "fresh"
    return result


def test_a_version_left_to_first_use_is_the_digest_of_the_contents() -> None:
    engine = FreshnessEngine(store=MemoryStore())
    handed = stored(engine, "x://a", "v1")
    hit = engine.lookup("x://a", None)
    assert hit is not None and hit is not handed
    contents = (ResourceContents("x://a", text="v1"),)
    assert (handed.version, hit.version) == (version_of(contents), version_of(contents))
    other = stored(FreshnessEngine(store=MemoryStore()), "x://a", "v2")
    assert other.version != hit.version


def test_a_result_with_its_version_not_yet_asked_compares_pickles_and_copies_whole() -> None:
    engine = FreshnessEngine(store=MemoryStore())
    stored(engine, "x://a", "v1")
    hit = engine.lookup("x://a", None)
    assert hit is not None
    eager = dataclasses.replace(hit)  # every field read, the version digested
    fresh = FreshnessEngine(store=MemoryStore())
    stored(fresh, "x://a", "v1")
    lazy = fresh.lookup("x://a", None)
    assert lazy is not None
    assert pickle.loads(pickle.dumps(lazy)).version == eager.version  # as a shared store does
    assert lazy == dataclasses.replace(eager, fetched_at=lazy.fetched_at)
    assert hash(lazy) == hash(dataclasses.replace(eager, fetched_at=lazy.fetched_at))
    assert ReadResult("fresh", "x://a").version is None  # built plainly: no digest made up


def test_results_filled_slot_by_slot_set_every_field() -> None:
    """A field added to `ReadResult` must be filled by the slot fillers too (an unset
    slot raises on first read)."""
    contents = (ResourceContents("x://a", text="v1"),)
    built = fresh_result("x://a", contents, fetched_at=1.0, server_read=True)
    for result in (built, served_copy(built, server_read=False)):
        values = {f.name: getattr(result, f.name) for f in dataclasses.fields(ReadResult)}
        assert values == {**dataclasses.asdict(ReadResult("fresh", "x://a")), **values}
        assert values["remediation"] is None and values["text"] == "v1"


def test_records_filled_slot_by_slot_stay_frozen_with_the_same_signature() -> None:
    entry = Entry(ReadResult("fresh", "x://a"), 3, 1.0, 2.0, "private", 10)
    assert entry.hintless is False  # the default
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.generation = 4  # type: ignore[misc]
    assert list(inspect.signature(Entry).parameters) == [f.name for f in dataclasses.fields(Entry)]
    with pytest.raises(TypeError):
        Entry(ReadResult("fresh", "x://a"), 3)  # type: ignore[call-arg]


def test_filled_by_slots_refuses_what_it_would_skip() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class WithFactory:
        items: list[int] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=True)
    class WithoutSlots:
        n: int

    for cls in (WithFactory, WithoutSlots):
        with pytest.raises(TypeError):
            filled_by_slots(cls)


def test_filled_by_slots_runs_post_init_after_the_fields() -> None:
    @filled_by_slots
    @dataclasses.dataclass(frozen=True, slots=True)
    class Doubled:
        n: int
        twice: int = 0

        def __post_init__(self) -> None:
            object.__setattr__(self, "twice", 2 * self.n)

    assert Doubled(4).twice == 8
    contents = ResourceContents("x://a", text="t", annotations={"audience": ["user"]})
    with pytest.raises(TypeError):  # frozen deeply, as invariant 13 needs
        contents.annotations["audience"] = []  # type: ignore[index]


@pytest.mark.parametrize(
    ("subscribed", "notified", "invalidated"),
    [
        (["x://a/", "x://a/b/c/d"], "x://a/b/c", ["x://a/"]),
        (["x://a/b", "x://a/b/c/d"], "x://a/b/c/d/e", ["x://a/b", "x://a/b/c/d"]),
        (["x://a/b#s", "x://a/b"], "x://a/b?q", ["x://a/b"]),
        (["x://a/bc", "x://a/"], "x://a/b/c", ["x://a/"]),
    ],
    ids=["trailing-slash", "two-lengths", "query", "no-sibling-prefix"],
)
def test_a_notification_finds_subscribed_parents_of_every_length(
    subscribed: list[str], notified: str, invalidated: list[str]
) -> None:
    engine = FreshnessEngine(store=MemoryStore())
    engine.select(subscribed)
    engine.handle(ListenStarted("s1", frozenset(subscribed), False))
    engine.handle(ListenAcknowledged("s1", frozenset(subscribed), False))
    for uri in subscribed:
        stored(engine, uri, "v1")
    engine.handle(ResourceUpdated(notified, "s1"))
    gone = [uri for uri in subscribed if engine.lookup(uri, None) is None]
    assert sorted(gone) == sorted(invalidated)


def entry(size: int) -> Entry:
    return Entry(ReadResult("fresh", "x://"), 0, 0.0, 1.0, "private", size)


def key(n: int) -> tuple[str, str, str, None]:
    return ("server", "resources/read", f"x://{n}", None)


def test_the_default_store_evicts_in_use_order_under_the_byte_bound() -> None:
    store = MemoryStore(max_entries=100, max_bytes=30)
    evicted: list[object] = []
    store.set_eviction_listener(evicted.append)
    for n in (1, 2, 3):
        store.put(key(n), entry(10))
    assert store.get(key(1)) is not None  # 2 is now the least recently used
    store.put(key(2), entry(5))  # a replacement: the most recent now, 5 bytes less
    assert (evicted, store.bytes_held) == ([], 25)
    store.put(key(4), entry(10))  # 35 bytes: 3 (the least recent) goes
    assert (evicted, store.bytes_held, store.entry_count) == ([key(3)], 25, 3)
