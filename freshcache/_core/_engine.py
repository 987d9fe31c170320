"""The freshness engine: this module owns every transition rule (DESIGN §2, §5).

Sans-IO. Facts come in (`handle` for stream events, `handle_hint` for hints an
answer carried, `finish_read`/`finish_list` for replies, `select`), decisions come
out (`ReadResource`, `Relist`, `Relisten`). The engine never sleeps, never touches a
socket and reads time only from the injected clocks. Its bookkeeping lives beside
it (`UriRecords`, `Coverage`, `HitTables`, `ListPages`, `ChangesHeard`); the rules
live here.

The one promise: the text handed out is never older than the newest change heard
of. The mechanism is a *generation* per URI, counted by its record; a record made
again starts above every generation a dropped one had (so a URI's generation never
restarts, even when its record is dropped: invariant 10). Every invalidation
gives the URI a new generation before anything else; a read records the generation
when it is *sent* (`begin_read`); a reply that lands under a newer one is discarded,
never stored as fresh (invariant 1).

What a URI is, for one partition (what `status` reports):

============  ====================================================  =================
condition     meaning                                               status
============  ====================================================  =================
unknown       no record: never read, or forgotten (nothing held)    awaiting, not_cached
fresh         an entry at the current generation, in the hit        fresh
              table: within ``ttlMs`` (or subscription-backed)
uncovered     selected, entry current, but no live acknowledged     awaiting, uncovered
              stream covers it: read before each use (inv. 5)
expired       entry current but its ``ttlMs`` window has passed     awaiting, expired
invalidated   no entry at the current generation (a hint, a loss,   awaiting, the reason
              an acknowledgment that newly covers it, a list        of the invalidation
              it left)
failed        the latest read at this generation failed             denied / not_found /
                                                                    awaiting (its kind)
============  ====================================================  =================

Transitions (every row bumps the generation first where it invalidates):

=====================================  =========================================
event                                  what follows
=====================================  =========================================
read sent (`begin_read`)               nothing changes; the ticket keeps the
                                       generation and the changes-heard count
reply at the current generation        fresh (stored, indexed unless uncovered)
reply under an older generation        discarded; the caller reads again
reply from a local copy, or of         failed (``local_copy_only``)
unknown origin after a change heard
failure at the current generation      failed; denied/not_found drop the copy
``resources/updated`` (any envelope,   invalidated (``invalidated``); selected:
on any stream or answer)               re-read
``resources/updated`` with a pushed    invalidated and filled at the new
body, opted in, on the acknowledged    generation, in one decision: fresh with
stream that covers the URI             no server read (`_pushed_body`)
stream lost                            what it covered: invalidated
                                       (``stream_lost``); re-listen
acknowledgment                         what it newly covers (no other live stream
                                       covered it): invalidated, re-read; what it
                                       omits stays uncovered (inv. 4, 5)
coverage ends (close, swap, cancel)    fresh -> uncovered for selected URIs
selected / deselected                  re-judged; a new URI waits for the ack
TTL passes                             fresh -> expired (by the clock, no event)
evicted by the store                   -> unknown unless selected or reading
=====================================  =========================================

Costs (DESIGN §6): a notification touches the URIs it names, found by exact match
and by the URI's own prefixes (the sub-resource rule), never by scanning the
selection; coverage and the selection are counts and sets, never rebuilt per call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import cast

from typing_extensions import assert_never

from ._catalogs import (
    CATALOG_KINDS,
    Catalog,
    CatalogBook,
    CatalogKind,
    CatalogWalk,
    ListKind,
    SharedWalk,
)
from ._counters import Tally
from ._coverage import Coverage
from ._denials import Denials
from ._entries import PUBLIC, Entry, EntryKey, ObjectStore, Partition, Store
from ._events import (
    CatalogListChanged,
    ChangesMissed,
    Decision,
    ListenAcknowledged,
    ListenStarted,
    ListenUnsupported,
    ListReply,
    ReadReply,
    ReadResource,
    Relist,
    Relisten,
    RequestFailed,
    ResourceListChanged,
    ResourceUpdated,
    StreamClosed,
    StreamEvent,
    StreamLost,
    UntrustedMessage,
)
from ._heard import MAX_REMEMBERED, ChangesHeard
from ._hits import HitTable, HitTables
from ._lists import LIST, ListPages, ListTicket
from ._model import (
    AWAITING_FRESH_SOURCE,
    DENIED,
    FRESH,
    NOT_FOUND,
    STALE,
    STALE_REASONS,
    ReadResult,
    Reason,
    ResourceContents,
    fresh_result,
    fresh_results,
    labelled_stale,
    problem_result,
    served_copy,
)
from ._policy import Policy
from ._records import (
    _ENTRY_FLAGS,
    _READ,
    HINTLESS,
    PUSHED,
    SELECTED,
    UriRecord,
    UriRecords,
    size_of,
)
from ._sharing import catalog_subject
from ._slots import filled_by_slots

READ = "resources/read"
_INF = float("inf")
_WINDOWS = 64
_SAME_FETCH = 0.001
"""Replies within a millisecond of each other share one ``fetched_at`` (seconds)."""

HeldEntry = Entry | UriRecord
"""A read entry: an `Entry` from the store, or the URI's record holding its entry of
the default partition (with an `ObjectStore`: see `_records`)."""


def _generation_of(entry: HeldEntry) -> int:
    """The generation ``entry`` was stored at (`Entry.generation`)."""
    return entry.held_generation if entry.__class__ is UriRecord else entry.generation

SubscriptionId = str | int


@filled_by_slots
@dataclass(frozen=True, slots=True)
class ReadTicket:
    """Handed out when a server read is sent; the reply is judged against it."""

    uri: str
    partition: Partition
    generation: int
    changes_heard: int = 0
    """`ChangesHeard.count` when the read was sent (the "cannot tell" rule)."""
    invalidations: int = 0
    """URI invalidations of the engine when the read was sent (`is_current`)."""


@filled_by_slots
@dataclass(frozen=True, slots=True)
class Invalidation:
    """A record of one invalidation, for telemetry and tests."""

    uri: str
    cause: str
    subscription_id: SubscriptionId | None
    trusted: bool


@dataclass(slots=True)
class Counters(Tally):
    """Running totals, for status output, telemetry and tests."""

    server_reads: int = 0
    """Reads sent to the server (a read a fleet answered from its store is not one)."""
    store_hits: int = 0
    """Reads a fleet answered with a copy from its shared store, no server read."""
    local_copy_replies: int = 0
    superseded_replies: int = 0
    notifications: int = 0
    untrusted_messages: int = 0
    invalidations: int = 0
    stream_losses: int = 0
    acknowledgments: int = 0
    list_requests: int = 0
    pushed_bodies: int = 0
    """Pushed bodies that made a URI fresh without a server read."""
    pushed_bodies_refused: int = 0
    """Pushed bodies that only invalidated (not asked for, untrusted, wrong stream ...)."""


StreamStatus = str  # "idle" | "opening" | "live" | "closed" | "lost" | "unsupported"


class _Bookkeeping:
    """State shared by the rules below: records, coverage, hit tables, lists."""

    _unusable: str | None = None
    """Why the server cannot be used (`_Judgements.server_unusable`); no row after it."""

    def __init__(
        self,
        *,
        store: Store,
        policy: Policy | None = None,
        server_id: str = "server",
        default_partition: Partition = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        on_invalidation: Callable[[Invalidation], None] | None = None,
    ) -> None:
        self.policy = policy if policy is not None else Policy()
        self.server_id = server_id
        self.default_partition = default_partition
        self.clock = clock
        self.wall_clock = wall_clock
        self.counters = Counters()
        self._hits = HitTables()
        self.hit_tables = self._hits.tables
        """Partition -> its hit table (see `HitTables`)."""
        self.hits: HitTable = self._hits.table(default_partition)
        """The default partition's hit table: bare URI -> its row (see `Hit`)."""
        self._store = store
        self._objects: ObjectStore | None = (
            cast(ObjectStore, store) if getattr(store, "keeps_objects", False) is True else None
        )
        """The store, if it keeps records as entries (`ObjectStore`); else ``None``."""
        if self._objects is not None:
            self._objects.claim(self, self._evicted_held)  # this engine's alone
        else:
            self._store.set_eviction_listener(self._evicted)
        self._windows: dict[float, float] = {}
        """One float object per distinct freshness window held (`UriRecord.ttl`):
        servers send few distinct ``ttlMs``; cleared past `_WINDOWS` of them."""
        self._ms_windows: dict[float | None, float] = {}
        """``ttlMs`` -> its window (`Policy.ttl_seconds`, the float of `_windows`) for a
        reply that is neither hintless nor multi-round-trip; cleared with `_windows`."""
        self._fetched_at = -_INF
        """The last reply's wall-clock reading, handed on to replies within
        `_SAME_FETCH` after it (`_fetched_at_now`)."""
        self._burst = (-_INF, -1.0, 0.0)
        """The last stored reply's clock reading, window and deadline: a burst of
        replies with one freshness window shares one deadline float, the first one's
        (24 B per cached record otherwise), as they share ``fetched_at``. It is never
        later than a reply's own ``now + ttl``: an entry goes stale under a millisecond
        early, never late, and its age (derived from it) is overstated by as much."""
        self._uris = UriRecords(None if self._objects is None else self._objects.held)
        self._invalidations = 0
        """URI invalidations so far (never reset, unlike `counters`): `is_current`."""
        self.heard = ChangesHeard()
        """Changes heard of, for answers of unknown origin (`ReadReply.from_server` None)."""
        self._selected: set[str] = set()
        self._subs = Coverage()
        self._stream_status: StreamStatus = "idle"
        self._listen_supported: bool | None = None
        self._lists_wanted = False
        """A catalog was asked for: the listen is wanted for the lists' changes."""
        self._lists = ListPages(store, server_id, self.policy)
        self.catalogs = CatalogBook(
            store, server_id, self.policy, clock, wall_clock, default_partition
        )
        """Tools, prompts and resource templates (`_catalogs`)."""
        self._on_invalidation = on_invalidation
        self._denials = Denials()
        """Principals refused per URI, until their own read succeeds (`_Judgements`)."""

    # ------------------------------------------------------------------ internals

    def _named_by(self, uri: str) -> list[str]:
        """URIs a ``resources/updated`` for ``uri`` invalidates.

        The URI itself, and, when the notification names a sub-resource of a URI we
        subscribed to (the schema allows that), the subscribed parent too: a hint may
        only make content less fresh. Parents are found among ``uri``'s own prefixes,
        so the cost does not grow with the selection.
        """
        named = [uri] if uri in self._uris else []
        for parent in self._subs.parents_asked_for(uri):
            self.heard.note(parent)
            if parent in self._uris:
                named.append(parent)
        return named

    def _fetched_at_now(self) -> float:
        """The wall clock for a reply's ``fetched_at``: a burst of replies (a warm-up,
        the re-reads after a change) shares one float object, the reading of the first
        reply, for `_SAME_FETCH` after it (24 B per cached result otherwise). So a
        result's ``fetched_at`` is never later than its reply: its age is overstated by
        under a millisecond, never understated. A clock set back is read as it is."""
        now = self.wall_clock()
        last = self._fetched_at
        if 0.0 <= now - last < _SAME_FETCH:
            return last
        self._fetched_at = now
        return now

    def _held(self, uri: str, partition: Partition) -> HeldEntry | None:
        """``uri``'s entry in ``partition`` (touched in the store's use order), or ``None``."""
        objects = self._objects
        if objects is not None and partition == self.default_partition:
            return cast(UriRecord | None, objects.get_object(uri))  # the record itself
        return self._store.get((self.server_id, READ, uri, partition))

    def _entry(self, uri: str, partition: Partition) -> HeldEntry | None:
        entry = self._held(uri, partition)
        if entry is None and self.policy.share_public:
            entry = self._held(uri, PUBLIC)
        return entry

    def _has_current_entry(self, uri: str, state: UriRecord) -> bool:
        for part in state.partitions:
            entry = self._held(uri, part)
            if entry is not None and _generation_of(entry) == state.generation:
                return True
        return False

    def _reason_now(self, uri: str, state: UriRecord) -> Reason:
        """Why ``uri`` is not fresh after a new invalidation: a copy we held is now
        ``invalidated``; one already invalid keeps the reason it had."""
        return "invalidated" if self._has_current_entry(uri, state) else state.invalid_reason

    def _uncovered_strict(self, uri: str, state: UriRecord) -> bool:
        return (
            state.selected
            and self.policy.uncovered == "read_before_use"
            and not self._subs.covers(uri)
        )

    def _invalidate(
        self,
        uri: str,
        reason: Reason,
        cause: str,
        subscription_id: SubscriptionId | None,
        trusted: bool,
    ) -> UriRecord:
        state = self._uris.of(uri)
        state.new_generation(reason)  # first: any read in flight is outdated
        self._unindex(uri, state)
        self._invalidations += 1
        self.counters.invalidations += 1
        if self._on_invalidation is not None:
            self._on_invalidation(Invalidation(uri, cause, subscription_id, trusted))
        return state

    def _index(self, uri: str, partition: Partition, state: UriRecord, entry: HeldEntry) -> None:
        result = entry.value
        assert isinstance(result, ReadResult)
        if self._unusable is not None:
            return
        covered = self._subs.covers(uri)  # (`_uncovered_strict`, asked once)
        policy = self.policy
        if state.selected and not covered and policy.uncovered == "read_before_use":
            return
        if (
            covered
            and state.selected
            and (policy.subscription_backed or entry.hintless or entry.pushed)
        ):
            # Fresh until notified: 2025 reads have no TTL, the subscription vouches.
            self._hits.put(uri, partition, result)  # no time bound: no clock on a hit
        else:
            self._hits.put(uri, partition, entry)  # fresh until entry.expires_at
            # (with an `ObjectStore`, that row is the record itself: no object of its own)

    def _unindex(self, uri: str, state: UriRecord) -> None:
        for part in state.partitions:
            self._hits.pop(uri, part)

    def _reindex(self, uri: str, state: UriRecord) -> None:
        """Coverage or selection of ``uri`` changed: recompute its hit-table rows."""
        self._unindex(uri, state)
        for part in state.partitions:
            entry = self._held(uri, part)
            if entry is not None and _generation_of(entry) == state.generation:
                problem = state.problem(part)
                if problem is None or problem[0] != state.generation:
                    self._index(uri, part, state, entry)

    def _drop_entry(self, uri: str, partition: Partition, state: UriRecord) -> None:
        self._hits.pop(uri, partition)
        state.drop_partition(partition)
        objects = self._objects
        if objects is not None and partition == self.default_partition:
            if state.value is not None:
                objects.discard_object(uri)  # (its size is counted from the value: first)
                state.let_go()
                self._uris.returned(uri, state)
        else:
            self._store.discard((self.server_id, READ, uri, partition))

    def _evicted_held(self, key: EntryKey | str, held: object) -> None:
        """The `ObjectStore`'s eviction listener: it hands over what it dropped."""
        if not isinstance(key, str):
            self._evicted(key)
            return
        uri = key  # a record held as its URI's entry: back among the records
        assert isinstance(held, UriRecord)
        self._hits.pop(uri, self.default_partition)
        held.let_go()
        held.drop_partition(self.default_partition)
        self._uris.returned(uri, held)
        self._uris.forget_if_idle(uri, held)

    def _evicted(self, key: EntryKey) -> None:
        _, method, param, partition = key
        if method == LIST:
            self._lists.evicted(key)
            return
        if method != READ:
            self.catalogs.evicted(key)
            return
        self._hits.pop(param, partition)
        state = self._uris.get(param)
        if state is not None:
            state.drop_partition(partition)
            self._uris.forget_if_idle(param, state)


