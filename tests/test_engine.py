"""Unit tests of the sans-IO engine: one test per transition rule."""

from __future__ import annotations

import pytest

from freshcache import ConfigurationError, Policy
from freshcache._core import (
    PUBLIC,
    FreshnessEngine,
    ListenAcknowledged,
    ListenStarted,
    ListenUnsupported,
    ListReply,
    ReadReply,
    ReadResource,
    Relist,
    Relisten,
    RequestFailed,
    ResourceContents,
    ResourceInfo,
    ResourceListChanged,
    ResourceUpdated,
    StreamClosed,
    StreamLost,
    UntrustedMessage,
)
from freshcache._core._backoff import BackoffSettings, ReconnectBudget
from freshcache._middleware._store import MemoryStore

U = "guide://shipping/approval"
V = "guide://shipping/rates"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(policy: Policy | None = None, store: MemoryStore | None = None, **kw):
    clock = Clock()
    engine = FreshnessEngine(
        store=store or MemoryStore(), policy=policy, clock=clock, wall_clock=lambda: 1e9, **kw
    )
    return engine, clock


def reply(text: str, uri: str = U, ttl_ms: float | None = 60_000, scope=None, **kw) -> ReadReply:
    return ReadReply((ResourceContents(uri, text=text),), ttl_ms=ttl_ms, cache_scope=scope, **kw)


def read(engine, text: str, uri: str = U, partition=None, **kw):
    return engine.finish_read(engine.begin_read(uri, partition), reply(text, uri, **kw))


def live(engine, uris=(U,), sid="s1", list_changed=True):
    engine.handle(ListenStarted(sid, frozenset(uris), list_changed))
    return engine.handle(ListenAcknowledged(sid, frozenset(uris), list_changed))


def test_a_read_is_fresh_until_its_ttl_passes():
    engine, clock = make()
    result = read(engine, "v1")
    assert result.state == "fresh"
    assert result.server_read is True
    assert engine.lookup(U, None).server_read is False
    clock.now += 59.999
    assert engine.lookup(U, None).text == "v1"
    clock.now += 0.001
    assert engine.lookup(U, None) is None
    assert engine.status(U).reason == "expired"


@pytest.mark.parametrize(
    ("ttl_ms", "fresh"),
    [(None, False), (-5, False), (0, False), (1, True)],
    ids=["absent", "negative", "zero", "one-ms"],
)
def test_absent_and_negative_ttl_count_as_zero(ttl_ms, fresh):
    engine, _ = make()
    read(engine, "v1", ttl_ms=ttl_ms)
    assert (engine.lookup(U, None) is not None) is fresh


def test_ttl_is_clamped_at_the_policy_maximum():
    engine, clock = make(Policy(max_ttl=10.0))
    read(engine, "v1", ttl_ms=10**12)
    clock.now += 10.0
    assert engine.lookup(U, None) is None


def test_a_reply_to_a_read_sent_before_an_invalidation_is_discarded():
    engine, _ = make()
    ticket = engine.begin_read(U, None)
    engine.handle(ResourceUpdated(U, None))
    assert engine.is_current(ticket) is False
    assert engine.finish_read(ticket, reply("old")) is None
    assert engine.counters.superseded_replies == 1
    assert engine.status(U).reason == "invalidated"


def test_a_local_copy_never_makes_content_fresh():
    engine, _ = make()
    result = read(engine, "local", from_server=False)
    assert (result.state, result.reason) == ("awaiting_fresh_source", "local_copy_only")
    assert engine.status(U).reason == "local_copy_only"
    assert engine.counters.local_copy_replies == 1


def test_results_of_multi_round_trip_retries_are_handed_out_but_never_cached():
    engine, _ = make()
    result = read(engine, "v1", multi_round_trip=True)
    assert result.state == "fresh"
    assert engine.lookup(U, None) is None


@pytest.mark.parametrize(
    ("kind", "state", "reason"),
    [
        ("denied", "denied", "denied"),
        ("not_found", "not_found", "not_found"),
        ("timeout", "awaiting_fresh_source", "timeout"),
        ("unreachable", "awaiting_fresh_source", "unreachable"),
        ("server_error", "awaiting_fresh_source", "server_error"),
    ],
    ids=["denied", "not-found", "timeout", "unreachable", "server-error"],
)
def test_failures_become_result_states_without_text(kind, state, reason):
    engine, _ = make()
    result = engine.finish_read(engine.begin_read(U, None), RequestFailed(kind, "because"))
    assert (result.state, result.reason, result.text, result.detail) == (
        state,
        reason,
        None,
        "because",
    )
    assert engine.status(U).state == state


