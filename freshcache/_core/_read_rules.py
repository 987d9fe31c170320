"""What a read and its reply do (invariants 1, 6, 8, 12), a part of `FreshnessEngine`.

A read is sent under a ticket (`begin_read`) that keeps the URI's generation and the
changes-heard count; its reply is judged against it (`finish_read`): stored as fresh
only at the current generation and from the server (or of unknown origin with no
change heard since), a failure recorded for its principal, a shared copy never for a
principal refused here or anywhere in the fleet (`may_share`). The speed path
(`Rereads`) takes the common reply first; everything else is judged here.
"""

from __future__ import annotations

from collections.abc import Callable

from ._copies import Copies, generation_of
from ._denials import Denials
from ._entries import PUBLIC, Partition
from ._events import ReadReply, RequestFailed
from ._heard import ChangesHeard
from ._model import (
    AWAITING_FRESH_SOURCE,
    DENIED,
    FRESH,
    NOT_FOUND,
    ReadResult,
    problem_result,
    served_copy,
)
from ._records import UriRecord
from ._reports import ReadTicket
from ._rereads import Rereads


class ReadRules:
    """Tickets, replies and failures of ``resources/read``, and who a copy may serve."""

    quick = True
    """Take the speed path (`Rereads`); false: the general rules only (tests). Set it
    through `FreshnessEngine.quick`, which also binds its ``finish_read``."""
    denied_elsewhere: Callable[[str, Partition], bool] | None = None
    """Set by a fleet (a `Standing`, through `FreshnessEngine.denied_elsewhere`):
    whether a copy that is not ``partition``'s own read of a URI (or of a catalog:
    `catalog_subject`) must not serve it on this worker: refused here or on another
    worker since, or never read by it here."""

    def __init__(self, copies: Copies, heard: ChangesHeard, denials: Denials) -> None:
        self.quick = True  # (on the instance: read on every notification)
        self.copies = copies
        self.policy = copies.policy
        self.counters = copies.counters
        self.clock = copies.clock
        self.heard = heard
        self.denials = denials
        self.rereads = Rereads(copies, heard, denials, self.finish_read)
        """The speed path: `FreshnessEngine.finish_read` is its `Rereads.reply` while
        `quick`, which hands every other reply to `finish_read`."""

    def lookup(self, uri: str, partition: Partition) -> ReadResult | None:
        """A fresh result from the cache, or ``None`` when a server read is needed."""
        copies = self.copies
        if copies.unusable is not None:
            return None
        now = self.clock()
        if partition != PUBLIC and not self.may_share(uri, partition, "public"):
            elsewhere = self.denied_elsewhere
            if elsewhere is not None and elsewhere(uri, partition):
                # Refused on another worker since (a fleet-wide denial): not even a copy
                # of its own from before; only its own next successful read ends it.
                return None
            return copies.rows.fresh(uri, partition, now)  # its own copy only
        fresh = copies.rows.fresh(uri, partition, now)
        if fresh is None and self.policy.share_public and partition != PUBLIC:
            state = copies.records.get(uri)
            if state is not None and state.problem(partition) is None:
                fresh = copies.rows.fresh(uri, PUBLIC, now)
        return fresh

    def status(self, uri: str, partition: Partition = None) -> ReadResult:
        """What a read would hand out right now, without any I/O."""
        fresh = self.lookup(uri, partition)
        if fresh is not None:
            return fresh
        copies = self.copies
        state = copies.records.get(uri)
        if state is None:
            return problem_result(uri, AWAITING_FRESH_SOURCE, "not_cached")
        problem = state.problem(partition)
        if problem is not None and problem[0] == state.generation:
            return copies.maybe_stale(problem[1], partition)
        entry = copies.entry(uri, partition)
        if entry is not None and generation_of(entry) == state.generation:
            if copies.uncovered_strict(uri, state):
                return problem_result(uri, AWAITING_FRESH_SOURCE, "uncovered")
            return problem_result(uri, AWAITING_FRESH_SOURCE, "expired")
        return problem_result(uri, AWAITING_FRESH_SOURCE, state.invalid_reason)

    # ------------------------------------------------------------------ reads

    def begin_read(self, uri: str, partition: Partition) -> ReadTicket:
        """Note that a server read of ``uri`` is being sent now."""
        copies = self.copies
        state = copies.records.of(uri)
        state.read_sent()
        self.counters.server_reads += 1
        return ReadTicket(uri, partition, state.generation, self.heard.count, copies.invalidated)

    def is_current(self, ticket: ReadTicket) -> bool:
        """Whether no invalidation has landed since ``ticket``'s read was sent.

        An eviction is not an invalidation: a reply the store dropped at once (too
        large, or a store smaller than the step) loses its URI's record, and that
        record may be made again (a new generation) before the caller wakes. Then,
        unable to tell from the record, the answer is "current" only if nothing at
        all was invalidated or heard of since the ticket (invariants 1, 8).
        """
        state = self.copies.records.get(ticket.uri)
        if state is not None and state.generation == ticket.generation:
            return True
        return (
            ticket.invalidations == self.copies.invalidated
            and ticket.changes_heard == self.heard.count
        )

    def changed_since(self, ticket: ReadTicket) -> bool:
        """Whether ``ticket``'s URI itself was invalidated since its read was sent (its
        record's generation moved): a re-read a change asked for, not an eviction's."""
        state = self.copies.records.get(ticket.uri)
        return state is not None and state.generation > ticket.generation

    def finish_read(
        self, ticket: ReadTicket, reply: ReadReply | RequestFailed
    ) -> ReadResult | None:
        """Judge a reply. ``None`` means an invalidation overtook the read: read again.
        (The general rules; the common reply takes the speed path first, `Rereads.reply`.)"""
        uri, partition = ticket.uri, ticket.partition
        if isinstance(reply, ReadReply) and reply.shared_copy and self.denied(uri, partition):
            # Defence in depth (the fleet asks `may_share` before it hands one over): a
            # shared copy never ends a denial.
            reply = RequestFailed("denied", "refused before; a shared copy is not its own read")
        copies, counters = self.copies, self.counters
        state = copies.records.of(uri)
        state.read_done()
        result: ReadResult | None
        try:
            if isinstance(reply, RequestFailed):
                result = self._failed(ticket, state, reply)
            elif ticket.generation != state.generation:
                counters.superseded_replies += 1
                result = None
            elif not reply.from_server and (reply.from_server is False or self.heard.changed(uri)):
                # A local copy proves nothing about the server (invariant 1, seed 3); nor
                # does an answer of unknown origin after a change of it.
                counters.local_copy_replies += 1
                result = problem_result(uri, AWAITING_FRESH_SOURCE, "local_copy_only")
                result = copies.problem(state, partition, result)
            else:
                if reply.from_server:
                    self.heard.proved(uri, ticket.changes_heard)
                result = copies.keep(uri, partition, state, reply)
        finally:
            # Kept a while even when idle: waiters of this reply ask `is_current`
            # after it, and a hint for the URI must still find its record.
            copies.records.forget_if_idle(uri, state, keep_a_while=True)
        if isinstance(reply, RequestFailed):
            if reply.kind == "denied":
                self.denials.note(uri, partition)
        elif result is not None and result.state == FRESH:
            if reply.shared_copy:
                result = served_copy(result, server_read=False)  # another's read, not this call's
                counters.server_reads -= 1  # counted when it began: it never went out
                counters.store_hits += 1
            elif self.denials:
                self.denials.cleared(uri, partition)  # its own read succeeded
        if copies.unusable is not None and result is not None and result.state == FRESH:
            for table in copies.rows.tables.values():
                table.clear()
            detail = copies.unusable
            return problem_result(uri, AWAITING_FRESH_SOURCE, "server_error", detail=detail)
        return result

    def _failed(self, ticket: ReadTicket, state: UriRecord, failure: RequestFailed) -> ReadResult:
        uri, partition = ticket.uri, ticket.partition
        detail = failure.detail or None
        copies = self.copies
        if failure.kind == "denied":
            # Do not cite it to this principal; drop that principal's copy (DESIGN §1).
            copies.drop_entry(uri, partition, state)
            result = problem_result(
                uri, DENIED, "denied", server_read=True, detail=detail,
                remediation=failure.remediation,
            )  # fmt: skip
        elif failure.kind == "not_found":
            copies.drop_entry(uri, partition, state)
            result = problem_result(uri, NOT_FOUND, "not_found", server_read=True, detail=detail)
        else:  # timeout, unreachable, server_error
            result = problem_result(
                uri, AWAITING_FRESH_SOURCE, failure.kind, server_read=True, detail=detail
            )
        # A failure makes nothing fresher; it still masks a TTL-valid entry of the
        # same generation, because read-before-use failed for it.
        copies.rows.pop(uri, partition)
        if ticket.generation == state.generation:
            state.set_problem(partition, result)
        return copies.maybe_stale(result, partition)

    def abandon_read(self, ticket: ReadTicket) -> None:
        """The read sent under ``ticket`` will never be judged (it was cancelled)."""
        state = self.copies.records.get(ticket.uri)
        if state is not None:
            state.read_done()
            self.copies.records.forget_if_idle(ticket.uri, state)

    def note_timeout(self, uri: str, partition: Partition) -> ReadResult:
        """The caller's deadline passed while the read goes on in the background."""
        copies = self.copies
        state = copies.records.of(uri)
        result = problem_result(
            uri, AWAITING_FRESH_SOURCE, "timeout", server_read=True,
            detail="the server read did not answer before the deadline",
        )  # fmt: skip
        result = copies.maybe_stale(copies.problem(state, partition, result), partition)
        copies.records.forget_if_idle(uri, state)
        return result

    def denied(self, uri: str, partition: Partition) -> bool:
        """Whether the latest own server read of ``uri`` by ``partition`` was refused."""
        return (uri, partition) in self.denials

    def may_share(
        self,
        uri: str,
        partition: Partition,
        scope: str,
        *,
        bound: bool = False,
        denied_elsewhere: bool = False,
    ) -> bool:
        """Whether a copy that is not ``partition``'s own read may serve it: the shared
        public copy (``scope`` ``public``), or an entry found in a shared store under
        ``partition``'s key (``scope`` ``private``: only if ``bound`` to that principal
        and scope, a keyed check the store made). Never while a denial of ``partition``
        for ``uri`` stands, here (`Denials`) or anywhere in the fleet
        (``denied_elsewhere``): only that principal's own successful read ends it."""
        if self.copies.unusable is not None or denied_elsewhere:
            return False
        if partition != PUBLIC and (uri, partition) in self.denials:
            return False
        elsewhere = self.denied_elsewhere
        if elsewhere is not None and partition != PUBLIC and elsewhere(uri, partition):
            return False
        if scope == "public":
            return self.policy.share_public
        return bound


__all__ = ["ReadRules"]