class _ReadRules(_Bookkeeping):
    """What a read, a reply and a list page do (invariants 1, 3, 6, 8)."""

    # ------------------------------------------------------------------ queries

    @property
    def selected(self) -> frozenset[str]:
        """URIs the agent relies on."""
        return frozenset(self._selected)

    @property
    def covered(self) -> frozenset[str]:
        """URIs a live, acknowledged subscription covers now."""
        return self._subs.covered

    def is_covered(self, uri: str) -> bool:
        """Whether a live, acknowledged subscription covers ``uri`` now."""
        return self._subs.covers(uri)

    def waits_for_ack(self, uri: str, partition: Partition) -> bool:
        """Whether a caller's read of ``uri`` should wait for the acknowledgment of a
        stream that is still opening for it, instead of being sent now.

        That ack reads every selected URI of the default partition it newly covers, or
        leaves uncovered with no copy (`_acknowledged`), and only a read sent after it
        makes ``uri`` subscription-backed fresh (invariant 4): a read sent before it
        would be sent again. Waiting makes the ack's read the caller's, one read per
        selected URI at start (DESIGN §8). Which stream is opening is the supervisor's
        (`ListenSupervisor.awaits_ack`)."""
        return (
            partition == self.default_partition
            and uri in self._selected
            and self._listen_supported is not False
            and not self._subs.covers(uri)
        )

    @property
    def tracked_uris(self) -> int:
        """Per-URI records held now (bounded: invariant 10)."""
        return len(self._uris)

    @property
    def stream_status(self) -> StreamStatus:
        """``idle``, ``opening``, ``live``, ``closed``, ``lost`` or ``unsupported``."""
        return self._stream_status

    @property
    def listen_supported(self) -> bool | None:
        """``False`` once the server showed it has no ``subscriptions/listen``."""
        return self._listen_supported

    def hits_for(self, partition: Partition) -> HitTable:
        """The hit table of ``partition`` (made on first use; never replaced)."""
        return self._hits.table(partition)

    def lookup(self, uri: str, partition: Partition) -> ReadResult | None:
        """A fresh result from the cache, or ``None`` when a server read is needed."""
        now = self.clock()
        fresh = self._hits.fresh(uri, partition, now)
        if fresh is None and self.policy.share_public and partition != PUBLIC:
            state = self._uris.get(uri)
            if state is not None and state.problem(partition) is None:
                fresh = self._hits.fresh(uri, PUBLIC, now)
        return fresh

    def status(self, uri: str, partition: Partition = None) -> ReadResult:
        """What a read would hand out right now, without any I/O."""
        fresh = self.lookup(uri, partition)
        if fresh is not None:
            return fresh
        state = self._uris.get(uri)
        if state is None:
            return problem_result(uri, AWAITING_FRESH_SOURCE, "not_cached")
        problem = state.problem(partition)
        if problem is not None and problem[0] == state.generation:
            return self._maybe_stale(problem[1], partition)
        entry = self._entry(uri, partition)
        if entry is not None and _generation_of(entry) == state.generation:
            if self._uncovered_strict(uri, state):
                return problem_result(uri, AWAITING_FRESH_SOURCE, "uncovered")
            return problem_result(uri, AWAITING_FRESH_SOURCE, "expired")
        return problem_result(uri, AWAITING_FRESH_SOURCE, state.invalid_reason)

    # ------------------------------------------------------------------ reads

    def begin_read(self, uri: str, partition: Partition) -> ReadTicket:
        """Note that a server read of ``uri`` is being sent now."""
        state = self._uris.of(uri)
        state.flags += _READ  # (`UriRecord.reads_in_flight` += 1)
        self.counters.server_reads += 1
        return ReadTicket(
            uri, partition, state.generation, self.heard.count, self._invalidations
        )

    def is_current(self, ticket: ReadTicket) -> bool:
        """Whether no invalidation has landed since ``ticket``'s read was sent.

        An eviction is not an invalidation: a reply the store dropped at once (too
        large, or a store smaller than the step) loses its URI's record, and that
        record may be made again (a new generation) before the caller wakes. Then,
        unable to tell from the record, the answer is "current" only if nothing at
        all was invalidated or heard of since the ticket (invariants 1, 8).
        """
        state = self._uris.get(ticket.uri)
        if state is not None and state.generation == ticket.generation:
            return True
        return (
            ticket.invalidations == self._invalidations
            and ticket.changes_heard == self.heard.count
        )

    def changed_since(self, ticket: ReadTicket) -> bool:
        """Whether ``ticket``'s URI itself was invalidated since its read was sent (its
        record's generation moved): a re-read a change asked for, not an eviction's."""
        state = self._uris.get(ticket.uri)
        return state is not None and state.generation > ticket.generation

    def finish_read(
        self, ticket: ReadTicket, reply: ReadReply | RequestFailed
    ) -> ReadResult | None:
        """Judge a reply. ``None`` means an invalidation overtook the read: read again."""
        uri, partition = ticket.uri, ticket.partition
        state = self._uris.of(uri)
        if state.reads_in_flight > 0:
            state.reads_in_flight -= 1
        try:
            if isinstance(reply, ReadReply):
                if ticket.generation != state.generation:
                    self.counters.superseded_replies += 1
                    return None
                if reply.from_server:
                    self.heard.proved(uri, ticket.changes_heard)
                elif reply.from_server is False or self.heard.changed(uri):
                    # A local copy proves nothing about the server (invariant 1, seed
                    # 3); nor does an answer of unknown origin after a change of it.
                    self.counters.local_copy_replies += 1
                    return self._record_problem(
                        state,
                        partition,
                        problem_result(uri, AWAITING_FRESH_SOURCE, "local_copy_only"),
                    )
                return self._store_reply(ticket, state, reply)
            if isinstance(reply, RequestFailed):
                return self._record_failure(ticket, state, reply)
            assert_never(reply)
        finally:
            # Kept a while even when idle: waiters of this reply ask `is_current`
            # after it, and a hint for the URI must still find its record.
            self._uris.forget_if_idle(uri, state, keep_a_while=True)

    def abandon_read(self, ticket: ReadTicket) -> None:
        """The read sent under ``ticket`` will never be judged (it was cancelled)."""
        state = self._uris.get(ticket.uri)
        if state is not None:
            state.reads_in_flight = max(0, state.reads_in_flight - 1)
            self._uris.forget_if_idle(ticket.uri, state)

    def note_timeout(self, uri: str, partition: Partition) -> ReadResult:
        """The caller's deadline passed while the read goes on in the background."""
        state = self._uris.of(uri)
        result = problem_result(
            uri,
            AWAITING_FRESH_SOURCE,
            "timeout",
            server_read=True,
            detail="the server read did not answer before the deadline",
        )
        result = self._maybe_stale(self._record_problem(state, partition, result), partition)
        self._uris.forget_if_idle(uri, state)
        return result

    def _store_reply(
        self, ticket: ReadTicket, state: UriRecord, reply: ReadReply, *, pushed: bool = False
    ) -> ReadResult:
        uri, partition = ticket.uri, ticket.partition
        now = self.clock()
        fetched_at = self._fetched_at_now()
        contents = reply.contents
        # The cached result and what this call hands out (it says a server read
        # happened) share the joined text; each digests its version on first use.
        cached = fresh_result(uri, contents, fetched_at=fetched_at, server_read=False)
        handed = fresh_result(
            uri, contents, fetched_at=fetched_at, server_read=True, text=cached.text
        )
        state.answered(partition)  # no failure; "not_cached" if this entry is evicted
        if reply.multi_round_trip:
            return handed  # spec: results of multi-round-trip retries are never cached
        policy = self.policy
        scope = reply.cache_scope or "private"
        stored_partition = PUBLIC if scope == "public" and policy.share_public else partition
        ttl = policy.ttl_seconds(reply.ttl_ms)
        if reply.hintless and not state.selected:
            ttl = min(policy.hintless_ttl, policy.max_ttl)  # the caller's opt-in
        if len(self._windows) > _WINDOWS:
            self._windows.clear()
            self._ms_windows.clear()
        for other in (partition, PUBLIC):
            if other != stored_partition and other in state.partitions:
                self._drop_entry(uri, other, state)
        objects = self._objects
        if objects is not None and stored_partition == self.default_partition:
            # The record itself becomes the entry (and the time-bounded row): no row
            # while it changes, and the old value's bytes leave the store first.
            self._hits.pop(uri, stored_partition)
            if state.value is not None:
                objects.discard_object(uri)  # (still the URI's record: see `UriRecords`)
            else:
                self._uris.leaving(uri)  # the store keeps it now (or hands it back)
            flags = (HINTLESS if reply.hintless else 0) | (PUSHED if pushed else 0)
            window = self._windows.setdefault(ttl, ttl)
            received, burst_window, expires_at = self._burst  # (see `_burst`)
            if burst_window != window or not 0.0 <= now - received < _SAME_FETCH:
                expires_at = now + window
                self._burst = (now, window, expires_at)
            state.hold(cached, expires_at, window, flags)
            state.add_partition(stored_partition)
            objects.put_object(uri, state)
            if stored_partition in state.partitions:  # not evicted at once by the bounds
                self._index(uri, stored_partition, state, state)
            return handed
        entry = Entry(
            value=cached,
            generation=state.generation,
            received_at=now,
            expires_at=now + ttl,
            scope=scope,
            size=size_of(uri, contents),
            hintless=reply.hintless,
            pushed=pushed,
        )
        key: EntryKey = (self.server_id, READ, uri, stored_partition)
        state.add_partition(stored_partition)
        self._store.put(key, entry)
        if stored_partition in state.partitions:  # not evicted at once by the store's bounds
            self._index(uri, stored_partition, state, entry)
        return handed

    def _record_failure(
        self, ticket: ReadTicket, state: UriRecord, failure: RequestFailed
    ) -> ReadResult:
        uri, partition = ticket.uri, ticket.partition
        detail = failure.detail or None
        match failure.kind:
            case "denied":
                # Do not cite it to this principal; drop that principal's copy (DESIGN §1).
                self._drop_entry(uri, partition, state)
                result = problem_result(
                    uri,
                    DENIED,
                    "denied",
                    server_read=True,
                    detail=detail,
                    remediation=failure.remediation,
                )
            case "not_found":
                self._drop_entry(uri, partition, state)
                result = problem_result(
                    uri, NOT_FOUND, "not_found", server_read=True, detail=detail
                )
            case "timeout" | "unreachable" | "server_error":
                result = problem_result(
                    uri, AWAITING_FRESH_SOURCE, failure.kind, server_read=True, detail=detail
                )
            case _:
                assert_never(failure.kind)
        # A failure makes nothing fresher; it still masks a TTL-valid entry of the
        # same generation, because read-before-use failed for it.
        self._hits.pop(uri, partition)
        if ticket.generation == state.generation:
            state.set_problem(partition, result)
        return self._maybe_stale(result, partition)

    def _record_problem(
        self, state: UriRecord, partition: Partition, result: ReadResult
    ) -> ReadResult:
        self._hits.pop(result.uri, partition)
        state.set_problem(partition, result)
        return result

    def _maybe_stale(self, result: ReadResult, partition: Partition) -> ReadResult:
        """Serve-stale-on-error, only where the policy opted in for this URI."""
        if result.state != AWAITING_FRESH_SOURCE or result.reason not in STALE_REASONS:
            return result
        if not self.policy.allows_stale(result.uri):
            return result
        entry = self._entry(result.uri, partition)
        if entry is None or not isinstance(entry.value, ReadResult):
            return result
        # The old content and version, marked stale, with why the fresh read failed.
        return labelled_stale(entry.value, result, entry.received_at, self.clock())

    # ------------------------------------------------------------------ lists

    def lookup_list_page(self, cursor: str | None, partition: Partition) -> ListReply | None:
        """A fresh cached list page, or ``None``."""
        return self._lists.lookup(cursor, partition, self.clock())

    def begin_list(self, cursor: str | None, partition: Partition) -> ListTicket:
        """Note that a list page request is being sent now."""
        self.counters.list_requests += 1
        return self._lists.begin(cursor, partition)

    def finish_list(
        self, ticket: ListTicket, reply: ListReply | RequestFailed
    ) -> ListReply | RequestFailed | None:
        """Judge a list page reply (see `ListPages.finish`); ``None``: list again from
        the first page (a list change overtook it, or the cursor was refused)."""
        judged = self._lists.finish(ticket, reply, self.clock())
        if judged is None and isinstance(reply, ListReply):
            self.counters.superseded_replies += 1
        return judged

    def page_window(self, cursor: str | None, partition: Partition) -> tuple[float, bool] | None:
        """How long the held page at ``cursor`` is fresh, and whether it is private."""
        return self._lists.window(cursor, partition)

    def list_complete(self, listed: Iterable[str], partition: Partition) -> list[Decision]:
        """A full re-list finished: selected URIs that left it are checked by a direct read."""
        present = set(listed)
        decisions: list[Decision] = []
        for uri in sorted(self._selected - present):
            # Invariant 3: the list alone does not decide; a direct read does.
            self._invalidate(uri, "invalidated", "left_list", None, True)
            decisions.append(ReadResource(uri, partition, "left_list"))
        return decisions


