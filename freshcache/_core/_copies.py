"""The read copies one engine holds: per-URI records, the store's entries and the hit
rows, kept in step (DESIGN §2, invariants 1, 6, 10).

A part of `FreshnessEngine`: the engine decides *when* a copy is stored, dropped or
invalidated; this is the one place that says *how* (which partition keeps it, its
freshness window, whether it gets a hit row). The speed path (`_rereads`) uses the same
accessors (`window_of_ms`, `expires_at`, `fetched_at_now`, `index`), so a rule about a
copy is written once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from ._coverage import Coverage, SubscriptionId
from ._entries import PUBLIC, Entry, EntryKey, ObjectStore, Partition, Store
from ._events import ReadReply
from ._hits import HitTable, HitTables
from ._model import (
    AWAITING_FRESH_SOURCE,
    STALE_REASONS,
    ReadResult,
    Reason,
    fresh_result,
    labelled_stale,
)
from ._policy import Policy
from ._records import HINTLESS, PUSHED, SELECTED, UriRecord, UriRecords, size_of
from ._reports import Counters, Invalidation

READ = "resources/read"
_INF = float("inf")
_WINDOWS = 64
_SAME_FETCH = 0.001
"""Replies within a millisecond of each other share one ``fetched_at`` (seconds)."""


def generation_of(entry: Entry | UriRecord) -> int:
    """The generation ``entry`` was stored at (`Entry.generation`); with an
    `ObjectStore`, the URI's record holds its entry of the default partition."""
    return entry.held_generation if entry.__class__ is UriRecord else entry.generation


class MsWindows(dict[float | None, float]):
    """``ttlMs`` -> its window (`Policy.ttl_seconds`, the float of `Copies.windows`) for
    a reply that is neither hintless nor multi-round-trip: ``windows[ttl_ms]`` is one
    lookup (no call) once a ``ttlMs`` was seen. Bounded on its own too: many ``ttlMs``
    map to one window (clamped at `Policy.max_ttl`, or at most 0), so `Copies.windows`
    alone may never pass the bound; both are cleared past `_WINDOWS`."""

    __slots__ = ("policy", "windows")

    def __init__(self, policy: Policy, windows: dict[float, float]) -> None:
        super().__init__()
        self.policy = policy
        self.windows = windows

    def __missing__(self, ttl_ms: float | None) -> float:
        windows = self.windows
        if len(windows) > _WINDOWS or len(self) > _WINDOWS:
            windows.clear()
            self.clear()
        ttl = self.policy.ttl_seconds(ttl_ms)
        ttl = self[ttl_ms] = windows.setdefault(ttl, ttl)
        return ttl