def test_a_failed_read_before_use_masks_a_ttl_valid_entry():
    engine, _ = make()
    read(engine, "v1")
    engine.finish_read(engine.begin_read(U, None), RequestFailed("timeout"))
    assert engine.lookup(U, None) is None
    assert engine.status(U).reason == "timeout"


def test_a_failure_that_lost_the_race_with_an_invalidation_is_not_remembered():
    engine, _ = make()
    ticket = engine.begin_read(U, None)
    engine.handle(ResourceUpdated(U, None))
    engine.finish_read(ticket, RequestFailed("timeout"))
    assert engine.status(U).reason == "invalidated"


def test_denial_drops_that_principals_copy_only():
    engine, _ = make()
    read(engine, "alice's", partition="alice")
    read(engine, "bob's", partition="bob")
    engine.finish_read(engine.begin_read(U, "bob"), RequestFailed("denied"))
    assert engine.status(U, "bob").state == "denied"
    assert engine.lookup(U, "alice").text == "alice's"


def test_stale_is_served_only_where_the_policy_opted_in():
    engine, clock = make(Policy(stale_on_error=("guide://shipping/*",)))
    read(engine, "v1")
    clock.now += 90
    result = engine.finish_read(engine.begin_read(U, None), RequestFailed("unreachable"))
    assert (result.state, result.text, result.reason) == ("stale", "v1", "unreachable")
    assert result.age == pytest.approx(90)
    other = engine.finish_read(
        engine.begin_read("guide://other/x", None), RequestFailed("unreachable")
    )
    assert other.state == "awaiting_fresh_source"


def test_stale_needs_an_old_copy_and_never_covers_denial():
    engine, _ = make(Policy(stale_on_error=("*",)))
    assert engine.note_timeout(U, None).state == "awaiting_fresh_source"
    read(engine, "v1")
    assert engine.note_timeout(U, None).state == "stale"
    assert engine.finish_read(engine.begin_read(U, None), RequestFailed("denied")).state == "denied"


def test_public_entries_are_shared_only_with_the_opt_in():
    engine, _ = make(Policy(share_public=True))
    read(engine, "shared", partition="alice", scope="public")
    assert engine.lookup(U, "bob").text == "shared"
    assert engine.status(U, "bob").state == "fresh"
    closed, _ = make()
    read(closed, "mine", partition="alice", scope="public")
    assert closed.lookup(U, "bob") is None


def test_a_principal_denied_does_not_get_the_shared_public_copy():
    engine, _ = make(Policy(share_public=True))
    read(engine, "shared", partition="alice", scope="public")
    engine.finish_read(engine.begin_read(U, "bob"), RequestFailed("denied"))
    assert engine.lookup(U, "bob") is None
    assert engine.status(U, "bob").state == "denied"


def test_a_public_reply_replaces_the_principals_private_copy():
    engine, _ = make(Policy(share_public=True))
    read(engine, "private", partition="alice")
    read(engine, "public", partition="alice", scope="public")
    assert engine.lookup(U, "alice").text == "public"
    assert U not in engine.hits_for("alice")
    assert U in engine.hits_for(PUBLIC)
    read(engine, "anonymous")
    assert U in engine.hits  # every partition's table is keyed by the bare URI


def test_status_of_an_unknown_uri_is_not_cached():
    engine, _ = make()
    assert engine.status("x://y").reason == "not_cached"


def test_status_after_an_eviction_says_not_cached():
    engine, clock = make(store=MemoryStore(max_entries=1))
    engine.select([U])
    read(engine, "v1")
    read(engine, "w1", uri=V)
    assert engine.status(U).reason == "not_cached"
    clock.now += 100
    assert engine.status(V).reason == "expired"