class _Judgements(_ReadRules):
    """Decisions other modules used to make on their own (DESIGN §2 invariants 12, 13).

    Kept apart from the transition rules above: whether the server can be used at all,
    whether a shared copy may serve a principal, whether a snapshot is still true. The
    middleware, the fleet and `context()` ask these and carry out the answer.
    """

    denied_elsewhere: Callable[[str, Partition], bool] | None = None
    """Set by a fleet (a `Standing`): whether a copy that is not ``partition``'s own
    read of a URI (or of a catalog: `catalog_subject`) must not serve it on this
    worker: refused here or on another worker since, or never read by it here."""

    # ------------------------------------------------------------------ an unusable server

    @property
    def unusable(self) -> str | None:
        """Why the server cannot be used (no protocol version in common ...), else ``None``."""
        return self._unusable

    def server_unusable(self, detail: str) -> None:
        """Discovery (or any request) showed the server cannot be used: from now on
        nothing is fresh, whatever replies land (no fresh read after the error)."""
        self._unusable = detail or "the server cannot be used"
        for table in self.hit_tables.values():
            table.clear()
        self.catalogs.unusable = True  # no row is built again (a coverage change)
        for rows in self.catalogs.rows.values():
            rows.clear()

    def lookup(self, uri: str, partition: Partition) -> ReadResult | None:
        if self._unusable is not None:
            return None
        if partition != PUBLIC and not self.may_share(uri, partition, "public"):
            elsewhere = self.denied_elsewhere
            if elsewhere is not None and elsewhere(uri, partition):
                # Refused on another worker since (a fleet-wide denial): not even a copy
                # of its own from before; only its own next successful read ends it.
                return None
            return self._hits.fresh(uri, partition, self.clock())  # its own copy only
        return super().lookup(uri, partition)

    def changed_since(self, ticket: ReadTicket) -> bool:
        """Whether ``ticket``'s URI itself was invalidated since its read was sent (its
        record's generation moved): a re-read a change asked for, not an eviction's."""
        state = self._uris.get(ticket.uri)
        return state is not None and state.generation > ticket.generation

    def finish_read(
        self, ticket: ReadTicket, reply: ReadReply | RequestFailed
    ) -> ReadResult | None:
        uri, partition = ticket.uri, ticket.partition
        if isinstance(reply, ReadReply) and reply.shared_copy and self.denied(uri, partition):
            # Defence in depth (the fleet asks `may_share` before it hands one over): a
            # shared copy never ends a denial.
            reply = RequestFailed("denied", "refused before; a shared copy is not its own read")
        result = super().finish_read(ticket, reply)
        if isinstance(reply, RequestFailed) and reply.kind == "denied":
            self._denials.note(uri, partition)
        elif result is not None and result.state == FRESH and isinstance(reply, ReadReply):
            if reply.shared_copy:
                result = served_copy(result, server_read=False)  # another's read, not this call's
                self.counters.server_reads -= 1  # counted when it began: it never went out
                self.counters.store_hits += 1
            elif self._denials:
                self._denials.cleared(uri, partition)  # its own read succeeded
        if self._unusable is not None and result is not None and result.state == FRESH:
            for table in self.hit_tables.values():
                table.clear()
            return problem_result(uri, AWAITING_FRESH_SOURCE, "server_error", detail=self._unusable)
        return result

    # ------------------------------------------------------------------ catalogs

    def catalog_lookup(self, kind: CatalogKind, partition: Partition) -> Catalog | None:
        """The fresh catalog ``kind`` for ``partition``, or ``None``: walk it."""
        if self._unusable is not None:
            return None
        return self.catalogs.lookup(kind, partition)

    def catalog_status(self, kind: CatalogKind, partition: Partition) -> Catalog:
        """What `catalog_lookup` or a walk would hand out now, without any I/O."""
        if self._unusable is not None:
            return Catalog(kind, AWAITING_FRESH_SOURCE, "server_error", detail=self._unusable)
        return self.catalogs.status(kind, partition)

    def begin_catalog(self, kind: CatalogKind, partition: Partition) -> CatalogWalk:
        """A walk of ``kind`` to run now (its tickets count as list requests)."""
        return self.catalogs.begin(kind, partition)

    @property
    def lists_wanted(self) -> bool:
        """Whether a listen is wanted for the lists' changes whatever the selection
        (`ListenSupervisor.lists`): a catalog was asked for."""
        return self._lists_wanted

    def catalog_asked(self) -> list[Decision]:
        """A catalog is being walked: the first time, a listen is wanted for the
        catalogs' changes, so a cache used only for tools, prompts or templates (nothing
        selected) hears them too: the acknowledgment covers what it honoured, later
        calls are hits and a change arrives as an invalidation."""
        if self._lists_wanted or self._listen_supported is False:
            return []
        self._lists_wanted = True
        return [Relisten(frozenset(self._selected), "catalog_asked")]

    def settle_catalog(self, done: CatalogWalk) -> Catalog:
        """Judge a finished walk (see `CatalogBook.settle`)."""
        catalog = self.catalogs.settle(done)
        if self._unusable is not None and catalog.state in (FRESH, STALE):
            for rows in self.catalogs.rows.values():
                rows.clear()
            return Catalog(done.kind, AWAITING_FRESH_SOURCE, "server_error", detail=self._unusable)
        return catalog

    def list_changed_elsewhere(self, name: str) -> list[Decision]:
        """A list's change another worker of a fleet heard (``tools``, ``prompts``,
        ``resources``: templates change with it), on the fleet's channel: as a change
        hint here, but one the whole fleet knows of (its shared walks after it may
        stand in for this worker's own)."""
        self.counters.notifications += 1
        if name == "resources":
            return [
                *self._resource_list_changed("list_changed"),
                *self.invalidate_catalog("resource_templates", "list_changed", alone=False),
            ]
        for kind in CATALOG_KINDS:
            if kind == name:
                return self.invalidate_catalog(kind, "list_changed", alone=False)
        return []  # a list this version does not know: nothing of it is held

    def catalog_shared(self, done: CatalogWalk) -> bool:
        """Whether a fleet may hand ``done`` another worker's walk (`CatalogBook.shares`)."""
        return self._unusable is None and self.catalogs.shares(done)

    def catalog_heard_alone(self, done: CatalogWalk) -> int | None:
        """The mark of a change of ``done``'s catalog only this worker heard, which a
        fleet must publish before another worker's walk stands in for ``done``
        (`CatalogBook.heard_alone`)."""
        return None if self._unusable is not None else self.catalogs.heard_alone(done)

    def catalog_published(self, kind: CatalogKind, mark: int) -> None:
        """A fleet published change ``mark`` of ``kind`` (`CatalogBook.published_alone`)."""
        self.catalogs.published_alone(kind, mark)

    def adopt_catalog(self, done: CatalogWalk, shared: SharedWalk) -> Catalog | None:
        """Another worker's walk from the fleet's store: fresh, or ``None`` (walk it):
        never for a principal without standing here (`denied_elsewhere`), as for a
        resource's shared copy (`may_share`)."""
        elsewhere = self.denied_elsewhere
        if self._unusable is not None or (
            elsewhere is not None and elsewhere(catalog_subject(done.kind), done.partition)
        ):
            return None
        return self.catalogs.adopt(done, shared)

    def catalog_to_share(self, done: CatalogWalk) -> SharedWalk | None:
        """``done``'s settled catalog as the fleet may store it, else ``None``."""
        return None if self._unusable is not None else self.catalogs.to_share(done)

    def catalog_current(self, walk: CatalogWalk) -> bool:
        """Whether no change of the catalog landed since ``walk`` began (invariant 1)."""
        return self.list_current(walk.kind, walk.generation)

    def _resource_list_changed(self, cause: str) -> list[Decision]:
        """``resources/list`` changed (or may have): its pages go; it is re-listed in
        the background only when someone relies on it (a URI selected, a list walked),
        as a catalog is only when someone asked for it."""
        self._lists.invalidate()
        return [Relist(cause)] if self._selected or self._lists.asked else []

    def list_generation(self, kind: ListKind) -> int:
        """The generation of list ``kind`` (``resources`` or a catalog): what a walk
        that completes now is true under."""
        return (self._lists if kind == "resources" else self.catalogs.pages[kind]).generation

    def list_current(
        self, kind: ListKind, generation: int, closes_at: float = float("inf")
    ) -> bool:
        """Whether a walk of ``kind`` true under ``generation`` is still current: no
        change of the list landed since (invariant 1), the server still usable, and
        the walk's window (`ListWalk.closes_at`) still open, as at the walk's end."""
        return (
            self._unusable is None
            and generation == self.list_generation(kind)
            and self.clock() < closes_at
        )

    def invalidate_catalog(
        self, kind: CatalogKind, cause: str = "invalidated", *, alone: bool = True
    ) -> list[Decision]:
        """``kind`` may have changed (an "unknown tool" answer, a caller's word): not
        fresh until walked again; re-listed in the background if anyone asked for it.
        ``alone``: heard by this client only (not on a trusted stream, which a fleet's
        listener publishes first): no other worker's walk stands in for its own until
        a fleet publishes it (`catalog_published`)."""
        if self.catalogs.invalidate(kind, "invalidated", alone=alone):
            return [Relist(cause, kind)]
        return []

    # ------------------------------------------------------------------ sharing

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
        if self._unusable is not None or denied_elsewhere:
            return False
        if partition != PUBLIC and (uri, partition) in self._denials:
            return False
        elsewhere = self.denied_elsewhere
        if elsewhere is not None and partition != PUBLIC and elsewhere(uri, partition):
            return False
        if scope == "public":
            return self.policy.share_public
        return bound

    def denied_on_another_worker(self, uri: str, partition: Partition) -> None:
        """Another worker's read of ``uri`` for ``partition`` was refused (a fleet-wide
        denial heard): its hit row goes, so its next read asks `lookup`, which hands it
        nothing of this worker's either until its own read succeeds."""
        if partition == self.default_partition:
            self.hits.pop(uri, None)
        else:
            self._hits.pop(uri, partition)

    # ------------------------------------------------------------------ snapshots

    def snapshot_mark(self, uri: str) -> int | None:
        """``uri``'s generation now, taken the moment a read hands out its result: what
        `snapshot_changed` compares a snapshot's parts against (invariant 13)."""
        state = self._uris.get(uri)
        return None if state is None else state.generation

    def snapshot_changed(self, marks: Mapping[str, int | None]) -> list[str]:
        """The one generation check of a snapshot (a `Context`, ...): URIs among
        ``marks`` invalidated since their mark, i.e. whose text may not be handed out
        with the rest. Everything else is fresh at this moment, together."""
        return [uri for uri, mark in marks.items() if self.snapshot_mark(uri) != mark]

    # ------------------------------------------------------------------ bounded mirrors

    def remembers(self, uri: str) -> bool:
        """Whether the engine still keeps a record of ``uri`` (invariant 10): what mirrors
        its bookkeeping (the `changes()` feed) may keep too; the rest they drop."""
        return uri in self._uris

    def denied(self, uri: str, partition: Partition) -> bool:
        """Whether the latest own server read of ``uri`` by ``partition`` was refused."""
        return (uri, partition) in self._denials


