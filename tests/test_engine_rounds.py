"""A result handed out but never stored (a ``requestState`` retry's): its record is kept
a while (bounded), so its waiters may take it while nothing changed since its read was
sent, and a hint that comes after it still finds the record."""

from __future__ import annotations

from freshcache._core import FreshnessEngine, ReadReply, ResourceContents, ResourceUpdated
from freshcache._core._records import REMEMBERED_IDLE
from freshcache._middleware._store import MemoryStore

U = "guide://race/rounds"


def _engine() -> FreshnessEngine:
    return FreshnessEngine(store=MemoryStore(), clock=lambda: 100.0, wall_clock=lambda: 1e9)


def _rounds_reply() -> ReadReply:
    return ReadReply((ResourceContents(U, text="v1"),), ttl_ms=60_000, multi_round_trip=True)


def test_a_handed_out_result_is_current_while_nothing_changed() -> None:
    engine = _engine()
    ticket = engine.begin_read(U, None)
    assert engine.finish_read(ticket, _rounds_reply()) is not None
    assert engine.tracked_uris == 1  # nothing stored, but kept a while for its waiters
    assert engine.is_current(ticket)


def test_a_change_heard_after_the_read_was_sent_makes_it_not_current() -> None:
    engine = _engine()
    ticket = engine.begin_read(U, None)
    assert engine.finish_read(ticket, _rounds_reply()) is not None
    engine.handle(ResourceUpdated(U, None))
    assert not engine.is_current(ticket)


def test_the_records_kept_for_waiters_are_bounded_and_then_any_change_reads_again() -> None:
    engine = _engine()
    ticket = engine.begin_read(U, None)
    assert engine.finish_read(ticket, _rounds_reply()) is not None
    for i in range(REMEMBERED_IDLE):
        other = f"guide://race/other/{i}"
        reply = ReadReply((ResourceContents(other, text="x"),), multi_round_trip=True)
        engine.finish_read(engine.begin_read(other, None), reply)
    assert engine.tracked_uris == REMEMBERED_IDLE
    assert U not in engine.copies.records  # forgotten
    # Nothing was invalidated nor heard of since: forgetting is not an invalidation.
    assert engine.is_current(ticket)
    engine.handle(ResourceUpdated("guide://race/elsewhere", None))
    assert not engine.is_current(ticket)  # cannot tell whose: its waiters read again