def test_selected_uris_no_subscription_covers_are_read_before_each_use():
    engine, _ = make()
    engine.select([U])
    read(engine, "v1")
    assert engine.lookup(U, None) is None
    assert engine.status(U).reason == "uncovered"
    # The acknowledgment proves nothing about the copy read before it (invariant 4):
    # it asks for a re-read, and only that re-read makes U fresh.
    assert live(engine) == [ReadResource(U, None, "acknowledged"), Relist("acknowledged")]
    assert engine.lookup(U, None) is None
    assert engine.status(U).reason == "invalidated"
    read(engine, "v2")
    assert engine.lookup(U, None).text == "v2"


def test_the_ttl_policy_relaxes_uncovered_uris_to_their_ttl():
    engine, _ = make(Policy(uncovered="ttl"))
    engine.select([U])
    read(engine, "v1")
    assert engine.lookup(U, None).text == "v1"


def test_subscription_backed_freshness_lasts_while_the_stream_covers_the_uri():
    engine, clock = make(Policy(subscription_backed=True))
    engine.select([U])
    live(engine)
    read(engine, "v1")
    clock.now += 10**6
    assert engine.lookup(U, None).text == "v1"
    engine.handle(StreamLost("s1"))
    assert engine.lookup(U, None) is None


def test_acknowledgment_reads_every_selected_uri_it_was_asked_to_cover_and_relists():
    engine, _ = make()
    engine.select([U, V])
    decisions = live(engine, uris=(U, V))
    assert decisions == [
        ReadResource(U, None, "acknowledged"),
        ReadResource(V, None, "acknowledged"),
        Relist("acknowledged"),
    ]
    assert engine.stream_status == "live"
    assert engine.covered == {U, V}


def test_an_acknowledgment_cannot_cover_what_was_not_asked_for():
    engine, _ = make()
    engine.handle(ListenStarted("s1", frozenset({U}), False))
    engine.handle(ListenAcknowledged("s1", frozenset({U, V}), True))
    assert engine.covered == {U}
    assert engine.counters.untrusted_messages == 1


@pytest.mark.parametrize("sid", ["unknown", "s1"], ids=["unknown-id", "duplicate"])
def test_unknown_or_repeated_acknowledgments_are_ignored(sid):
    engine, _ = make()
    live(engine)
    engine.handle(ListenAcknowledged(sid, frozenset({U, V}), True))
    assert engine.covered == {U}
    assert engine.counters.untrusted_messages == 1


def test_an_update_invalidates_and_rereads_selected_uris_only():
    engine, _ = make()
    engine.select([U])
    live(engine)
    read(engine, "v1")
    read(engine, "w1", uri=V)
    assert engine.handle(ResourceUpdated(U, "s1")) == [ReadResource(U, None, "resources/updated")]
    assert engine.handle(ResourceUpdated(V, "s1")) == []
    assert engine.lookup(V, None) is None
    assert engine.counters.untrusted_messages == 0


def test_an_update_for_a_uri_never_read_changes_nothing():
    engine, _ = make()
    assert engine.handle(ResourceUpdated("x://never", "s1")) == []
    assert engine.counters.invalidations == 0


def test_untrusted_updates_still_invalidate():
    engine, _ = make()
    engine.select([U])
    engine.handle(ListenStarted("s1", frozenset({U}), False))
    read(engine, "v1")
    engine.handle(ResourceUpdated(U, "s1"))  # before its acknowledgment
    assert engine.status(U).reason == "invalidated"
    assert engine.counters.untrusted_messages == 1


@pytest.mark.parametrize(
    ("notified", "invalidated"),
    [
        ("guide://shipping/approval/part", True),
        ("guide://shipping/approval#x", True),
        ("guide://shipping/approvals", False),
        ("guide://shipping", False),
    ],
    ids=["child", "fragment", "sibling-prefix", "parent"],
)
def test_an_update_for_a_sub_resource_invalidates_the_subscribed_parent(notified, invalidated):
    engine, _ = make(Policy(uncovered="ttl"))
    engine.select([U])
    live(engine)
    read(engine, "v1")
    engine.handle(ResourceUpdated(notified, "s1"))
    assert (engine.lookup(U, None) is None) is invalidated