class _Rereads(_Judgements):
    """The re-read path in fewer steps: a ``resources/updated`` of a URI with a record
    (`_updated`) and a server's reply to a read of the default partition
    (`finish_read`), each taken in one pass for the common case. They apply exactly
    the rules above, and hand every other case to them before changing anything
    (`tests/test_engine_quick.py` plays random steps through both and compares).
    Set ``quick`` false on an engine to take the rules above only."""

    quick = True

    def _updated(self, uri: str, subscription_id: SubscriptionId | None) -> list[Decision]:
        """`handle` of a ``resources/updated`` without a body that names no subscribed
        parent of ``uri`` (the caller checked): one lookup, one generation bump, at
        most one read decided."""
        counters = self.counters
        counters.notifications += 1
        # (`_trusted`: `Coverage.trusted`, read in place)
        sub = None if subscription_id is None else self._subs._subs.get(subscription_id)
        trusted = sub is not None and sub.acknowledged
        if not trusted:
            counters.untrusted_messages += 1
        heard = self.heard  # (`ChangesHeard.note`, in place)
        heard.count += 1
        heard._cleared.discard(uri)
        if not heard.everything:
            if len(heard._changed) < MAX_REMEMBERED:
                heard._changed.add(uri)
            else:
                heard.note_everything()  # bounded: fail closed rather than grow
        state = self._uris.get(uri)
        if state is None:
            return []
        # `_invalidate`: the generation first (any read in flight is outdated now).
        state.new_generation("invalidated")
        for part in state.partitions:
            if part == self.default_partition:
                self.hits.pop(uri, None)
            else:
                self._hits.pop(uri, part)
        self._invalidations += 1
        counters.invalidations += 1
        if self._on_invalidation is not None:
            self._on_invalidation(
                Invalidation(uri, "resources/updated", subscription_id, trusted)
            )
        if state.flags & SELECTED:
            return [ReadResource(uri, self.default_partition, "resources/updated")]
        return []

    def finish_read(
        self, ticket: ReadTicket, reply: ReadReply | RequestFailed
    ) -> ReadResult | None:
        """`_Judgements.finish_read`; in one pass for a reply from the server, at the
        URI's current generation, to a read of the default partition that the store
        keeps as the record itself (`_store_reply`), private or not shared, with no
        round trips or hintless window to weigh, while the server is usable."""
        uri = ticket.uri
        state = self._uris.get(uri)
        partition = ticket.partition
        if (
            reply.__class__ is not ReadReply
            or state is None
            or state.generation != ticket.generation
            or not self.quick
        ):
            return super().finish_read(ticket, reply)
        assert isinstance(reply, ReadReply)
        objects = self._objects
        policy = self.policy
        if (
            reply.from_server is not True
            or reply.shared_copy
            or reply.multi_round_trip
            or reply.hintless
            or objects is None
            or partition != self.default_partition
            or partition == PUBLIC
            or self._unusable is not None
            or (reply.cache_scope == "public" and policy.share_public)
        ):
            return super().finish_read(ticket, reply)
        if state.flags >= _READ:  # (`UriRecord.reads_in_flight` -= 1)
            state.flags -= _READ
        heard = self.heard
        if ticket.changes_heard == heard.count:  # (`ChangesHeard.proved` does nothing else)
            heard.proved(uri, ticket.changes_heard)
        now = self.clock()
        wall = self.wall_clock()  # (`_fetched_at_now`)
        fetched_at = self._fetched_at
        if not 0.0 <= wall - fetched_at < _SAME_FETCH:
            self._fetched_at = fetched_at = wall
        cached, handed = fresh_results(uri, reply.contents, fetched_at)
        state.answered(partition)  # no failure; "not_cached" if this entry is evicted
        ttl_ms = reply.ttl_ms
        ttl = self._ms_windows.get(ttl_ms)
        if ttl is None:
            # Bounded on its own too: many ``ttlMs`` map to one window (clamped at
            # `Policy.max_ttl`, or at most 0), so `_windows` alone may never pass it.
            if len(self._windows) > _WINDOWS or len(self._ms_windows) > _WINDOWS:
                self._windows.clear()
                self._ms_windows.clear()
            ttl = policy.ttl_seconds(ttl_ms)
            ttl = self._ms_windows[ttl_ms] = self._windows.setdefault(ttl, ttl)
        if PUBLIC in state.partitions:
            self._drop_entry(uri, PUBLIC, state)
        hits = self.hits
        hits.pop(uri, None)  # no row while the record changes
        received, burst_window, expires_at = self._burst  # (see `_burst`)
        if burst_window != ttl or not 0.0 <= now - received < _SAME_FETCH:
            expires_at = now + ttl
            self._burst = (now, ttl, expires_at)
        held = state.value
        if held is not None and held.contents is reply.contents and partition in state.partitions:
            # The very contents it holds (a source that hands out an unchanged reply
            # again): the same size, so the store only notes the use, as the discard
            # and put below would (no bound can be passed by it).
            state.hold(cached, expires_at, ttl, 0)
            objects.get_object(uri)
        else:
            if held is not None:
                objects.discard_object(uri)  # (still the URI's record: see `UriRecords`)
            else:
                self._uris.leaving(uri)  # the store keeps it now (or hands it back)
            state.hold(cached, expires_at, ttl, 0)
            if partition not in state.partitions:
                state.add_partition(partition)
            objects.put_object(uri, state)
        if partition in state.partitions:  # not evicted at once by the bounds (`_index`)
            covered = uri in self._subs._covered  # (`Coverage.covers`, read in place)
            if state.flags & SELECTED:
                if covered:
                    hits[uri] = cached if policy.subscription_backed else state
                elif policy.uncovered != "read_before_use":
                    hits[uri] = state
            else:
                hits[uri] = state
        if state.flags & ~_ENTRY_FLAGS == 0 and not state.partitions:  # (`UriRecord.idle`)
            self._uris.forget_if_idle(uri, state, keep_a_while=True)
        if self._denials._denied:  # (`Denials.__len__`, read in place)
            self._denials.cleared(uri, partition)  # its own read succeeded
        return handed


