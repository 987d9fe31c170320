"""The engine decides what a fleet may do with a catalog walk (issue 26: catalogs shared
through the fleet): which walk may be stored for the other workers, and whether a walk
found in the store may stand in for this worker's own. Sans-IO, a virtual clock."""

from __future__ import annotations

from freshcache import Policy
from freshcache._core import (
    CatalogListChanged,
    ListenAcknowledged,
    ListenStarted,
    RequestFailed,
    SharedWalk,
)
from freshcache._core._frozen import frozen
from tests.test_catalogs import covered, make, page

SHARED = Policy(share_public=True)
ITEMS = frozen(({"name": "search-v2"}, {"name": "help"}))


def shared_walk(engine, pages, kind="tools", partition=None):  # type: ignore[no-untyped-def]
    """Walk like the fleet's lock holder, and what the engine offers to store."""
    done = engine.begin_catalog(kind, partition)
    while (ticket := done.walk.next_page()) is not None:
        done.walk.landed(ticket, pages[ticket.cursor])
    catalog = engine.settle_catalog(done)
    return catalog, engine.catalog_to_share(done)


def test_a_complete_public_walk_from_the_server_is_offered_to_the_fleet():
    engine, _ = make(SHARED)
    covered(engine)
    catalog, share = shared_walk(
        engine,
        {
            None: page("a", cursor="c1", scope="public"),
            "c1": page("b", scope="public", ttl_ms=5_000),
        },
    )
    assert catalog.state == "fresh"
    assert share is not None
    assert [item["name"] for item in share.items] == ["a", "b"]
    assert 0 < share.ttl <= 5.0  # the minimum window over its pages


def test_a_private_page_a_cached_page_or_no_coverage_is_never_offered():
    engine, _ = make(SHARED)
    covered(engine)
    _, share = shared_walk(
        engine, {None: page("a", cursor="c1", scope="public"), "c1": page("b", scope="private")}
    )
    assert share is None  # any private page: the catalog is private
    engine, _ = make(SHARED)
    covered(engine)
    pages = {None: page("a", scope="public")}
    shared_walk(engine, pages)
    engine.invalidate_catalog("tools")  # the caller's word: walk again, its page cached
    # Heard alone: nothing is offered until the fleet was told (as `SharedCatalogs` does).
    assert engine.catalog_to_share(engine.begin_catalog("tools", None)) is None
    engine.catalog_published(
        "tools", engine.catalog_heard_alone(engine.begin_catalog("tools", None))
    )
    _, share = shared_walk(engine, pages)
    assert share is not None  # every page asked again: a page invalidated is not cached
    engine, _ = make(SHARED)  # uncovered: listed before each use, nothing shared
    _, share = shared_walk(engine, {None: page("a", scope="public")})
    assert share is None
    engine, _ = make()  # public catalogs not shared by the policy
    covered(engine)
    _, share = shared_walk(engine, {None: page("a", scope="public")})
    assert share is None


def test_a_walk_with_a_page_from_this_workers_cache_is_not_offered():
    engine, _ = make(SHARED)
    covered(engine)
    pages = {None: page("a", cursor="c1", scope="public"), "c1": page("b", scope="public")}
    shared_walk(engine, pages)
    # A second walk takes its pages from the cache (covered): it proves nothing about
    # the time after the fleet's fence, so it is not stored for the others.
    done = engine.begin_catalog("tools", None)
    assert done.walk.next_page() is None
    engine.settle_catalog(done)
    assert engine.catalog_to_share(done) is None


def test_a_walk_from_the_store_is_fresh_only_while_covered_and_current():
    engine, clock = make(SHARED)
    covered(engine)
    done = engine.begin_catalog("tools", None)  # this client's default partition
    adopted = engine.adopt_catalog(done, SharedWalk(ITEMS, 30.0))
    assert adopted is not None
    assert adopted.state == "fresh" and adopted.names == ("search-v2", "help")
    assert not adopted.server_read
    assert engine.catalog_lookup("tools", "bob") is not None  # the public catalog
    clock.now += 31
    assert engine.catalog_lookup("tools", "bob") is None  # its window has passed
    # A change heard after the walk began: the stored walk may predate it.
    done = engine.begin_catalog("tools", None)
    engine.handle(CatalogListChanged("tools", "s1"))
    assert engine.adopt_catalog(done, SharedWalk(ITEMS, 30.0)) is None
    # Uncovered: listed before each use, never taken from the store.
    engine.handle(ListenStarted("s2", frozenset(), True))
    engine.handle(ListenAcknowledged("s2", frozenset(), True, frozenset()))
    engine.cancel_subscription("s1")
    done = engine.begin_catalog("tools", None)
    assert not engine.catalog_shared(done)
    assert engine.adopt_catalog(done, SharedWalk(ITEMS, 30.0)) is None


