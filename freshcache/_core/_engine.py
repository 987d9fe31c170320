"""The freshness engine: this module owns every transition rule (DESIGN §2, §5).

Sans-IO. Facts come in (`handle` for stream events, `finish_read`/`finish_list` for
replies), decisions come out (`ReadResource`, `Relist`, `Relisten`). The engine never
sleeps, never touches a socket and reads time only from the injected clocks.

The one promise: the text handed out is never older than the newest change heard
of. The mechanism is a *generation* per URI. Every invalidation bumps it before
anything else; a read records the generation when it is *sent* (`begin_read`); when
the reply lands under a newer generation it is discarded, never stored as fresh
(invariant 1). Only entries whose generation is current sit in the hit tables (one
dict per partition, keyed by bare URI), the index the fast path consults.

Generations come from one engine-wide counter, so they never restart: the record of
a URI that holds no entry, is not selected and has no read in flight is dropped
(invariant 10), and a reply to a read sent before that still finds a different
generation when it lands.

An acknowledgment is an invalidation too (invariant 4): every selected URI that the
new stream covers and no other live stream covered a moment before gets a new
generation and a re-read, so only a read sent after the acknowledgment makes it
subscription-backed fresh. URIs a live stream kept covering through a selection swap
keep their entries.

Costs (DESIGN §8): a notification touches the URIs it names, found by exact match and
by the URI's own prefixes (the sub-resource rule), never by scanning the selection;
coverage and the selection are kept as counts and sets, not rebuilt per call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from typing_extensions import assert_never

from ._entries import PUBLIC, Entry, EntryKey, Partition, Store
from ._events import (
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
from ._heard import ChangesHeard
from ._model import (
    AWAITING_FRESH_SOURCE,
    DENIED,
    FRESH,
    NOT_FOUND,
    STALE,
    ReadResult,
    Reason,
    ResourceContents,
    fresh_result,
    problem_result,
)
from ._policy import Policy

READ = "resources/read"
LIST = "resources/list"
_INF = float("inf")
_ENTRY_OVERHEAD = 256  # rough bytes of bookkeeping per entry beyond the contents

SubscriptionId = str | int
Hit = tuple[float, ReadResult]
"""(fresh until, result) in a partition's hit table."""
HitTable = dict[str, Hit]

NO_HITS: HitTable = {}
"""Stands for the table of a partition that has none yet; never written to."""


@dataclass(frozen=True, slots=True)
class ReadTicket:
    """Handed out when a server read is sent; the reply is judged against it."""

    uri: str
    partition: Partition
    generation: int
    changes_heard: int = 0
    """`ChangesHeard.count` when the read was sent (the "cannot tell" rule)."""


@dataclass(frozen=True, slots=True)
class ListTicket:
    """Handed out when a list page request is sent."""

    cursor: str | None
    partition: Partition
    generation: int


@dataclass(frozen=True, slots=True)
class Invalidation:
    """A record of one invalidation, for telemetry and tests."""

    uri: str
    cause: str
    subscription_id: SubscriptionId | None
    trusted: bool


_DEFAULT_ONLY: tuple[Partition, ...] = (None,)
_REMEMBERED_IDLE = 1024
"""Records of URIs that hold nothing but a failure or an invalidation reason, kept
for `status` (oldest dropped first)."""


@dataclass(slots=True)
class _UriState:
    generation: int
    invalid_reason: Reason = "not_cached"
    """What status says when no entry is at `generation`: why it was invalidated, or
    ``not_cached`` when nothing was read since (or the entry was evicted)."""
    selected: bool = False
    reads_in_flight: int = 0
    partitions: tuple[Partition, ...] = ()
    """Partitions that hold an entry for this URI in the store (usually one)."""
    problems: dict[Partition, tuple[int, ReadResult]] | None = None
    """Latest failed outcome per partition, with the generation it happened at.
    Both are created on first use: most URIs never fail and have one partition,
    and at 100k entries an empty set and dict each would cost ~450 bytes."""

    def problem(self, partition: Partition) -> tuple[int, ReadResult] | None:
        return None if self.problems is None else self.problems.get(partition)

    def set_problem(self, partition: Partition, result: ReadResult) -> None:
        if self.problems is None:
            self.problems = {}
        self.problems[partition] = (self.generation, result)

    def clear_problem(self, partition: Partition) -> None:
        if self.problems is not None:
            self.problems.pop(partition, None)

    def add_partition(self, partition: Partition) -> None:
        if partition not in self.partitions:
            self.partitions = (
                _DEFAULT_ONLY
                if not self.partitions and partition is None
                else (
                    *self.partitions,
                    partition,
                )
            )

    def drop_partition(self, partition: Partition) -> None:
        if partition in self.partitions:
            self.partitions = tuple(p for p in self.partitions if p != partition)