class FreshnessEngine(_Rereads):
    """Freshness bookkeeping for one server, many URIs and partitions."""

    # ------------------------------------------------------------------ selection

    def select(self, uris: Iterable[str]) -> list[Decision]:
        """Replace the selection.

        Returns a re-listen when the selection changed. New URIs are read at once only
        when no stream will come (the server has no listen); otherwise the new
        stream's acknowledgment reads what it newly covers (invariant 4), so entering
        reads each selected URI once and adding one URI costs one read.
        """
        wanted = dict.fromkeys(uris)
        removed = [uri for uri in self._selected if uri not in wanted]
        added = [uri for uri in wanted if uri not in self._selected]
        for uri in removed:
            self._selected.discard(uri)
            state = self._uris.of(uri)
            state.selected = False
            self._reindex(uri, state)
            self._uris.forget_if_idle(uri, state)
        decisions: list[Decision] = []
        for uri in added:
            state = self._uris.of(uri)
            state.selected = True
            self._selected.add(uri)
            self._reindex(uri, state)
            if self._listen_supported is False:
                decisions.append(ReadResource(uri, self.default_partition, "selected"))
        if (removed or added) and self._listen_supported is not False:
            decisions.append(Relisten(frozenset(self._selected), "selection_changed"))
        return decisions

    # ------------------------------------------------------------------ stream events

    def handle(self, event: StreamEvent) -> list[Decision]:
        """Feed one stream event; returns what the middleware must do next."""
        if (
            event.__class__ is ResourceUpdated
            and event.contents is None
            and self.quick
            and (
                len(event.uri) <= self._subs._shortest  # (no parent: no call)
                or not self._subs.parents_asked_for(event.uri)
            )
        ):
            return self._updated(event.uri, event.subscription_id)
        match event:
            case ListenStarted():
                self.catalogs.dropped(event.subscription_id)
                self._coverage_lost(
                    self._subs.open(event.subscription_id, event.resource_uris, event.list_changed)
                )
                if self._stream_status != "live":
                    self._stream_status = "opening"
                return []
            case ListenAcknowledged():
                return self._acknowledged(event)
            case ResourceUpdated():
                self.counters.notifications += 1
                trusted = self._trusted(event.subscription_id)
                self.heard.note(event.uri)
                body = None if event.contents is None else self._pushed_body(event, trusted)
                decisions: list[Decision] = []
                for uri in self._named_by(event.uri):
                    state = self._invalidate(
                        uri, "invalidated", "resources/updated", event.subscription_id, trusted
                    )
                    if body is not None and uri == event.uri:
                        self._fill_pushed(uri, body)  # one decision with the bump above
                        continue
                    if state.selected:
                        decisions.append(
                            ReadResource(uri, self.default_partition, "resources/updated")
                        )
                return decisions
            case ResourceListChanged():
                self.counters.notifications += 1
                trusted = self._trusted(event.subscription_id)
                # Templates change with the resource list.
                return [
                    *self._resource_list_changed("list_changed"),
                    *self.invalidate_catalog(
                        "resource_templates", "list_changed", alone=not trusted
                    ),
                ]
            case CatalogListChanged():
                self.counters.notifications += 1
                trusted = self._trusted(event.subscription_id)
                return self.invalidate_catalog(event.kind, "list_changed", alone=not trusted)
            case StreamLost():
                return self._stream_ended(event.subscription_id, lost=True)
            case StreamClosed():
                return self._stream_ended(event.subscription_id, lost=False)
            case ListenUnsupported():
                self._listen_supported = False
                self._stream_status = "unsupported"
                for sid in self._subs.ids():
                    self._drop_subscription(sid)
                # No stream will ever cover them: read what was never read (entering).
                reads: list[Decision] = []
                for uri in sorted(self._selected):
                    state = self._uris.of(uri)
                    self._reindex(uri, state)
                    if not self._has_current_entry(uri, state):
                        reads.append(ReadResource(uri, self.default_partition, "selected"))
                return reads
            case UntrustedMessage():
                self.counters.untrusted_messages += 1
                return []
            case ChangesMissed():
                self.heard.note_everything()
                return []
            case _:
                assert_never(event)

    def handle_hint(self, event: StreamEvent) -> list[Decision]:
        """Feed a hint that came on a request's own answer (``reply.hints``).

        A hint may only make content less fresh (invariant 9): change hints count,
        wherever they came from; anything else (an acknowledgment, a stream's end) is
        not the answer's to say and is ignored as untrusted.
        """
        match event:
            case ResourceUpdated():
                return self.handle(ResourceUpdated(event.uri, None))
            case ResourceListChanged():
                return self.handle(ResourceListChanged(None))
            case CatalogListChanged():
                return self.handle(CatalogListChanged(event.kind, None))
            case ChangesMissed():
                return self.handle(event)
            case _:
                self.counters.untrusted_messages += 1
                return []

    def cancel_subscription(self, subscription_id: SubscriptionId) -> None:
        """The client closed a subscription it no longer needs (a newer one replaced it)."""
        self._drop_subscription(subscription_id)

    def _pushed_body(
        self, event: ResourceUpdated, trusted: bool
    ) -> tuple[ResourceContents, ...] | None:
        """The body ``event`` pushed, if it may make its URI fresh: the caller opted in
        (`Policy.pushed_bodies`), it came on an acknowledged stream that itself covers
        the URI (invariant 9: not before the ack, not with an unknown id, not from
        another stream or a request's answer), the URI is selected, the server is
        usable and no denial of this principal stands. Otherwise ``None``: the
        notification only invalidates, like one without a body."""
        if event.contents is None:
            return None
        uri, partition = event.uri, self.default_partition
        state = self._uris.get(uri)
        if (
            self.policy.pushed_bodies
            and trusted
            and self._subs.covered_by(event.subscription_id, uri)
            and state is not None
            and state.selected
            and self._unusable is None
            and not self.denied(uri, partition)
            and event.contents
        ):
            return event.contents
        self.counters.pushed_bodies_refused += 1
        return None

    def _fill_pushed(self, uri: str, contents: tuple[ResourceContents, ...]) -> None:
        """Store a pushed body at the generation its own notification just gave ``uri``:
        it is the newest change heard of, so it is fresh (while its stream covers the
        URI) exactly as a read sent after that invalidation would be."""
        state = self._uris.of(uri)
        self.heard.proved(uri, self.heard.count)
        ticket = ReadTicket(
            uri, self.default_partition, state.generation, self.heard.count, self._invalidations
        )
        self._store_reply(ticket, state, ReadReply(contents, cache_scope="private"), pushed=True)
        self.counters.pushed_bodies += 1

    def _trusted(self, subscription_id: SubscriptionId | None) -> bool:
        if not self._subs.trusted(subscription_id):
            # Unknown id or before the acknowledgment: may only make content less fresh.
            self.counters.untrusted_messages += 1
            return False
        return True

    def _acknowledged(self, event: ListenAcknowledged) -> list[Decision]:
        sid = event.subscription_id
        ack = self._subs.acknowledge(sid, event.resource_uris, event.list_changed)
        if ack is None:
            self.counters.untrusted_messages += 1
            return []
        self.counters.acknowledgments += 1
        if ack.asked_beyond_request:
            self.counters.untrusted_messages += 1  # an ack cannot cover what was not asked for
        self._listen_supported = True
        self._stream_status = "live"
        decisions: list[Decision] = []
        for uri in ack.newly_covered:
            state = self._uris.get(uri)
            if state is None:
                continue
            # A new stream proves nothing about the time before it (invariant 4): what
            # was read before this moment is not fresh until read again. That holds for
            # a URI deselected while the ack was on its way too: selected again, it
            # must not pass its old copy off as subscription-backed.
            self._invalidate(uri, self._reason_now(uri, state), "acknowledged", sid, True)
            if state.selected:
                decisions.append(ReadResource(uri, self.default_partition, "acknowledged"))
        sub = ack.subscription
        for uri in sorted(sub.requested - sub.covered):
            state = self._uris.get(uri)
            if state is not None and state.selected and not self._has_current_entry(uri, state):
                # Not covered: read before use; read once now so entering warms it.
                decisions.append(ReadResource(uri, self.default_partition, "acknowledged"))
        if sub.list_changed:
            decisions += self._resource_list_changed("acknowledged")
        # Only what the ack names is covered (a source that cannot say, e.g. a fleet
        # follower, names none: its catalogs are listed before each use).
        asked = sub.list_changed_requested
        kinds = frozenset(kind for kind in CATALOG_KINDS if asked and kind in event.catalogs)
        for kind in self.catalogs.acknowledged(sid, kinds):
            # Invariant 4 for catalogs: what was walked before the ack is not fresh.
            if self.catalogs.invalidate(kind, self.catalogs.reason_now(kind)):
                decisions.append(Relist("acknowledged", kind))
        return decisions

    def _stream_ended(
        self, subscription_id: SubscriptionId | None, *, lost: bool
    ) -> list[Decision]:
        if subscription_id is not None:
            if subscription_id not in self._subs:
                self.counters.untrusted_messages += 1
                return []
            ended = [subscription_id]
        elif lost:
            ended = self._subs.ids()  # a loss with no id: the channel broke, all are gone
        else:
            self.counters.untrusted_messages += 1
            return []
        if lost:
            self.counters.stream_losses += 1
            self.heard.note_everything()  # changes may have been missed for any URI
            watched_lists = False
            for sid in ended:
                gone = self._subs.get(sid)
                assert gone is not None
                watched_lists = watched_lists or gone.list_changed
                # Only what an acknowledged stream covered was ever vouched for.
                for uri in sorted(gone.covered):
                    if uri in self._uris:
                        self._invalidate(uri, "stream_lost", "stream_lost", subscription_id, True)
            if watched_lists:
                self._lists.invalidate()
            for sid in ended:
                for kind in sorted(self.catalogs.covered_by(sid)):
                    self.catalogs.invalidate(kind, "stream_lost")
        for sid in ended:
            self._drop_subscription(sid)
        if self._subs:
            return []
        self._stream_status = "lost" if lost else "closed"
        return [Relisten(frozenset(self._selected), "stream_lost" if lost else "stream_closed")]

    def _drop_subscription(self, subscription_id: SubscriptionId) -> None:
        self.catalogs.dropped(subscription_id)
        self._coverage_lost(self._subs.drop(subscription_id))

    def _coverage_lost(self, uris: list[str]) -> None:
        """``uris`` are covered by no stream any more: re-judge their hit-table rows."""
        for uri in uris:
            state = self._uris.get(uri)
            if state is not None and state.selected:
                self._reindex(uri, state)


__all__ = [
    "FRESH",
    "Counters",
    "FreshnessEngine",
    "Invalidation",
    "ListTicket",
    "ReadTicket",
]
