"""The stream lifecycle (`ListenSupervisor`), driven sans-IO with a virtual clock."""

from __future__ import annotations

from freshcache._core._backoff import BackoffSettings, ReconnectBudget
from freshcache._core._streams import CloseStream, ListenSupervisor, OpenStream

A = frozenset({"guide://a"})
AB = frozenset({"guide://a", "guide://b"})


def supervisor(ack_timeout: float = 2.0) -> ListenSupervisor:
    settings = BackoffSettings(base=1.0, cap=8.0, quick_death=0.0)
    return ListenSupervisor(ReconnectBudget(settings, jitter=lambda: 1.0), ack_timeout)


def test_nothing_is_opened_until_something_is_selected():
    s = supervisor()
    assert s.want(frozenset(), 0.0) == []
    assert (s.state, s.next_deadline()) == ("idle", None)
    assert s.want(A, 0.0) == [OpenStream(1, A)]
    assert (s.state, s.next_deadline()) == ("opening", 2.0)


def test_an_acknowledged_stream_is_live_and_has_no_deadline():
    s = supervisor()
    s.want(A, 0.0)
    assert s.acknowledged(1, 0.5) == []
    assert (s.state, s.next_deadline()) == ("live", None)
    assert s.want(A, 0.6) == []  # the same selection needs no new stream


def test_no_acknowledgment_in_time_closes_the_stream_and_backs_off_exponentially():
    s = supervisor()
    s.want(A, 0.0)
    assert s.tick(1.9) == []
    assert s.tick(2.0) == [CloseStream(1)]
    assert (s.state, s.retry_at) == ("backing_off", 3.0)
    assert s.ended(1, "lost", 2.1) == []  # the report of the closed stream is ignored
    assert s.tick(3.0) == [OpenStream(2, A)]
    assert s.tick(5.0) == [CloseStream(2)]
    assert s.retry_at == 7.0  # twice the base after a second failure
    assert s.attempts == 2


def test_a_lost_live_stream_is_reopened_after_the_backoff():
    s = supervisor()
    s.want(A, 0.0)
    s.acknowledged(1, 0.0)
    assert s.ended(1, "lost", 10.0) == []
    assert (s.state, s.next_deadline()) == ("backing_off", 11.0)
    # The engine's Relisten for the loss names the same selection: it waits.
    assert s.want(A, 10.5) == []
    assert s.tick(11.0) == [OpenStream(2, A)]


def test_a_new_selection_does_not_wait_out_the_backoff():
    s = supervisor()
    s.want(A, 0.0)
    s.acknowledged(1, 0.0)
    s.ended(1, "closed", 1.0)
    assert s.want(AB, 1.1) == [OpenStream(2, AB)]
    assert s.retry_at is None


def test_a_selection_change_keeps_the_live_stream_until_the_replacement_is_acknowledged():
    s = supervisor()
    s.want(A, 0.0)
    s.acknowledged(1, 0.0)
    assert s.want(AB, 1.0) == [OpenStream(2, AB)]
    assert s.state == "live"
    assert s.acknowledged(2, 1.5) == [CloseStream(1)]
    assert s.ended(1, "lost", 1.6) == []  # the closed primary's end changes nothing
    assert s.state == "live"


def test_a_failed_replacement_leaves_the_primary_and_is_retried_later():
    s = supervisor()
    s.want(A, 0.0)
    s.acknowledged(1, 0.0)
    s.want(AB, 1.0)
    assert s.tick(3.0) == [CloseStream(2)]
    assert s.state == "live"
    assert s.retry_at == 4.0
    assert s.tick(4.0) == [OpenStream(3, AB)]


def test_a_replacement_that_ends_before_its_ack_is_retried_after_the_backoff():
    s = supervisor()
    s.want(A, 0.0)
    s.acknowledged(1, 0.0)
    s.want(AB, 1.0)
    assert s.ended(2, "lost", 1.2) == []
    assert (s.state, s.retry_at) == ("live", 2.2)


def test_when_the_primary_dies_the_opening_replacement_takes_over():
    s = supervisor()
    s.want(A, 0.0)
    s.acknowledged(1, 0.0)
    s.want(AB, 1.0)
    assert s.ended(1, "lost", 1.1) == []
    assert s.state == "opening"
    assert s.acknowledged(2, 1.2) == []
    assert s.state == "live"


def test_changing_the_selection_again_replaces_the_replacement():
    s = supervisor()
    s.want(A, 0.0)
    s.acknowledged(1, 0.0)
    s.want(AB, 1.0)
    assert s.want(frozenset({"guide://c"}), 1.1) == [
        CloseStream(2),
        OpenStream(3, frozenset({"guide://c"})),
    ]
    assert s.want(frozenset({"guide://c"}), 1.2) == []
    assert s.want(A, 1.3) == [CloseStream(3)]  # back to what the primary covers


def test_a_selection_change_before_the_ack_reopens_at_once():
    s = supervisor()
    s.want(A, 0.0)
    assert s.want(A, 0.1) == []
    assert s.want(AB, 0.2) == [CloseStream(1), OpenStream(2, AB)]


def test_an_empty_selection_closes_the_live_stream():
    s = supervisor()
    s.want(A, 0.0)
    s.acknowledged(1, 0.0)
    assert s.want(frozenset(), 1.0) == [CloseStream(1)]
    assert s.state == "idle"


def test_a_server_without_listen_stops_everything_for_good():
    s = supervisor()
    s.want(A, 0.0)
    s.acknowledged(1, 0.0)
    s.want(AB, 1.0)
    assert s.ended(2, "unsupported", 1.1) == [CloseStream(1)]
    assert s.state == "unsupported"
    assert s.want(A, 2.0) == []
    assert s.tick(100.0) == []


def test_a_retry_that_comes_when_the_selection_moved_on_opens_for_the_new_one():
    s = supervisor()
    s.want(A, 0.0)
    s.acknowledged(1, 0.0)
    s.want(AB, 1.0)
    s.ended(2, "lost", 1.1)  # replacement failed: retry at 2.1 for AB
    assert s.tick(2.1) == [OpenStream(3, AB)]
    assert s.acknowledged(3, 2.2) == [CloseStream(1)]


def test_reports_about_unknown_attempts_are_ignored():
    s = supervisor()
    assert s.acknowledged(9, 0.0) == []
    assert s.ended(9, "lost", 0.0) == []
    assert s.tick(50.0) == []