@dataclass(slots=True)
class _Subscription:
    requested: frozenset[str]
    list_changed_requested: bool
    acknowledged: bool = False
    covered: frozenset[str] = frozenset()
    list_changed: bool = False


@dataclass(slots=True)
class Counters:
    """Running totals, for status output, telemetry and tests."""

    server_reads: int = 0
    local_copy_replies: int = 0
    superseded_replies: int = 0
    notifications: int = 0
    untrusted_messages: int = 0
    invalidations: int = 0
    stream_losses: int = 0
    acknowledgments: int = 0
    list_requests: int = 0


StreamStatus = str  # "idle" | "opening" | "live" | "closed" | "lost" | "unsupported"


class FreshnessEngine:
    """Freshness bookkeeping for one server, many URIs and partitions."""

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
        self.hit_tables: dict[Partition, HitTable] = {}
        """Partition -> its hit table. Only entries whose generation is current."""
        self.hits: HitTable = self.hits_for(default_partition)
        """The default partition's hit table: bare URI -> (fresh until, result)."""
        self._store = store
        self._store.set_eviction_listener(self._evicted)
        self._uris: dict[str, _UriState] = {}
        self._generations = 0
        self.heard = ChangesHeard()
        """Changes heard of, for answers of unknown origin (`ReadReply.from_server` None)."""
        self._remembered: dict[str, None] = {}
        """Idle records kept for what `status` says of them, oldest first (bounded)."""
        self._selected: set[str] = set()
        self._subs: dict[SubscriptionId, _Subscription] = {}
        self._covered: dict[str, int] = {}
        """URI -> how many acknowledged subscriptions cover it (no zero counts)."""
        self._requested: dict[str, int] = {}
        """URI -> how many open subscriptions asked for it (for the sub-resource rule)."""
        self._stream_status: StreamStatus = "idle"
        self._listen_supported: bool | None = None
        self._list_generation = 0
        self._list_pages: set[EntryKey] = set()
        self._on_invalidation = on_invalidation

    # ------------------------------------------------------------------ queries

    @property
    def selected(self) -> frozenset[str]:
        """URIs the agent relies on."""
        return frozenset(self._selected)

    @property
    def covered(self) -> frozenset[str]:
        """URIs a live, acknowledged subscription covers now."""
        return frozenset(self._covered)

    def is_covered(self, uri: str) -> bool:
        """Whether a live, acknowledged subscription covers ``uri`` now."""
        return uri in self._covered

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
        table = self.hit_tables.get(partition)
        if table is None:
            table = self.hit_tables[partition] = {}
        return table

    def lookup(self, uri: str, partition: Partition) -> ReadResult | None:
        """A fresh result from the cache, or ``None`` when a server read is needed."""
        now = self.clock()
        table = self.hit_tables.get(partition)
        hit = None if table is None else table.get(uri)
        if hit is not None and now < hit[0]:
            return hit[1]
        if self.policy.share_public and partition != PUBLIC:
            state = self._uris.get(uri)
            if state is not None and state.problem(partition) is None:
                table = self.hit_tables.get(PUBLIC)
                hit = None if table is None else table.get(uri)
                if hit is not None and now < hit[0]:
                    return hit[1]
        return None

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
        if entry is not None and entry.generation == state.generation:
            if self._uncovered_strict(uri, state):
                return problem_result(uri, AWAITING_FRESH_SOURCE, "uncovered")
            return problem_result(uri, AWAITING_FRESH_SOURCE, "expired")
        return problem_result(uri, AWAITING_FRESH_SOURCE, state.invalid_reason)

    # ------------------------------------------------------------------ reads

    def begin_read(self, uri: str, partition: Partition) -> ReadTicket:
        """Note that a server read of ``uri`` is being sent now."""
        state = self._state(uri)
        state.reads_in_flight += 1
        self.counters.server_reads += 1
        return ReadTicket(uri, partition, state.generation, self.heard.count)

    def is_current(self, ticket: ReadTicket) -> bool:
        """Whether no invalidation has landed since ``ticket``'s read was sent."""
        state = self._uris.get(ticket.uri)
        # --- transports branch: a record dropped once its reply was judged (a result
        # handed out but never stored, e.g. a requestState retry's) is still current
        # while the engine made no generation and heard no change since the read was
        # sent; without this a waiter re-reads forever against a server whose every
        # read takes rounds.
        if state is None:
            return (
                self._generations == ticket.generation and self.heard.count == ticket.changes_heard
            )
        # --- end of the transports hunk
        return state.generation == ticket.generation

    def finish_read(
        self, ticket: ReadTicket, reply: ReadReply | RequestFailed
    ) -> ReadResult | None:
        """Judge a reply. ``None`` means an invalidation overtook the read: read again."""
        uri, partition = ticket.uri, ticket.partition
        state = self._state(uri)
        state.reads_in_flight = max(0, state.reads_in_flight - 1)
        try:
            match reply:
                case ReadReply():
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
                case RequestFailed():
                    return self._record_failure(ticket, state, reply)
                case _:
                    assert_never(reply)
        finally:
            self._forget_if_idle(uri, state)

    def abandon_read(self, ticket: ReadTicket) -> None:
        """The read sent under ``ticket`` will never be judged (it was cancelled)."""
        state = self._uris.get(ticket.uri)
        if state is not None:
            state.reads_in_flight = max(0, state.reads_in_flight - 1)
            self._forget_if_idle(ticket.uri, state)

    def note_timeout(self, uri: str, partition: Partition) -> ReadResult:
        """The caller's deadline passed while the read goes on in the background."""
        state = self._state(uri)
        result = problem_result(
            uri,
            AWAITING_FRESH_SOURCE,
            "timeout",
            server_read=True,
            detail="the server read did not answer before the deadline",
        )
        result = self._maybe_stale(self._record_problem(state, partition, result), partition)
        self._forget_if_idle(uri, state)
        return result

    def _store_reply(self, ticket: ReadTicket, state: _UriState, reply: ReadReply) -> ReadResult:
        uri, partition = ticket.uri, ticket.partition
        now = self.clock()
        fetched_at = self.wall_clock()
        contents = reply.contents
        handed = fresh_result(uri, contents, fetched_at=fetched_at, server_read=True)
        state.clear_problem(partition)
        state.invalid_reason = "not_cached"  # what status says if this entry is evicted
        if reply.multi_round_trip:
            return handed  # spec: results of multi-round-trip retries are never cached
        scope = reply.cache_scope or "private"
        stored_partition = PUBLIC if scope == "public" and self.policy.share_public else partition
        cached = fresh_result(
            uri, contents, fetched_at=fetched_at, server_read=False, version=handed.version
        )
        entry = Entry(
            value=cached,
            generation=state.generation,
            received_at=now,
            expires_at=now + self.policy.ttl_seconds(reply.ttl_ms),
            scope=scope,
            size=_size_of(uri, contents),
        )
        for other in (partition, PUBLIC):
            if other != stored_partition and other in state.partitions:
                self._drop_entry(uri, other, state)
        key: EntryKey = (self.server_id, READ, uri, stored_partition)
        state.add_partition(stored_partition)
        self._store.put(key, entry)
        if stored_partition in state.partitions:  # not evicted at once by the store's bounds
            self._index(uri, stored_partition, state, entry)
        return handed

    def _record_failure(
        self, ticket: ReadTicket, state: _UriState, failure: RequestFailed
    ) -> ReadResult:
        uri, partition = ticket.uri, ticket.partition
        detail = failure.detail or None
        match failure.kind:
            case "denied":
                # Do not cite it to this principal; drop that principal's copy (DESIGN §1).
                self._drop_entry(uri, partition, state)
                result = problem_result(uri, DENIED, "denied", server_read=True, detail=detail)
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
        self._pop_hit(uri, partition)
        if ticket.generation == state.generation:
            state.set_problem(partition, result)
        return self._maybe_stale(result, partition)

    def _record_problem(
        self, state: _UriState, partition: Partition, result: ReadResult
    ) -> ReadResult:
        self._pop_hit(result.uri, partition)
        state.set_problem(partition, result)
        return result

    def _maybe_stale(self, result: ReadResult, partition: Partition) -> ReadResult:
        """Serve-stale-on-error, only where the policy opted in for this URI."""
        if result.state != AWAITING_FRESH_SOURCE or result.reason not in (
            "timeout",
            "unreachable",
            "server_error",
        ):
            return result
        if not self.policy.allows_stale(result.uri):
            return result
        entry = self._entry(result.uri, partition)
        if entry is None or not isinstance(entry.value, ReadResult):
            return result
        old = entry.value
        return ReadResult(
            state=STALE,
            uri=old.uri,
            reason=result.reason,
            contents=old.contents,
            text=old.text,
            version=old.version,
            fetched_at=old.fetched_at,
            server_read=result.server_read,
            age=max(0.0, self.clock() - entry.received_at),
            detail=result.detail,
        )

    # ------------------------------------------------------------------ lists

    def lookup_list_page(self, cursor: str | None, partition: Partition) -> ListReply | None:
        """A fresh cached list page, or ``None``."""
        for part in (partition, PUBLIC) if self.policy.share_public else (partition,):
            entry = self._store.get((self.server_id, LIST, _cursor_key(cursor), part))
            if (
                entry is not None
                and entry.generation == self._list_generation
                and self.clock() < entry.expires_at
                and isinstance(entry.value, ListReply)
            ):
                return entry.value
        return None

    def begin_list(self, cursor: str | None, partition: Partition) -> ListTicket:
        """Note that a list page request is being sent now."""
        self.counters.list_requests += 1
        return ListTicket(cursor, partition, self._list_generation)

    def finish_list(
        self, ticket: ListTicket, reply: ListReply | RequestFailed
    ) -> ListReply | RequestFailed | None:
        """Judge a list page reply; ``None`` means a list change overtook it: list again."""
        match reply:
            case RequestFailed():
                if reply.kind == "not_found" and ticket.cursor is not None:
                    # Spec (pagination): an invalid cursor discards every cached page.
                    self._invalidate_lists()
                return reply
            case ListReply():
                if ticket.generation != self._list_generation:
                    self.counters.superseded_replies += 1
                    return None
                scope = reply.cache_scope or "private"
                part = (
                    PUBLIC if scope == "public" and self.policy.share_public else ticket.partition
                )
                now = self.clock()
                key: EntryKey = (self.server_id, LIST, _cursor_key(ticket.cursor), part)
                self._list_pages.add(key)
                self._store.put(
                    key,
                    Entry(
                        value=reply,
                        generation=ticket.generation,
                        received_at=now,
                        expires_at=now + self.policy.ttl_seconds(reply.ttl_ms),
                        scope=scope,
                        size=_ENTRY_OVERHEAD + sum(len(r.uri) + 64 for r in reply.resources),
                    ),
                )
                return reply
            case _:
                assert_never(reply)

    def list_complete(self, listed: Iterable[str], partition: Partition) -> list[Decision]:
        """A full re-list finished: selected URIs that left it are checked by a direct read."""
        present = set(listed)
        decisions: list[Decision] = []
        for uri in sorted(self._selected - present):
            # Invariant 3: the list alone does not decide; a direct read does.
            self._invalidate(uri, "invalidated", "left_list", None, True)
            decisions.append(ReadResource(uri, partition, "left_list"))
        return decisions

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
            state = self._uris[uri]
            state.selected = False
            self._reindex(uri, state)
            self._forget_if_idle(uri, state)
        decisions: list[Decision] = []
        for uri in added:
            state = self._state(uri)
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
        match event:
            case ListenStarted():
                self._drop_subscription(event.subscription_id)
                self._subs[event.subscription_id] = _Subscription(
                    event.resource_uris, event.list_changed
                )
                _count_in(self._requested, event.resource_uris)
                if self._stream_status != "live":
                    self._stream_status = "opening"
                return []
            case ListenAcknowledged():
                return self._acknowledged(event)
            case ResourceUpdated():
                self.counters.notifications += 1
                trusted = self._trusted(event.subscription_id)
                self.heard.note(event.uri)
                decisions: list[Decision] = []
                for uri in self._named_by(event.uri):
                    self._invalidate(
                        uri, "invalidated", "resources/updated", event.subscription_id, trusted
                    )
                    if self._uris[uri].selected:
                        decisions.append(
                            ReadResource(uri, self.default_partition, "resources/updated")
                        )
                return decisions
            case ResourceListChanged():
                self.counters.notifications += 1
                self._trusted(event.subscription_id)
                self._invalidate_lists()
                return [Relist("list_changed")]
            case StreamLost():
                return self._stream_ended(event.subscription_id, lost=True)
            case StreamClosed():
                return self._stream_ended(event.subscription_id, lost=False)
            case ListenUnsupported():
                self._listen_supported = False
                self._stream_status = "unsupported"
                for sid in list(self._subs):
                    self._drop_subscription(sid)
                # No stream will ever cover them: read what was never read (entering).
                reads: list[Decision] = []
                for uri in sorted(self._selected):
                    state = self._uris[uri]
                    self._reindex(uri, state)
                    if not self._has_current_entry(uri, state):
                        reads.append(ReadResource(uri, self.default_partition, "selected"))
                return reads
            case UntrustedMessage():
                self.counters.untrusted_messages += 1
                return []
            case _:
                assert_never(event)

    def cancel_subscription(self, subscription_id: SubscriptionId) -> None:
        """The client closed a subscription it no longer needs (a newer one replaced it)."""
        self._drop_subscription(subscription_id)

    def _trusted(self, subscription_id: SubscriptionId | None) -> bool:
        sub = self._subs.get(subscription_id) if subscription_id is not None else None
        if sub is None or not sub.acknowledged:
            # Unknown id or before the acknowledgment: may only make content less fresh.
            self.counters.untrusted_messages += 1
            return False
        return True

    def _acknowledged(self, event: ListenAcknowledged) -> list[Decision]:
        sid = event.subscription_id
        sub = self._subs.get(sid)
        if sub is None or sub.acknowledged:
            self.counters.untrusted_messages += 1
            return []
        self.counters.acknowledgments += 1
        if event.resource_uris - sub.requested:
            self.counters.untrusted_messages += 1  # an ack cannot cover what was not asked for
        sub.acknowledged = True
        sub.covered = event.resource_uris & sub.requested
        sub.list_changed = event.list_changed and sub.list_changed_requested
        self._listen_supported = True
        self._stream_status = "live"
        decisions: list[Decision] = []
        for uri in sorted(sub.covered):
            newly = uri not in self._covered
            self._covered[uri] = self._covered.get(uri, 0) + 1
            state = self._uris.get(uri)
            if newly and state is not None and state.selected:
                # A new stream proves nothing about the time before it (invariant 4):
                # what was read before this moment is not fresh until read again.
                self._invalidate(uri, self._reason_now(uri, state), "acknowledged", sid, True)
                decisions.append(ReadResource(uri, self.default_partition, "acknowledged"))
        for uri in sorted(sub.requested - sub.covered):
            state = self._uris.get(uri)
            if state is not None and state.selected and not self._has_current_entry(uri, state):
                # Not covered: read before use; read once now so entering warms it.
                decisions.append(ReadResource(uri, self.default_partition, "acknowledged"))
        if sub.list_changed:
            self._invalidate_lists()
            decisions.append(Relist("acknowledged"))
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
            ended = list(self._subs)  # a loss with no id: the channel broke, all are gone
        else:
            self.counters.untrusted_messages += 1
            return []
        if lost:
            self.counters.stream_losses += 1
            self.heard.note_everything()  # changes may have been missed for any URI
            watched_lists = False
            for sid in ended:
                gone = self._subs[sid]
                watched_lists = watched_lists or gone.list_changed
                # Only what an acknowledged stream covered was ever vouched for.
                for uri in sorted(gone.covered):
                    if uri in self._uris:
                        self._invalidate(uri, "stream_lost", "stream_lost", subscription_id, True)
            if watched_lists:
                self._invalidate_lists()
        for sid in ended:
            self._drop_subscription(sid)
        if self._subs:
            return []
        self._stream_status = "lost" if lost else "closed"
        return [Relisten(frozenset(self._selected), "stream_lost" if lost else "stream_closed")]

    def _drop_subscription(self, subscription_id: SubscriptionId) -> None:
        """Forget one subscription; URIs only it covered are no longer covered."""
        sub = self._subs.pop(subscription_id, None)
        if sub is None:
            return
        _count_out(self._requested, sub.requested)
        if sub.acknowledged:
            for uri in _count_out(self._covered, sub.covered):
                state = self._uris.get(uri)
                if state is not None and state.selected:
                    self._reindex(uri, state)

    # ------------------------------------------------------------------ internals

    def _named_by(self, uri: str) -> list[str]:
        """URIs a ``resources/updated`` for ``uri`` invalidates.

        The URI itself, and, when the notification names a sub-resource of a URI we
        subscribed to (the schema allows that), the subscribed parent too: a hint may
        only make content less fresh. Parents are found among ``uri``'s own prefixes,
        so the cost does not grow with the selection.
        """
        named = [uri] if uri in self._uris else []
        if self._requested:
            for parent in _parents(uri):
                if parent in self._requested:
                    self.heard.note(parent)
                    if parent in self._uris:
                        named.append(parent)
        return named

    def _state(self, uri: str) -> _UriState:
        state = self._uris.get(uri)
        if state is None:
            state = self._uris[uri] = _UriState(self._new_generation())
        return state

    def _new_generation(self) -> int:
        self._generations += 1
        return self._generations

    def _forget_if_idle(self, uri: str, state: _UriState) -> None:
        """Drop the record of a URI nothing depends on any more (invariant 10).

        A record that still says something (a failure, why it was invalidated) is
        kept a while for `status`, among the last `_REMEMBERED_IDLE` such records.
        """
        if not _idle(state) or self._uris.get(uri) is not state:
            return
        if state.problems or state.invalid_reason != "not_cached":
            self._remembered[uri] = None
            while len(self._remembered) > _REMEMBERED_IDLE:
                oldest = next(iter(self._remembered))
                del self._remembered[oldest]
                gone = self._uris.get(oldest)
                if gone is not None and _idle(gone):
                    del self._uris[oldest]
        else:
            del self._uris[uri]
            self._remembered.pop(uri, None)

    def _entry(self, uri: str, partition: Partition) -> Entry | None:
        entry = self._store.get((self.server_id, READ, uri, partition))
        if entry is None and self.policy.share_public:
            entry = self._store.get((self.server_id, READ, uri, PUBLIC))
        return entry

    def _has_current_entry(self, uri: str, state: _UriState) -> bool:
        for part in state.partitions:
            entry = self._store.get((self.server_id, READ, uri, part))
            if entry is not None and entry.generation == state.generation:
                return True
        return False

    def _reason_now(self, uri: str, state: _UriState) -> Reason:
        """Why ``uri`` is not fresh after a new invalidation: a copy we held is now
        ``invalidated``; one already invalid keeps the reason it had."""
        return "invalidated" if self._has_current_entry(uri, state) else state.invalid_reason

    def _uncovered_strict(self, uri: str, state: _UriState) -> bool:
        return (
            state.selected
            and self.policy.uncovered == "read_before_use"
            and uri not in self._covered
        )

    def _invalidate(
        self,
        uri: str,
        reason: Reason,
        cause: str,
        subscription_id: SubscriptionId | None,
        trusted: bool,
    ) -> None:
        state = self._state(uri)
        state.generation = self._new_generation()  # first: any read in flight is outdated
        state.invalid_reason = reason
        self._unindex(uri, state)
        self.counters.invalidations += 1
        if self._on_invalidation is not None:
            self._on_invalidation(Invalidation(uri, cause, subscription_id, trusted))

    def _invalidate_lists(self) -> None:
        self._list_generation += 1
        for key in self._list_pages:
            self._store.discard(key)
        self._list_pages.clear()

    def _index(self, uri: str, partition: Partition, state: _UriState, entry: Entry) -> None:
        assert isinstance(entry.value, ReadResult)
        if self._uncovered_strict(uri, state):
            return
        until = entry.expires_at
        if self.policy.subscription_backed and state.selected and uri in self._covered:
            until = _INF
        self.hits_for(partition)[uri] = (until, entry.value)

    def _pop_hit(self, uri: str, partition: Partition) -> None:
        table = self.hit_tables.get(partition)
        if table is not None:
            table.pop(uri, None)

    def _unindex(self, uri: str, state: _UriState) -> None:
        for part in state.partitions:
            self._pop_hit(uri, part)

    def _reindex(self, uri: str, state: _UriState) -> None:
        """Coverage or selection of ``uri`` changed: recompute its hit-table rows."""
        self._unindex(uri, state)
        for part in state.partitions:
            entry = self._store.get((self.server_id, READ, uri, part))
            if entry is not None and entry.generation == state.generation:
                problem = state.problem(part)
                if problem is None or problem[0] != state.generation:
                    self._index(uri, part, state, entry)

    def _drop_entry(self, uri: str, partition: Partition, state: _UriState) -> None:
        self._pop_hit(uri, partition)
        state.drop_partition(partition)
        self._store.discard((self.server_id, READ, uri, partition))

    def _evicted(self, key: EntryKey) -> None:
        _, method, param, partition = key
        if method == LIST:
            self._list_pages.discard(key)
            return
        self._pop_hit(param, partition)
        state = self._uris.get(param)
        if state is not None:
            state.drop_partition(partition)
            self._forget_if_idle(param, state)


