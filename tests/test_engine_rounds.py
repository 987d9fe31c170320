"""A result handed out but never stored (a ``requestState`` retry's) leaves no record
behind, yet its waiters may take it while nothing changed since its read was sent."""

from __future__ import annotations

from freshcache._core import FreshnessEngine, ReadReply, ResourceContents, ResourceUpdated
from freshcache._store import MemoryStore

U = "guide://race/rounds"


def _engine() -> FreshnessEngine:
    return FreshnessEngine(store=MemoryStore(), clock=lambda: 100.0, wall_clock=lambda: 1e9)


def _rounds_reply() -> ReadReply:
    return ReadReply((ResourceContents(U, text="v1"),), ttl_ms=60_000, multi_round_trip=True)


def test_a_handed_out_result_whose_record_was_dropped_is_current_while_nothing_changed() -> None:
    engine = _engine()
    ticket = engine.begin_read(U, None)
    assert engine.finish_read(ticket, _rounds_reply()) is not None
    assert engine.tracked_uris == 0  # nothing stored, nothing selected: the record is gone
    assert engine.is_current(ticket)


def test_a_change_heard_after_the_read_was_sent_makes_it_not_current() -> None:
    engine = _engine()
    ticket = engine.begin_read(U, None)
    assert engine.finish_read(ticket, _rounds_reply()) is not None
    engine.handle(ResourceUpdated(U, None))
    assert not engine.is_current(ticket)


def test_a_newer_record_made_and_dropped_since_makes_it_not_current() -> None:
    engine = _engine()
    ticket = engine.begin_read(U, None)
    assert engine.finish_read(ticket, _rounds_reply()) is not None
    again = engine.begin_read(U, None)  # a newer read of the same URI, judged and dropped
    assert engine.finish_read(again, _rounds_reply()) is not None
    assert engine.tracked_uris == 0
    assert not engine.is_current(ticket) and engine.is_current(again)