class Copies:
    """Records, stored entries and hit rows of one engine, changed only together."""

    unusable: str | None = None
    """Why the server cannot be used (`FreshnessEngine.server_unusable`): no row after it."""

    def __init__(
        self,
        store: Store,
        policy: Policy,
        server_id: str,
        default_partition: Partition,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
        coverage: Coverage,
        counters: Counters,
        on_invalidation: Callable[[Invalidation], None] | None,
        evicted_elsewhere: Callable[[EntryKey], None],
    ) -> None:
        self.unusable = None  # (on the instance: read on every reply)
        self.policy = policy
        self.server_id = server_id
        self.default_partition = default_partition
        self.clock = clock
        self.wall_clock = wall_clock
        self.coverage = coverage
        self._covering = coverage.covering
        self.counters = counters
        self.on_invalidation = on_invalidation
        """Called with every invalidation (telemetry, tests)."""
        self.invalidated = 0
        """URI invalidations so far (never reset, unlike the engine's counters)."""
        self._evicted_elsewhere = evicted_elsewhere
        self.rows = HitTables()
        self.hits: HitTable = self.rows.table(default_partition)
        """The default partition's hit table: bare URI -> its row (see `Hit`)."""
        self.store = store
        self.objects: ObjectStore | None = (
            cast(ObjectStore, store) if getattr(store, "keeps_objects", False) is True else None
        )
        """The store, if it keeps records as entries (`ObjectStore`); else ``None``."""
        if self.objects is not None:
            self.objects.claim(self, self._evicted_held)  # this engine's alone
        else:
            store.set_eviction_listener(self.evicted)
        self.records = UriRecords(None if self.objects is None else self.objects.held)
        self.windows: dict[float, float] = {}
        """One float object per distinct freshness window held (`UriRecord.ttl`):
        servers send few distinct ``ttlMs``; cleared past `_WINDOWS` of them."""
        self.ms_windows = MsWindows(policy, self.windows)
        """``ttlMs`` -> its window, made on first use (`MsWindows`; `window_of_ms`)."""
        self._fetched_at = -_INF
        """The last reply's wall-clock reading (`fetched_at_now`)."""
        self._burst = (-_INF, -1.0, 0.0)
        """The last stored reply's clock reading, window and deadline: a burst of
        replies with one freshness window shares one deadline float, the first one's
        (24 B per cached record otherwise), as they share ``fetched_at``. It is never
        later than a reply's own ``now + ttl``: an entry goes stale under a millisecond
        early, never late, and its age (derived from it) is overstated by as much."""

    # ------------------------------------------------------------------ accessors

    @property
    def fetched_at(self) -> float:
        """The ``fetched_at`` of the last reply (shared by a burst)."""
        return self._fetched_at

    def fetched_at_now(self) -> float:
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

    def window(self, ttl: float) -> float:
        """The shared float object of freshness window ``ttl`` (bounded)."""
        if len(self.windows) > _WINDOWS:
            self.windows.clear()
            self.ms_windows.clear()
        return self.windows.setdefault(ttl, ttl)

    def window_of_ms(self, ttl_ms: float | None) -> float:
        """`window` of a plain reply's ``ttlMs`` (`Policy.ttl_seconds`), remembered
        (`ms_windows`, which the speed path reads without this call)."""
        return self.ms_windows[ttl_ms]

    def expires_at(self, now: float, window: float) -> float:
        """When a reply stored ``now`` with ``window`` goes stale (see `_burst`)."""
        received, burst_window, expires_at = self._burst
        if burst_window != window or not 0.0 <= now - received < _SAME_FETCH:
            expires_at = now + window
            self._burst = (now, window, expires_at)
        return expires_at

    def held(self, uri: str, partition: Partition) -> Entry | UriRecord | None:
        """``uri``'s entry in ``partition`` (touched in the store's use order), or ``None``."""
        objects = self.objects
        if objects is not None and partition == self.default_partition:
            return cast(UriRecord | None, objects.get_object(uri))  # the record itself
        return self.store.get((self.server_id, READ, uri, partition))

    def entry(self, uri: str, partition: Partition) -> Entry | UriRecord | None:
        """`held`, or the shared public entry where the policy shares it."""
        entry = self.held(uri, partition)
        if entry is None and self.policy.share_public:
            entry = self.held(uri, PUBLIC)
        return entry

    def has_current_entry(self, uri: str, state: UriRecord) -> bool:
        for part in state.partitions:
            entry = self.held(uri, part)
            if entry is not None and generation_of(entry) == state.generation:
                return True
        return False

    def reason_now(self, uri: str, state: UriRecord) -> Reason:
        """Why ``uri`` is not fresh after a new invalidation: a copy we held is now
        ``invalidated``; one already invalid keeps the reason it had."""
        return "invalidated" if self.has_current_entry(uri, state) else state.invalid_reason

    def reason_for(self, uri: str, state: UriRecord, cause: str) -> Reason:
        """Why ``uri`` is not fresh after an invalidation for ``cause``: a change heard
        makes it ``invalidated``; a re-proof (`REPROOF_CAUSES`) as the stream rules
        give it: a lost stream ``stream_lost``, an acknowledgment `reason_now`."""
        if cause == "stream_lost":
            return "stream_lost"
        return self.reason_now(uri, state) if cause == "acknowledged" else "invalidated"

    def uncovered_strict(self, uri: str, state: UriRecord) -> bool:
        """Selected, read before use, and no live stream covers it (invariant 5)."""
        return (
            state.selected
            and self.policy.uncovered == "read_before_use"
            and not self.coverage.covers(uri)
        )

    # ------------------------------------------------------------------ changes

    def invalidate(
        self,
        uri: str,
        reason: Reason,
        cause: str,
        subscription_id: SubscriptionId | None,
        trusted: bool,
        state: UriRecord | None = None,
    ) -> UriRecord:
        """``uri`` (its record ``state``, if the caller holds it) gets a new generation
        (first: any read in flight is outdated) and loses its hit rows."""
        if state is None:
            state = self.records.of(uri)
        state.new_generation(reason)
        self.unindex(uri, state)
        self.invalidated += 1
        self.counters.invalidations += 1
        if self.on_invalidation is not None:
            self.on_invalidation(Invalidation(uri, cause, subscription_id, trusted))
        return state

    def index(
        self, uri: str, partition: Partition, state: UriRecord, entry: Entry | UriRecord
    ) -> None:
        """Give a current entry its hit row, if it may be handed out without a read."""
        if self.unusable is not None:
            return
        covered = uri in self._covering  # (`Coverage.covers`; `uncovered_strict`)
        policy = self.policy
        selected = state.flags & SELECTED
        if selected and not covered and policy.uncovered == "read_before_use":
            return
        row: ReadResult | Entry | UriRecord = entry  # fresh until entry.expires_at
        # (with an `ObjectStore`, that row is the record itself: no object of its own)
        if (
            covered
            and selected
            and (
                policy.subscription_backed
                or (
                    entry.flags & (HINTLESS | PUSHED)  # (the record's own: no property)
                    if entry is state
                    else entry.hintless or entry.pushed
                )
            )
        ):
            # Fresh until notified: 2025 reads have no TTL, the subscription vouches.
            result = entry.value
            assert isinstance(result, ReadResult)
            row = result  # no time bound: no clock on a hit
        if partition == self.default_partition:
            self.hits[uri] = row  # (`HitTables.put`: the default table is never replaced)
        else:
            self.rows.put(uri, partition, row)

    def unindex(self, uri: str, state: UriRecord) -> None:
        default = self.default_partition
        for part in state.partitions:
            if part == default:
                self.hits.pop(uri, None)
            else:
                self.rows.pop(uri, part)

    def reindex(self, uri: str, state: UriRecord) -> None:
        """Coverage or selection of ``uri`` changed: recompute its hit-table rows."""
        self.unindex(uri, state)
        for part in state.partitions:
            entry = self.held(uri, part)
            if entry is not None and generation_of(entry) == state.generation:
                problem = state.problem(part)
                if problem is None or problem[0] != state.generation:
                    self.index(uri, part, state, entry)

    def drop_entry(self, uri: str, partition: Partition, state: UriRecord) -> None:
        self.rows.pop(uri, partition)
        state.drop_partition(partition)
        objects = self.objects
        if objects is not None and partition == self.default_partition:
            if state.value is not None:
                objects.discard_object(uri)  # (its size is counted from the value: first)
                state.let_go()
                self.records.returned(uri, state)
        else:
            self.store.discard((self.server_id, READ, uri, partition))

    def _evicted_held(self, key: EntryKey | str, held: object) -> None:
        """The `ObjectStore`'s eviction listener: it hands over what it dropped."""
        if not isinstance(key, str):
            self.evicted(key)
            return
        uri = key  # a record held as its URI's entry: back among the records
        assert isinstance(held, UriRecord)
        self.rows.pop(uri, self.default_partition)
        held.let_go()
        held.drop_partition(self.default_partition)
        self.records.returned(uri, held)
        self.records.forget_if_idle(uri, held)

    def evicted(self, key: EntryKey) -> None:
        """The store dropped ``key`` on its own (lists and catalogs: not ours to keep)."""
        _, method, param, partition = key
        if method != READ:
            self._evicted_elsewhere(key)
            return
        self.rows.pop(param, partition)
        state = self.records.get(param)
        if state is not None:
            state.drop_partition(partition)
            self.records.forget_if_idle(param, state)

    # ------------------------------------------------------------------ replies

    def keep(
        self,
        uri: str,
        partition: Partition,
        state: UriRecord,
        reply: ReadReply,
        *,
        pushed: bool = False,
    ) -> ReadResult:
        """Store a reply at ``state``'s current generation; what the call hands out."""
        now = self.clock()
        fetched_at = self.fetched_at_now()
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
        for other in (partition, PUBLIC):
            if other != stored_partition and other in state.partitions:
                self.drop_entry(uri, other, state)
        objects = self.objects
        if objects is not None and stored_partition == self.default_partition:
            # The record itself becomes the entry (and the time-bounded row): no row
            # while it changes, and the old value's bytes leave the store first.
            self.rows.pop(uri, stored_partition)
            if state.value is not None:
                objects.discard_object(uri)  # (still the URI's record: see `UriRecords`)
            else:
                self.records.leaving(uri)  # the store keeps it now (or hands it back)
            flags = (HINTLESS if reply.hintless else 0) | (PUSHED if pushed else 0)
            window = self.window(ttl)
            state.hold(cached, self.expires_at(now, window), window, flags)
            state.add_partition(stored_partition)
            objects.put_object(uri, state)
            if stored_partition in state.partitions:  # not evicted at once by the bounds
                self.index(uri, stored_partition, state, state)
            return handed
        if len(self.windows) > _WINDOWS:
            self.windows.clear()
            self.ms_windows.clear()
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
        self.store.put(key, entry)
        if stored_partition in state.partitions:  # not evicted at once by the store's bounds
            self.index(uri, stored_partition, state, entry)
        return handed

    def problem(self, state: UriRecord, partition: Partition, result: ReadResult) -> ReadResult:
        """``result`` is what a read of ``partition`` now hands out: no hit row."""
        self.rows.pop(result.uri, partition)
        state.set_problem(partition, result)
        return result

    def maybe_stale(self, result: ReadResult, partition: Partition) -> ReadResult:
        """Serve-stale-on-error, only where the policy opted in for this URI."""
        if result.state != AWAITING_FRESH_SOURCE or result.reason not in STALE_REASONS:
            return result
        if not self.policy.allows_stale(result.uri):
            return result
        entry = self.entry(result.uri, partition)
        if entry is None or not isinstance(entry.value, ReadResult):
            return result
        # The old content and version, marked stale, with why the fresh read failed.
        return labelled_stale(entry.value, result, entry.received_at, self.clock())


__all__ = ["READ", "Copies", "MsWindows", "generation_of"]