def test_list_changed_invalidates_list_pages_not_contents():
    engine, _ = make()
    live(engine)
    read(engine, "v1")
    ticket = engine.begin_list(None, None)
    engine.finish_list(ticket, ListReply((ResourceInfo(U),), ttl_ms=60_000))
    assert engine.lookup_list_page(None, None) is not None
    assert engine.handle(ResourceListChanged("s1")) == [Relist("list_changed")]
    assert engine.lookup_list_page(None, None) is None
    assert engine.lookup(U, None).text == "v1"


def test_a_list_page_overtaken_by_a_list_change_is_discarded():
    engine, _ = make()
    ticket = engine.begin_list(None, None)
    engine.handle(ResourceListChanged(None))
    assert engine.finish_list(ticket, ListReply(())) is None


def test_a_cursor_error_discards_every_cached_page():
    engine, _ = make()
    for cursor in (None, "c1"):
        engine.finish_list(
            engine.begin_list(cursor, None), ListReply((), next_cursor="c1", ttl_ms=60_000)
        )
    failure = RequestFailed("not_found", "Invalid cursor")
    # A refused cursor: list again from the first page (None), every page discarded.
    assert engine.finish_list(engine.begin_list("c1", None), failure) is None
    assert engine.lookup_list_page(None, None) is None


def test_an_empty_string_cursor_is_not_the_first_page():
    engine, _ = make()
    engine.finish_list(
        engine.begin_list("", None), ListReply((ResourceInfo("x://page2"),), ttl_ms=60_000)
    )
    assert engine.lookup_list_page(None, None) is None
    assert engine.lookup_list_page("", None) is not None


def test_public_list_pages_are_shared_with_the_opt_in():
    engine, _ = make(Policy(share_public=True))
    engine.finish_list(
        engine.begin_list(None, "alice"), ListReply((), ttl_ms=60_000, cache_scope="public")
    )
    assert engine.lookup_list_page(None, "bob") is not None


def test_a_selected_uri_that_left_the_list_is_checked_by_a_direct_read():
    engine, _ = make(Policy(uncovered="ttl"))
    engine.select([U, V])
    read(engine, "v1")
    assert engine.list_complete([V], None) == [ReadResource(U, None, "left_list")]
    assert engine.status(U).reason == "invalidated"


def test_selection_changes_ask_for_a_new_stream_whose_ack_reads_what_it_newly_covers():
    engine, _ = make()
    assert engine.select([U]) == [Relisten(frozenset({U}), "selection_changed")]
    assert engine.select([U]) == []
    assert live(engine, (U,)) == [ReadResource(U, None, "acknowledged"), Relist("acknowledged")]
    read(engine, "u1")
    assert engine.select([U, V]) == [Relisten(frozenset({U, V}), "selection_changed")]
    # The new stream's ack reads only V: U stayed covered by the live stream.
    engine.handle(ListenStarted("s2", frozenset({U, V}), True))
    assert engine.handle(ListenAcknowledged("s2", frozenset({U, V}), True)) == [
        ReadResource(V, None, "acknowledged"),
        Relist("acknowledged"),
    ]
    engine.cancel_subscription("s1")
    assert engine.lookup(U, None).text == "u1"
    assert engine.select([V]) == [Relisten(frozenset({V}), "selection_changed")]
    assert engine.selected == {V}


def test_without_listen_a_selection_change_asks_for_no_stream():
    engine, _ = make()
    engine.handle(ListenUnsupported("no"))
    assert engine.select([U]) == [ReadResource(U, None, "selected")]
    assert engine.listen_supported is False
    assert engine.stream_status == "unsupported"


def test_a_stream_loss_invalidates_what_it_covered_and_asks_to_relisten():
    engine, _ = make(Policy(uncovered="ttl"))
    engine.select([U, V])
    live(engine, uris=(U,))
    read(engine, "v1")
    read(engine, "w1", uri=V)
    assert engine.handle(StreamLost("s1")) == [Relisten(frozenset({U, V}), "stream_lost")]
    assert engine.status(U).reason == "stream_lost"
    assert engine.lookup(V, None).text == "w1"  # never covered, never vouched for
    assert engine.stream_status == "lost"


def test_a_loss_without_an_id_ends_every_subscription():
    engine, _ = make()
    engine.select([U])
    live(engine)
    read(engine, "v1")
    engine.handle(StreamLost(None))
    assert engine.status(U).reason == "stream_lost"
    assert engine.covered == frozenset()


