"""Catalogs (tools, prompts, resource templates) keep the resource promise (invariant 14),
judged by the sans-IO engine with a virtual clock: list_changed, TTL over pages,
private pages, acknowledgments, stream loss, denial, the opt-in stale catalog."""

from __future__ import annotations

from typing import Any

import pytest

from freshcache import Catalog, Policy
from freshcache._core import (
    CatalogListChanged,
    FreshnessEngine,
    ListenAcknowledged,
    ListenStarted,
    ListReply,
    Relist,
    RequestFailed,
    ResourceListChanged,
    StreamLost,
)
from freshcache._core._frozen import frozen
from freshcache._middleware._store import MemoryStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(policy: Policy | None = None) -> tuple[FreshnessEngine, Clock]:
    clock = Clock()
    engine = FreshnessEngine(
        store=MemoryStore(), policy=policy, clock=clock, wall_clock=lambda: 1e9
    )
    return engine, clock


def page(
    *names: str,
    cursor: str | None = None,
    ttl_ms: float | None = 60_000,
    scope: Any = None,
    hintless: bool = False,
) -> ListReply:
    items = [{"name": n, "inputSchema": {"type": "object", "required": [n]}} for n in names]
    return ListReply(
        (),
        next_cursor=cursor,
        ttl_ms=ttl_ms,
        cache_scope=scope,
        items=frozen(items),
        hintless=hintless,
    )


def walk(
    engine: FreshnessEngine,
    pages: dict[str | None, ListReply | RequestFailed],
    kind: Any = "tools",
    partition: str | None = None,
) -> tuple[Catalog, list[str | None]]:
    """Walk a catalog against a scripted server; returns it and the cursors asked for."""
    asked: list[str | None] = []
    done = engine.begin_catalog(kind, partition)
    while (ticket := done.walk.next_page()) is not None:
        asked.append(ticket.cursor)
        done.walk.landed(ticket, pages[ticket.cursor])
    return engine.settle_catalog(done), asked


def covered(
    engine: FreshnessEngine, sid: str = "s1", catalogs=("tools", "prompts", "resource_templates")
) -> None:
    engine.handle(ListenStarted(sid, frozenset(), True))
    engine.handle(ListenAcknowledged(sid, frozenset(), True, frozenset(catalogs)))


def test_a_complete_walk_is_fresh_and_its_hit_is_the_same_object():
    engine, _ = make()
    covered(engine)
    catalog, asked = walk(engine, {None: page("a", cursor="c1"), "c1": page("b")})
    assert asked == [None, "c1"]
    assert catalog.state == "fresh"
    assert catalog.server_read
    assert catalog.names == ("a", "b")
    assert catalog.version is not None
    hit = engine.catalog_lookup("tools", None)
    assert hit is not None
    assert hit.names == ("a", "b")
    assert not hit.server_read
    assert engine.catalog_lookup("tools", None) is hit  # no copy on the hit path
    assert engine.catalog_status("tools", None) is hit


def test_tools_list_changed_makes_the_catalog_not_fresh_and_asks_for_a_relist():
    engine, _ = make()
    covered(engine)
    walk(engine, {None: page("a")})
    decisions = engine.handle(CatalogListChanged("tools", "s1"))
    assert decisions == [Relist("list_changed", "tools")]
    assert engine.catalog_lookup("tools", None) is None
    status = engine.catalog_status("tools", None)
    assert (status.state, status.reason, status.items) == (
        "awaiting_fresh_source",
        "invalidated",
        (),
    )
    again, _ = walk(engine, {None: page("a", "b")})
    assert again.names == ("a", "b")
    assert again.version != status.version


def test_a_prompts_change_does_not_touch_tools_and_templates_change_with_the_resource_list():
    engine, _ = make()
    covered(engine)
    walk(engine, {None: page("t")})
    walk(engine, {None: page("tpl")}, kind="resource_templates")
    engine.handle(CatalogListChanged("prompts", "s1"))
    assert engine.catalog_lookup("tools", None) is not None
    decisions = engine.handle(ResourceListChanged("s1"))
    assert Relist("list_changed", "resource_templates") in decisions
    assert engine.catalog_lookup("resource_templates", None) is None
    assert engine.catalog_lookup("tools", None) is not None


