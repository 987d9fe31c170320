"""Property test: one engine, random mixes of resource and catalog events (issue 35).

Hypothesis drives one `FreshnessEngine` with resource reads sent and answered out of
order, catalog walks whose pages are sent and answered out of order (a walk of two
pages, the first page's ``ttlMs`` drawn), changes, notifications of both kinds,
listens, acknowledgments, stream losses, denials, a cursor that never ends, and clock
steps. After every step the promise is checked for both, against a model kept here:

- resource text and catalog items handed out (a read's answer, a settled walk) or
  offered by a lookup come only from a request sent after the latest change heard of
  (invariant 1);
- a catalog handed out or offered as fresh is inside the window of every page it holds
  (invariant 14);
- a principal whose own walk was refused gets no catalog until its own walk succeeds,
  not the shared public one either;
- a walk never takes more than ``Policy.max_list_pages`` pages, however long the cursor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from freshcache import Policy
from freshcache._core import (
    FRESH,
    Catalog,
    CatalogListChanged,
    CatalogWalk,
    FreshnessEngine,
    ListenAcknowledged,
    ListenStarted,
    ListReply,
    ListTicket,
    ReadReply,
    RequestFailed,
    ResourceContents,
    ResourceUpdated,
    StreamLost,
)
from freshcache._middleware._store import MemoryStore

URIS = ("u://a", "u://b")
PARTITIONS = (None, "alice", "bob")
MAX_PAGES = 3


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Walking:
    """A catalog walk in flight: its walk and the page request out, if any."""

    done: CatalogWalk
    ticket: ListTicket | None
    sent_at: int
    version: int
    pages: int = 0


@dataclass
class Model:
    step: int = 0
    version: dict[str, int] = field(default_factory=lambda: {**dict.fromkeys(URIS, 1), "tools": 1})
    invalidated_at: dict[str, int] = field(
        default_factory=lambda: {**dict.fromkeys(URIS, -1), "tools": -1}
    )
    reads: list[tuple[Any, str, int, int, str | None]] = field(default_factory=list)
    walks: list[Walking] = field(default_factory=list)
    pages: dict[int, tuple[float, float]] = field(default_factory=dict)
    """Per catalog page (by the step its request was sent at): when it landed, its ttl."""
    sub: int = 0
    started: bool = False
    acked: bool = False
    covers_tools: bool = False
    refusing: set[str | None] = field(default_factory=set)
    """Partitions the server refuses to list for now."""
    denied: set[str | None] = field(default_factory=set)
    """Partitions whose latest settled walk was refused."""
    endless: bool = False


ops = st.one_of(
    st.tuples(st.just("read"), st.sampled_from(URIS), st.sampled_from(PARTITIONS)),
    st.tuples(st.just("answer"), st.integers(0, 3), st.sampled_from(["ok", "ok", "denied"])),
    st.tuples(st.just("change"), st.sampled_from([*URIS, "tools"])),
    st.tuples(st.just("notify"), st.sampled_from([*URIS, "tools"])),
    *[st.tuples(st.just("walk"), st.sampled_from(PARTITIONS), st.just(0))] * 2,
    *[st.tuples(st.just("page"), st.integers(0, 3), st.sampled_from([0, 400, 60_000]))] * 4,
    st.tuples(
        st.just("listen"),
    ),
    st.tuples(st.just("ack"), st.booleans()),
    st.tuples(
        st.just("lose"),
    ),
    st.tuples(st.just("refuse"), st.sampled_from(PARTITIONS)),
    st.tuples(
        st.just("endless"),
    ),
    *[st.tuples(st.just("tick"), st.sampled_from([0.2, 0.5, 5.0, 61.0]))] * 2,
)


def sent_of(item: Any) -> int:
    return int(str(item["name"]).rsplit("sent", 1)[1])


def check_catalog(catalog: Catalog | None, model: Model, now: float, where: str) -> None:
    if catalog is None or catalog.state != FRESH:
        return
    for item in catalog.items:
        sent = sent_of(item)
        # Invariant 1: items only from a page sent after the latest change heard of.
        assert sent > model.invalidated_at["tools"], (where, item, model.invalidated_at)
        landed, ttl = model.pages[sent]
        # Invariant 14: fresh only inside the window of every page it holds.
        assert ttl == 0 or now < landed + ttl, (where, item, landed, ttl, now)


def check(engine: FreshnessEngine, model: Model, now: float) -> None:
    for partition in PARTITIONS:
        hit = engine.catalog_lookup("tools", partition)
        check_catalog(hit, model, now, "lookup")
        check_catalog(engine.catalog_status("tools", partition), model, now, "status")
        if partition in model.denied:
            assert hit is None, ("a refused principal was offered a catalog", partition)
        for uri in URIS:
            result = engine.lookup(uri, partition)
            if result is not None and result.text is not None:
                sent = int(result.text.rsplit("sent", 1)[1])
                assert sent > model.invalidated_at[uri], (uri, result.text)


def settle_or_ask(engine: FreshnessEngine, model: Model, walking: Walking) -> None:
    """Ask the walk for its next page; a walk that is over is settled and checked."""
    walk = walking.done.walk
    ticket = walk.next_page()
    if ticket is not None:
        walking.ticket, walking.sent_at = ticket, model.step
        walking.version = model.version["tools"]
        walking.pages += 1
        assert walking.pages <= MAX_PAGES + 1, "a walk went past Policy.max_list_pages"
        return
    model.walks.remove(walking)
    catalog = engine.settle_catalog(walking.done)
    check_catalog(catalog, model, engine.clock(), "settled")
    partition = walking.done.partition
    if catalog.state == "denied":
        model.denied.add(partition)
    elif catalog.state == FRESH:
        model.denied.discard(partition)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, min_size=1, max_size=40), st.booleans(), st.booleans())
@example([("walk", None, 0), ("page", 0, 400), ("tick", 0.5), ("page", 0, 0)], False, False)
@example([("endless",), ("walk", "bob", 0), *[("page", 0, 60_000)] * 6], True, True)
def test_resources_and_catalogs_keep_one_promise(steps, share_public, ttl_uncovered):
    clock = Clock()
    engine = FreshnessEngine(
        store=MemoryStore(),
        policy=Policy(
            share_public=share_public,
            uncovered="ttl" if ttl_uncovered else "read_before_use",
            max_list_pages=MAX_PAGES,
        ),
        clock=clock,
        wall_clock=clock,
    )
    model = Model()
    engine.select(URIS[:1])
    for op in steps:
        model.step += 1
        match op:
            case ("read", uri, partition):
                ticket = engine.begin_read(uri, partition)
                model.reads.append((ticket, uri, model.version[uri], model.step, partition))
            case ("answer", index, how):
                if not model.reads:
                    continue
                ticket, uri, version, sent, partition = model.reads.pop(index % len(model.reads))
                reply: ReadReply | RequestFailed = (
                    ReadReply(
                        (ResourceContents(uri, text=f"{uri}|v{version}|sent{sent}"),),
                        ttl_ms=10_000,
                        cache_scope="private",
                    )
                    if how == "ok"
                    else RequestFailed("denied")
                )
                result = engine.finish_read(ticket, reply)
                if result is not None and result.text is not None:
                    assert int(result.text.rsplit("sent", 1)[1]) > model.invalidated_at[uri]
            case ("change", what):
                model.version[what] += 1
            case ("notify", what):
                sid = f"s{model.sub}"
                if what == "tools":
                    engine.handle(CatalogListChanged("tools", sid))
                else:
                    engine.handle(ResourceUpdated(what, sid))
                model.invalidated_at[what] = model.step
            case ("walk", partition, _):
                done = engine.begin_catalog("tools", partition)
                walking = Walking(done, None, model.step, model.version["tools"])
                model.walks.append(walking)
                settle_or_ask(engine, model, walking)
            case ("page", index, ttl_ms):
                if not model.walks:
                    continue
                walking = model.walks[index % len(model.walks)]
                ticket = walking.ticket
                assert ticket is not None
                partition = ticket.partition
                if partition in model.refusing:
                    page: ListReply | RequestFailed = RequestFailed("denied", "not you")
                else:
                    sent = walking.sent_at
                    first = ticket.cursor is None
                    more = first or model.endless
                    name = f"tool-v{walking.version}-sent{sent}"
                    page = ListReply(
                        (),
                        next_cursor=f"c{sent}" if more else None,
                        ttl_ms=ttl_ms if first else 60_000,
                        cache_scope="public",
                        items=({"name": name},),
                    )
                    model.pages[sent] = (clock.now, engine.policy.ttl_seconds(page.ttl_ms))
                walking.done.walk.landed(ticket, page)
                settle_or_ask(engine, model, walking)
            case ("listen",):
                model.sub += 1
                model.started, model.acked = True, False
                engine.handle(ListenStarted(f"s{model.sub}", frozenset(URIS[:1]), True))
            case ("ack", tools):
                kinds = frozenset({"tools"}) if tools else frozenset()
                engine.handle(ListenAcknowledged(f"s{model.sub}", frozenset(URIS[:1]), True, kinds))
                if model.started and not model.acked:
                    model.acked, model.covers_tools = True, tools
            case ("lose",):
                engine.handle(StreamLost(f"s{model.sub}"))
                if model.acked:
                    # Invariant 4: what the stream covered may have changed unseen.
                    model.invalidated_at[URIS[0]] = model.step
                    if model.covers_tools:
                        model.invalidated_at["tools"] = model.step
                model.started = model.acked = model.covers_tools = False
            case ("refuse", partition):
                model.refusing ^= {partition}
            case ("endless",):
                model.endless = not model.endless
            case ("tick", seconds):
                clock.now += seconds
        check(engine, model, clock.now)