def test_a_graceful_close_uncovers_but_does_not_invalidate():
    engine, _ = make(Policy(uncovered="ttl"))
    engine.select([U])
    live(engine)
    read(engine, "v1")
    assert engine.handle(StreamClosed("s1")) == [Relisten(frozenset({U}), "stream_closed")]
    assert engine.lookup(U, None).text == "v1"
    assert engine.stream_status == "closed"


@pytest.mark.parametrize(
    "event",
    [StreamClosed("old"), StreamLost("old"), StreamClosed(None)],
    ids=["closed-unknown", "lost-unknown", "closed-no-id"],
)
def test_the_end_of_an_unknown_stream_is_untrusted(event):
    engine, _ = make()
    live(engine)
    assert engine.handle(event) == []
    assert engine.counters.untrusted_messages == 1
    assert engine.stream_status == "live"


def test_while_a_second_stream_is_live_a_loss_of_the_first_asks_for_nothing():
    engine, _ = make()
    engine.select([U])
    live(engine, sid="s1")
    live(engine, sid="s2")
    assert engine.handle(StreamLost("s1")) == []
    assert engine.stream_status == "live"


def test_cancelling_a_replaced_subscription_uncovers_what_only_it_covered():
    engine, _ = make()
    engine.select([U, V])
    live(engine, uris=(U, V), sid="s1")
    live(engine, uris=(U,), sid="s2")
    engine.cancel_subscription("s1")
    assert engine.covered == {U}
    engine.cancel_subscription("never")


def test_untrusted_messages_are_counted():
    engine, _ = make()
    assert engine.handle(UntrustedMessage("garbage")) == []
    assert engine.counters.untrusted_messages == 1


def test_evictions_are_misses_for_reads_and_lists():
    store = MemoryStore(max_entries=2)
    engine, _ = make(store=store)
    read(engine, "v1")
    engine.finish_list(engine.begin_list(None, None), ListReply((), ttl_ms=60_000))
    read(engine, "w1", uri=V)
    read(engine, "x1", uri="x://3")
    assert engine.lookup(U, None) is None
    assert engine.lookup_list_page(None, None) is None
    assert store.entry_count == 2


def test_the_invalidation_observer_sees_cause_and_trust():
    seen = []
    engine, _ = make(on_invalidation=seen.append)
    read(engine, "v1")
    engine.handle(ResourceUpdated(U, "nobody"))
    assert [(i.uri, i.cause, i.subscription_id, i.trusted) for i in seen] == [
        (U, "resources/updated", "nobody", False)
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_ttl": -1}, "max_ttl"),
        ({"uncovered": "sometimes"}, "uncovered"),
        ({"stale_on_error": "x://*"}, "tuple of patterns"),
        ({"max_rereads": 0}, "max_rereads"),
    ],
    ids=["negative-ttl", "bad-uncovered", "string-patterns", "zero-rereads"],
)
def test_bad_policy_values_are_named(kwargs, message):
    with pytest.raises(ConfigurationError, match=message):
        Policy(**kwargs)


def test_backoff_grows_with_failures_up_to_the_cap_and_resets_on_acknowledgment():
    budget = ReconnectBudget(BackoffSettings(base=1.0, cap=4.0), jitter=lambda: 1.0)
    assert [budget.delay_after_failure() for _ in range(5)] == [1.0, 2.0, 4.0, 4.0, 4.0]
    budget.acknowledged(0.0)
    assert budget.delay_after_failure() == 1.0


def test_backoff_stays_at_the_cap_however_long_the_failures_last():
    # Seen under load: a listen refused over a thousand times in a row overflowed
    # ``2.0 ** failures`` and crashed the cache's listening task (at the default
    # 60 s cap, a server down for about eight hours).
    budget = ReconnectBudget(BackoffSettings(base=0.01, cap=0.1), jitter=lambda: 1.0)
    delays = [budget.delay_after_failure() for _ in range(5000)]
    assert delays[-1] == 0.1 and max(delays) == 0.1