def test_a_change_that_overtakes_a_walk_starts_it_again():
    engine, _ = make()
    covered(engine)
    done = engine.begin_catalog("tools", None)
    first = done.walk.next_page()
    assert first is not None
    done.walk.landed(first, page("old", cursor="c1"))
    second = done.walk.next_page()
    assert second is not None
    engine.handle(CatalogListChanged("tools", "s1"))  # while page 2 is in flight
    done.walk.landed(second, page("old2"))
    restart = done.walk.next_page()
    assert restart is not None
    assert restart.cursor is None  # from the first page again
    done.walk.landed(restart, page("new"))
    catalog = engine.settle_catalog(done)
    assert catalog.names == ("new",)


def test_the_window_is_the_minimum_ttl_over_pages():
    engine, clock = make()
    covered(engine)
    walk(engine, {None: page("a", cursor="c1", ttl_ms=60_000), "c1": page("b", ttl_ms=5_000)})
    clock.now += 4.999
    assert engine.catalog_lookup("tools", None) is not None
    clock.now += 0.002
    assert engine.catalog_lookup("tools", None) is None
    assert engine.catalog_status("tools", None).reason == "expired"


def test_any_private_page_makes_the_whole_catalog_private():
    engine, _ = make(Policy(share_public=True))
    covered(engine)
    walk(
        engine,
        {None: page("a", cursor="c1", scope="public"), "c1": page("b", scope="private")},
        partition="alice",
    )
    assert engine.catalog_lookup("tools", "alice") is not None
    assert engine.catalog_lookup("tools", "bob") is None
    # All pages public: shared with every principal (share_public opted in).
    walk(engine, {None: page("a", scope="public")}, kind="prompts", partition="alice")
    shared = engine.catalog_lookup("prompts", "bob")
    assert shared is not None
    assert shared.names == ("a",)


def test_an_incomplete_walk_is_never_fresh():
    engine, _ = make()
    covered(engine)
    catalog, _ = walk(
        engine, {None: page("a", cursor="c1"), "c1": RequestFailed("unreachable", "down")}
    )
    assert (catalog.state, catalog.reason, catalog.items) == (
        "awaiting_fresh_source",
        "unreachable",
        (),
    )
    assert engine.catalog_lookup("tools", None) is None


def test_a_refused_cursor_walks_again_from_the_first_page():
    engine, _ = make()
    covered(engine)
    answers: list[ListReply | RequestFailed] = [
        page("a", cursor="c1"),
        RequestFailed("not_found", "Invalid cursor", -32602),
        page("a2"),
    ]
    done = engine.begin_catalog("tools", None)
    asked = []
    while (ticket := done.walk.next_page()) is not None:
        asked.append(ticket.cursor)
        done.walk.landed(ticket, answers.pop(0))
    assert asked == [None, "c1", None]
    assert engine.settle_catalog(done).names == ("a2",)


def test_an_uncovered_catalog_is_walked_before_each_use():
    engine, _ = make()
    catalog, _ = walk(engine, {None: page("a")})
    assert catalog.state == "fresh"  # this call's own walk
    assert engine.catalog_lookup("tools", None) is None  # the next use walks again
    assert engine.catalog_status("tools", None).reason == "uncovered"
    _, asked = walk(engine, {None: page("a")})
    assert asked == [None]  # not from the cached page
    relaxed, _ = make(Policy(uncovered="ttl"))
    walk(relaxed, {None: page("a")})
    assert relaxed.catalog_lookup("tools", None) is not None


def test_a_catalog_the_ack_did_not_include_is_uncovered():
    engine, _ = make()
    covered(engine, catalogs=("prompts",))  # the server honoured promptsListChanged only
    walk(engine, {None: page("a")})
    assert engine.catalog_lookup("tools", None) is None
    walk(engine, {None: page("p")}, kind="prompts")
    assert engine.catalog_lookup("prompts", None) is not None