def test_a_change_heard_alone_is_published_before_another_walk_stands_in():
    engine, _ = make(SHARED)
    covered(engine)
    engine.handle_hint(CatalogListChanged("tools", None))  # a hint on this worker's answer
    done = engine.begin_catalog("tools", None)
    assert not engine.catalog_shared(done)
    assert engine.adopt_catalog(done, SharedWalk(ITEMS, 30.0)) is None
    shared_walk(engine, {None: page("a", scope="public")})  # its own walk
    # The store may still hold a walk filled before the change this worker heard: its
    # own walks do not move the store's generation, nor does a change the channel
    # brings (it may have been published before the one heard here).
    assert not engine.catalog_shared(engine.begin_catalog("tools", None))
    engine.list_changed_elsewhere("tools")
    done = engine.begin_catalog("tools", None)
    assert not engine.catalog_shared(done)
    # The fleet published it (every walk stored before is fenced off): one may stand in.
    mark = engine.catalog_heard_alone(done)
    assert mark is not None
    engine.invalidate_catalog("tools")  # heard alone again before that publish landed
    engine.catalog_published("tools", mark)
    assert not engine.catalog_shared(engine.begin_catalog("tools", None))  # a later one
    done = engine.begin_catalog("tools", None)
    engine.catalog_published("tools", engine.catalog_heard_alone(done))
    assert engine.catalog_heard_alone(done) is None
    assert engine.catalog_shared(done)
    assert engine.adopt_catalog(done, SharedWalk(ITEMS, 30.0)) is not None
    engine.list_changed_elsewhere("resources")  # templates change with the resource list
    assert engine.catalog_status("resource_templates", None).state != "fresh"


def test_nothing_to_publish_where_no_walk_is_shared_anyway():
    engine, _ = make(SHARED)  # uncovered: every walk its own, nothing shared
    engine.invalidate_catalog("tools")
    assert engine.catalog_heard_alone(engine.begin_catalog("tools", None)) is None


def test_a_denied_partition_takes_no_walk_from_the_store():
    engine, _ = make(SHARED)
    covered(engine)
    shared_walk(engine, {None: RequestFailed("denied", "no")}, partition="bob")
    done = engine.begin_catalog("tools", "bob")
    assert not engine.catalog_shared(done)
    assert engine.adopt_catalog(done, SharedWalk(ITEMS, 30.0)) is None


def test_a_walk_stored_before_a_change_heard_here_is_never_adopted_after_its_own_walk():
    """Review: `settle` forgot a change heard alone after this worker's own walk, and a
    later walk took the store's walk filled before that change as fresh."""
    engine, clock = make(SHARED)
    covered(engine)
    old = frozen(({"name": "search-v1"},))  # the fleet's store: filled before the change
    first = engine.begin_catalog("tools", None)
    adopted = engine.adopt_catalog(first, SharedWalk(old, 60.0))
    assert adopted is not None and adopted.names == ("search-v1",)
    engine.handle_hint(CatalogListChanged("tools", None))  # heard on its own answer only
    mine, _ = shared_walk(engine, {None: page("search-v2", scope="public", ttl_ms=1_000)})
    assert mine.names == ("search-v2",)
    clock.now += 2  # its own 1 s window passed; the store's entry has ~58 s left
    done = engine.begin_catalog("tools", None)
    adopted = engine.adopt_catalog(done, SharedWalk(old, 58.0))
    assert adopted is None or adopted.names != ("search-v1",)
    engine.invalidate_catalog("tools")  # the caller's word: the same, heard alone
    shared_walk(engine, {None: page("search-v3", scope="public", ttl_ms=1_000)})
    clock.now += 2
    assert engine.adopt_catalog(engine.begin_catalog("tools", None), SharedWalk(old, 56.0)) is None


def test_another_principal_takes_a_walk_from_the_store_only_once_its_own_walk_succeeded():
    """Review: a principal refused ``tools/list`` on one worker took the store's public
    walk on another (refusals are not shared): a principal other than this client's
    default one takes a shared walk only after its own walk here succeeded."""
    engine, _ = make(SHARED)
    covered(engine)
    done = engine.begin_catalog("tools", "bob")  # maybe refused on another worker
    assert not engine.catalog_shared(done)
    assert engine.adopt_catalog(done, SharedWalk(ITEMS, 30.0)) is None
    shared_walk(engine, {None: page("a", scope="public")}, partition="bob")  # allowed here
    engine.list_changed_elsewhere("tools")
    done = engine.begin_catalog("tools", "bob")
    assert engine.adopt_catalog(done, SharedWalk(ITEMS, 30.0)) is not None
    engine.list_changed_elsewhere("tools")
    shared_walk(engine, {None: RequestFailed("denied", "no")}, partition="bob")  # refused now
    engine.list_changed_elsewhere("tools")
    shared_walk(engine, {None: page("a", scope="public")})  # the default partition walks
    done = engine.begin_catalog("tools", "bob")
    assert engine.adopt_catalog(done, SharedWalk(ITEMS, 30.0)) is None