def _idle(state: _UriState) -> bool:
    return not state.selected and not state.partitions and state.reads_in_flight == 0


def _count_in(counts: dict[str, int], uris: Iterable[str]) -> None:
    for uri in uris:
        counts[uri] = counts.get(uri, 0) + 1


def _count_out(counts: dict[str, int], uris: Iterable[str]) -> list[str]:
    """Decrement ``uris``; returns those whose count reached zero (and were removed)."""
    gone: list[str] = []
    for uri in uris:
        left = counts.get(uri, 0) - 1
        if left > 0:
            counts[uri] = left
        elif uri in counts:
            del counts[uri]
            gone.append(uri)
    return gone


def _parents(uri: str) -> Iterable[str]:
    """Every proper prefix ``p`` of ``uri`` with ``_is_under(uri, p)``."""
    for i, char in enumerate(uri):
        if char in "/#?":
            if i:
                yield uri[:i]
            if char == "/" and i + 1 < len(uri):
                yield uri[: i + 1]


def _is_under(uri: str, parent: str) -> bool:
    if not uri.startswith(parent):
        return False
    return parent.endswith("/") or uri[len(parent) : len(parent) + 1] in ("/", "#", "?")


def _cursor_key(cursor: str | None) -> str:
    # The spec says "" is a valid cursor, distinct from "no cursor" (the first page).
    return "\x00first" if cursor is None else cursor


def _size_of(uri: str, contents: tuple[ResourceContents, ...]) -> int:
    size = _ENTRY_OVERHEAD + len(uri)
    for item in contents:
        size += len(item.uri) + len(item.text or "") + len(item.blob or "") + 64
    return size


__all__ = [
    "FRESH",
    "Counters",
    "FreshnessEngine",
    "Invalidation",
    "ListTicket",
    "ReadTicket",
]
