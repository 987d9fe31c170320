"""The speed path: a re-read in fewer steps (issue 25), a part of `FreshnessEngine`.

Two common cases are taken in one pass: a ``resources/updated`` without a body that
names no subscribed parent (`handle`), and a server's reply to a read of the default
partition that the store keeps as the URI's record itself (`reply`). Each applies the
engine's rules through the public accessors of its parts (`Copies`, `Coverage`,
`ChangesHeard`, `Denials`) and hands every other case to the general rules before
changing anything; `tests/test_engine_quick.py` plays random steps through an engine with the
speed path and one without it (``quick`` off) and compares everything they hold.

Its cost is its calls: the parts' methods it calls are bound once here, and where a
part keeps what it answers in a table (`Coverage.covering`, `Copies.ms_windows`,
`Denials.pairs`), the table is read, not asked through a call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ._copies import Copies
from ._denials import Denials
from ._entries import PUBLIC
from ._events import Decision, ReadReply, ReadResource, RequestFailed, ResourceUpdated, StreamEvent
from ._heard import ChangesHeard
from ._model import ReadResult, fresh_results
from ._records import SELECTED
from ._reports import ReadTicket


class Handler(Protocol):
    """What feeds the engine one stream event (`FreshnessEngine.handle`)."""

    def __call__(self, event: StreamEvent, cause: str = ...) -> list[Decision]: ...


def _unset(event: StreamEvent, cause: str = "resources/updated") -> list[Decision]:
    raise AssertionError("Rereads.events is set by the engine")


class Rereads:
    """`handle` and `reply`: the engine's rules for the common re-read, in one pass."""

    def __init__(
        self,
        copies: Copies,
        heard: ChangesHeard,
        denials: Denials,
        general: Callable[[ReadTicket, ReadReply | RequestFailed], ReadResult | None],
    ) -> None:
        self.copies = copies
        self.heard = heard
        self.denials = denials
        self.general = general
        """`ReadRules.finish_read`: every reply `reply` does not take."""
        self.events: Handler = _unset
        """`FreshnessEngine.events`: every event `handle` does not take (the engine sets it)."""
        self._counters = copies.counters
        self._coverage = copies.coverage
        self._trusted_ids = copies.coverage.trusted_ids
        self._note = heard.note
        self._proved = heard.proved
        self._record = copies.records.get
        self._invalidate = copies.invalidate
        self._reason_for = copies.reason_for
        self._clock = copies.clock
        self._fetched_at_now = copies.fetched_at_now
        self._ms_windows = copies.ms_windows
        self._hits = copies.hits
        self._expires_at = copies.expires_at
        self._index = copies.index
        self._denied = denials.pairs

    def handle(self, event: StreamEvent, cause: str = "resources/updated") -> list[Decision]:
        """`FreshnessEngine.handle`; in one pass for a ``resources/updated`` without a
        body that names no subscribed parent of its URI: one lookup, one generation
        bump, at most one read decided, for ``cause`` (a fleet follower's copy of the
        listener's re-proof names it). Any other event goes to `events`."""
        if (
            not isinstance(event, ResourceUpdated)
            or event.contents is not None
            or (
                len(uri := event.uri) > self._coverage.shortest  # (no parent: no call)
                and self._coverage.parents_asked_for(uri)
            )
        ):
            return self.events(event, cause)
        counters = self._counters
        counters.notifications += 1
        subscription_id = event.subscription_id
        trusted = subscription_id in self._trusted_ids  # (`Coverage.trusted`, no call)
        if not trusted:
            counters.untrusted_messages += 1
        self._note(uri)
        state = self._record(uri)
        if state is None:
            return []
        reason = self._reason_for(uri, state, cause)
        self._invalidate(uri, reason, cause, subscription_id, trusted, state)
        if state.flags & SELECTED:
            return [ReadResource(uri, self.copies.default_partition, cause)]
        return []

    def reply(self, ticket: ReadTicket, reply: ReadReply | RequestFailed) -> ReadResult | None:
        """`ReadRules.finish_read` (what it returns); in one pass for a reply from the
        server, at the URI's current generation, to a read of the default partition
        that the store keeps as the record itself (`Copies.keep`), private or not
        shared, with no round trips or hintless window to weigh, while the server is
        usable. Any other case goes to `general` before anything changed."""
        copies = self.copies
        uri = ticket.uri
        state = self._record(uri)
        if reply.__class__ is not ReadReply or state is None:
            return self.general(ticket, reply)
        assert isinstance(reply, ReadReply)
        partition = ticket.partition
        objects = copies.objects
        policy = copies.policy
        if (
            state.generation != ticket.generation
            or reply.from_server is not True
            or reply.shared_copy
            or reply.multi_round_trip
            or reply.hintless
            or objects is None
            or partition != copies.default_partition
            or partition == PUBLIC
            or copies.unusable is not None
            or (reply.cache_scope == "public" and policy.share_public)
        ):
            return self.general(ticket, reply)
        state.read_done()
        self._proved(uri, ticket.changes_heard)
        now = self._clock()
        cached, handed = fresh_results(uri, reply.contents, self._fetched_at_now())
        state.answered(partition)  # no failure; "not_cached" if this entry is evicted
        window = self._ms_windows[reply.ttl_ms]  # (`Copies.window_of_ms`, no call)
        if PUBLIC in state.partitions:
            copies.drop_entry(uri, PUBLIC, state)
        self._hits.pop(uri, None)  # no row while the record changes
        expires_at = self._expires_at(now, window)
        held = state.value
        if held is not None and held.contents is reply.contents and partition in state.partitions:
            # The very contents it holds (a source that hands out an unchanged reply
            # again): the same size, so the store only notes the use, as the discard
            # and put of `Copies.keep` would (no bound can be passed by it).
            state.hold(cached, expires_at, window, 0)
            objects.get_object(uri)
        else:
            if held is not None:
                objects.discard_object(uri)  # (still the URI's record: see `UriRecords`)
            else:
                copies.records.leaving(uri)  # the store keeps it now (or hands it back)
            state.hold(cached, expires_at, window, 0)
            if partition not in state.partitions:
                state.add_partition(partition)
            objects.put_object(uri, state)
        if partition in state.partitions:  # not evicted at once by the bounds
            self._index(uri, partition, state, state)
        elif state.idle:  # (a record held in a partition is never idle: no call)
            copies.records.forget_if_idle(uri, state, keep_a_while=True)
        if self._denied:  # (`Denials.__len__`, no call)
            self.denials.cleared(uri, partition)  # its own read succeeded
        return handed


__all__ = ["Rereads"]