def test_backoff_gives_up_after_streams_that_keep_dying_at_once():
    budget = ReconnectBudget(
        BackoffSettings(base=1.0, quick_death=10.0, max_quick_deaths=3, cooldown=7200),
        jitter=lambda: 0.0,
    )
    now = 0.0
    delays = []
    for _ in range(3):
        budget.acknowledged(now)
        now += 1.0
        delays.append(budget.delay_after_end(now))
    assert delays == [0.5, 0.5, 7200]
    assert budget.exhausted is True


def test_backoff_limits_reconnects_per_hour():
    budget = ReconnectBudget(
        BackoffSettings(base=1.0, quick_death=0.0, max_per_hour=2), jitter=lambda: 0.0
    )
    budget.acknowledged(0.0)
    assert budget.delay_after_end(100.0) == 0.5
    budget.acknowledged(101.0)
    assert budget.delay_after_end(200.0) == 3400.0
    budget.acknowledged(5000.0)
    assert budget.delay_after_end(5100.0) == 0.5


@pytest.mark.parametrize(
    "kwargs", [{"base": -1}, {"max_quick_deaths": 0}], ids=["negative", "zero"]
)
def test_bad_backoff_settings_are_named(kwargs):
    with pytest.raises(ConfigurationError):
        BackoffSettings(**kwargs)


def test_contents_keep_mcp_shape_both_ways():
    wire = {
        "uri": U,
        "blob": "AAEC",
        "mimeType": "image/png",
        "annotations": {"priority": 1},
        "_meta": {"k": 1},
    }
    item = ResourceContents.from_mcp(wire)
    assert item.to_mcp() == wire
    assert item.text is None


def test_text_joins_text_items_and_is_none_for_blobs_only():
    from freshcache._core import fresh_result, text_of

    assert text_of([ResourceContents(U, blob="AA")]) is None
    both = (
        ResourceContents(U, text="a"),
        ResourceContents(U, blob="AA"),
        ResourceContents(U, text="b"),
    )
    result = fresh_result(U, both, fetched_at=1.0, server_read=True)
    assert (result.text, result.ok) == ("a\nb", True)


def test_an_expired_public_copy_is_not_served():
    engine, clock = make(Policy(share_public=True))
    read(engine, "shared", partition="alice", scope="public")
    clock.now += 61
    assert engine.lookup(U, "bob") is None


def test_status_without_an_entry_after_expiry_says_not_cached():
    engine, clock = make(store=MemoryStore(max_entries=1))
    read(engine, "v1")
    clock.now += 61
    assert engine.status(U).reason == "expired"
    read(engine, "w1", uri=V)  # evicts U
    assert engine.status(U).reason == "not_cached"


def test_a_first_page_not_found_is_a_plain_failure():
    engine, _ = make()
    engine.finish_list(engine.begin_list("c", None), ListReply((), ttl_ms=60_000))
    failure = RequestFailed("not_found")
    assert engine.finish_list(engine.begin_list(None, None), failure) is failure
    assert engine.lookup_list_page("c", None) is not None


def test_stale_can_come_from_the_shared_public_copy():
    engine, _ = make(Policy(share_public=True, stale_on_error=("*",)))
    read(engine, "shared", partition="alice", scope="public")
    result = engine.finish_read(engine.begin_read(U, "bob"), RequestFailed("unreachable"))
    assert (result.state, result.text) == ("stale", "shared")


def test_coverage_changes_keep_a_failed_uri_out_of_the_fast_path():
    engine, _ = make()
    engine.select([U])
    live(engine)
    read(engine, "v1")
    engine.finish_read(engine.begin_read(U, None), RequestFailed("timeout"))
    live(engine, sid="s2")
    assert engine.lookup(U, None) is None


def test_an_eviction_of_an_entry_the_engine_never_saw_is_harmless():
    engine, _ = make()
    engine.copies.evicted(("server", "resources/read", "x://elsewhere", None))
    assert engine.status("x://elsewhere").reason == "not_cached"


def test_an_evicted_entry_reads_as_not_cached_but_an_invalidated_one_says_why():
    engine, _ = make(store=MemoryStore(max_entries=1))
    read(engine, "v1")
    engine.handle(ResourceUpdated(U, None))
    assert engine.status(U).reason == "invalidated"
    read(engine, "v2")
    read(engine, "w1", uri=V)  # evicts U
    assert engine.status(U).reason == "not_cached"