def test_a_catalog_walked_before_the_ack_is_not_fresh_after_it():
    engine, _ = make(Policy(uncovered="ttl"))
    walk(engine, {None: page("a")})
    assert engine.catalog_lookup("tools", None) is not None
    engine.handle(ListenStarted("s1", frozenset(), True))
    decisions = engine.handle(ListenAcknowledged("s1", frozenset(), True, frozenset({"tools"})))
    assert Relist("acknowledged", "tools") in decisions
    assert engine.catalog_lookup("tools", None) is None
    # A walk that was in flight across the ack does not count either.
    engine2, _ = make()
    done = engine2.begin_catalog("tools", None)
    ticket = done.walk.next_page()
    assert ticket is not None
    engine2.handle(ListenStarted("s1", frozenset(), True))
    engine2.handle(ListenAcknowledged("s1", frozenset(), True, frozenset({"tools"})))
    done.walk.landed(ticket, page("before"))
    ticket = done.walk.next_page()
    assert ticket is not None  # walked again after the ack
    done.walk.landed(ticket, page("after"))
    assert engine2.settle_catalog(done).names == ("after",)


def test_a_lost_stream_invalidates_what_it_covered():
    engine, _ = make()
    covered(engine)
    walk(engine, {None: page("a")})
    engine.handle(StreamLost("s1", "gone"))
    assert engine.catalog_lookup("tools", None) is None
    assert engine.catalog_status("tools", None).reason == "stream_lost"


def test_hintless_pages_stay_fresh_while_covered_until_notified():
    engine, clock = make()
    covered(engine)
    walk(engine, {None: page("a", ttl_ms=None, hintless=True)})
    clock.now += 3600
    assert engine.catalog_lookup("tools", None) is not None
    engine.handle(CatalogListChanged("tools", None))  # 2025 hints carry no id
    assert engine.catalog_lookup("tools", None) is None


def test_denied_drops_that_principals_catalog_and_no_shared_copy_serves_it():
    engine, _ = make(Policy(share_public=True))
    covered(engine)
    walk(engine, {None: page("mine")}, partition="bob")
    engine.handle(CatalogListChanged("tools", "s1"))
    denied, _ = walk(engine, {None: RequestFailed("denied", "no", 403)}, partition="bob")
    assert (denied.state, denied.reason, denied.items) == ("denied", "denied", ())
    # Alice's walk puts a public catalog everyone may share, except a refused principal.
    walk(engine, {None: page("a", scope="public")}, partition="alice")
    assert engine.catalog_lookup("tools", "alice") is not None
    assert engine.catalog_lookup("tools", "carol") is not None
    assert engine.catalog_lookup("tools", "bob") is None
    assert engine.catalog_status("tools", "bob").state == "denied"


def test_stale_catalogs_only_when_opted_in_labelled_with_age():
    for policy, expected in (
        (Policy(), "awaiting_fresh_source"),
        (Policy(stale_catalogs_on_error=True), "stale"),
    ):
        engine, clock = make(policy)
        covered(engine)
        walk(engine, {None: page("a")})
        engine.handle(CatalogListChanged("tools", "s1"))
        clock.now += 30
        catalog, _ = walk(engine, {None: RequestFailed("unreachable", "down")})
        assert catalog.state == expected
        assert catalog.reason == "unreachable"
        if expected == "stale":
            assert catalog.names == ("a",)
            assert catalog.age == pytest.approx(30)
            assert not catalog.ok
        else:
            assert catalog.items == ()
            assert catalog.age is None


def test_a_catalog_cannot_be_mutated():
    engine, _ = make()
    covered(engine)
    catalog, _ = walk(engine, {None: page("a")})
    item = catalog.items[0]
    with pytest.raises(TypeError):
        item["name"] = "evil"  # type: ignore[index]
    with pytest.raises(TypeError):
        item["inputSchema"]["type"] = "string"  # type: ignore[index]
    with pytest.raises(AttributeError):
        item["inputSchema"]["required"].append("x")  # type: ignore[union-attr]
    with pytest.raises(AttributeError):
        catalog.items.append({"name": "injected"})  # type: ignore[attr-defined]
    with pytest.raises((AttributeError, TypeError)):
        catalog.state = "fresh"  # type: ignore[misc]
    again = engine.catalog_lookup("tools", None)
    assert again is not None
    assert again.names == ("a",)
    assert again.items[0]["inputSchema"]["required"] == ("a",)
