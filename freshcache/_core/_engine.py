"""The freshness engine: this module owns every transition rule (DESIGN §2, §5).

Sans-IO. Facts come in (`handle` for stream events, `handle_hint` for hints an
answer carried, `finish_read`/`finish_list` for replies, `select`), decisions come
out (`ReadResource`, `Relist`, `Relisten`). The engine never sleeps, never touches a
socket and reads time only from the injected clocks. It is composed of parts, each
with its own module and a small public interface: the copies held (`Copies`: records,
store entries, hit rows), the streams' coverage (`Coverage`), the changes heard
(`ChangesHeard`), the denials (`Denials`), the lists and catalogs (`ListRules`), what
stream events do (`StreamRules`) and the speed path (`Rereads`). The read rules and the
judgements live here.

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
stream that covers the URI             no server read (`StreamRules`)
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

from typing_extensions import assert_never

from ._catalogs import Catalog, CatalogBook, CatalogKind, CatalogWalk, ListKind, SharedWalk
from ._copies import Copies
from ._coverage import Coverage, SubscriptionId
from ._denials import Denials
from ._entries import EntryKey, Partition, Store
from ._events import (
    CatalogListChanged,
    ChangesMissed,
    Decision,
    ListenAcknowledged,
    ListenStarted,
    ListenUnsupported,
    ListReply,
    ReadResource,
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
from ._hits import HitTable
from ._list_rules import ListRules
from ._lists import LIST, ListTicket
from ._model import FRESH
from ._policy import Policy
from ._read_rules import ReadRules
from ._reports import Counters, Invalidation, ReadTicket
from ._rereads import Handler
from ._sharing import catalog_subject
from ._stream_rules import StreamRules


class FreshnessEngine:
    """Freshness bookkeeping for one server, many URIs and partitions.

    Composed of its parts (see the module's docstring); the read rules are the
    methods of `ReadRules` (and the catalog lookups `ListRules`'s), bound here under
    the names callers use: one definition each, no call in between."""

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
        self.policy = policy = policy if policy is not None else Policy()
        self.server_id = server_id
        self.default_partition = default_partition
        self.clock = clock
        self.wall_clock = wall_clock
        self.counters = Counters()
        self.heard = ChangesHeard()
        """Changes heard of, for answers of unknown origin (`ReadReply.from_server` None)."""
        self.denials = Denials()
        """Principals refused per URI, until their own read succeeds."""
        self.coverage = Coverage()
        self.copies = Copies(
            store, policy, server_id, default_partition, clock, wall_clock,
            self.coverage, self.counters, on_invalidation, self._evicted_elsewhere,
        )  # fmt: skip
        self.hit_tables = self.copies.rows.tables
        """Partition -> its hit table (see `HitTables`)."""
        self.hits: HitTable = self.copies.hits
        """The default partition's hit table: bare URI -> its row (see `Hit`)."""
        self._selected: set[str] = set()
        self.catalogs = CatalogBook(store, server_id, policy, clock, wall_clock, default_partition)
        """Tools, prompts and resource templates (`_catalogs`)."""
        self.lists = ListRules(self.copies, self.coverage, self._selected, self.catalogs)
        self.streams = StreamRules(self.copies, self.heard, self.denials, self.lists)
        self.reads = reads = ReadRules(self.copies, self.heard, self.denials)
        self.rereads = reads.rereads
        """The speed path (`Rereads`)."""
        self.lookup = reads.lookup
        self.status = reads.status
        self.begin_read = reads.begin_read
        self.is_current = reads.is_current
        self.changed_since = reads.changed_since
        self.finish_read = self.rereads.reply if reads.quick else reads.finish_read
        """`ReadRules.finish_read`, the common reply first by the speed path (`quick`)."""
        self.rereads.events = self.events
        self.handle: Handler = self.rereads.handle if reads.quick else self.events
        """Feed one stream event; returns what the middleware must do next: `events`,
        the common ``resources/updated`` first by the speed path (`quick`)."""
        self.abandon_read = reads.abandon_read
        self.note_timeout = reads.note_timeout
        self.may_share = reads.may_share
        self.denied = reads.denied
        self.catalog_lookup = self.lists.catalog_lookup
        self.catalog_status = self.lists.catalog_status

    def _evicted_elsewhere(self, key: EntryKey) -> None:
        """The store dropped a list page or a catalog page on its own."""
        if key[1] == LIST:
            self.lists.pages.evicted(key)
        else:
            self.catalogs.evicted(key)

    # ------------------------------------------------------------------ queries

    @property
    def selected(self) -> frozenset[str]:
        """URIs the agent relies on."""
        return frozenset(self._selected)

    @property
    def covered(self) -> frozenset[str]:
        """URIs a live, acknowledged subscription covers now."""
        return self.coverage.covered

    def is_covered(self, uri: str) -> bool:
        """Whether a live, acknowledged subscription covers ``uri`` now."""
        return self.coverage.covers(uri)

    def waits_for_ack(self, uri: str, partition: Partition) -> bool:
        """Whether a caller's read of ``uri`` should wait for the acknowledgment of a
        stream that is still opening for it, instead of being sent now.

        That ack reads every selected URI of the default partition it newly covers, or
        leaves uncovered with no copy (`StreamRules.acknowledged`), and only a read sent
        after it makes ``uri`` subscription-backed fresh (invariant 4): a read sent
        before it would be sent again. Waiting makes the ack's read the caller's, one
        read per selected URI at start (DESIGN §8). Which stream is opening is the
        supervisor's (`ListenSupervisor.awaits_ack`)."""
        return (
            partition == self.default_partition
            and uri in self._selected
            and self.coverage.listen_supported is not False
            and not self.coverage.covers(uri)
        )

    @property
    def tracked_uris(self) -> int:
        """Per-URI records held now (bounded: invariant 10)."""
        return len(self.copies.records)

    @property
    def stream_status(self) -> str:
        """``idle``, ``opening``, ``live``, ``closed``, ``lost`` or ``unsupported``."""
        return self.coverage.status

    @property
    def listen_supported(self) -> bool | None:
        """``False`` once the server showed it has no ``subscriptions/listen``."""
        return self.coverage.listen_supported

    @property
    def lists_wanted(self) -> bool:
        """Whether a listen is wanted for the lists' changes whatever the selection
        (`ListenSupervisor.lists`): a catalog was asked for."""
        return self.lists.wanted

    def hits_for(self, partition: Partition) -> HitTable:
        """The hit table of ``partition`` (made on first use; never replaced)."""
        return self.copies.rows.table(partition)

    def remembers(self, uri: str) -> bool:
        """Whether the engine still keeps a record of ``uri`` (invariant 10): what mirrors
        its bookkeeping (the `changes()` feed) may keep too; the rest they drop."""
        return uri in self.copies.records

    def snapshot_mark(self, uri: str) -> int | None:
        """``uri``'s generation now, taken the moment a read hands out its result: what
        `snapshot_changed` compares a snapshot's parts against (invariant 13)."""
        state = self.copies.records.get(uri)
        return None if state is None else state.generation

    def snapshot_changed(self, marks: Mapping[str, int | None]) -> list[str]:
        """The one generation check of a snapshot (a `Context`, ...): URIs among
        ``marks`` invalidated since their mark, i.e. whose text may not be handed out
        with the rest. Everything else is fresh at this moment, together."""
        return [uri for uri, mark in marks.items() if self.snapshot_mark(uri) != mark]

    # ------------------------------------------------------------------ standing

    @property
    def quick(self) -> bool:
        """`ReadRules.quick`: whether the speed path (`Rereads`) is taken."""
        return self.reads.quick

    @quick.setter
    def quick(self, quick: bool) -> None:
        self.reads.quick = quick
        self.finish_read = self.rereads.reply if quick else self.reads.finish_read
        self.handle = self.rereads.handle if quick else self.events

    @property
    def denied_elsewhere(self) -> Callable[[str, Partition], bool] | None:
        """`ReadRules.denied_elsewhere` (a fleet sets it)."""
        return self.reads.denied_elsewhere

    @denied_elsewhere.setter
    def denied_elsewhere(self, denied: Callable[[str, Partition], bool] | None) -> None:
        self.reads.denied_elsewhere = denied

    @property
    def unusable(self) -> str | None:
        """Why the server cannot be used (no protocol version in common ...), else ``None``."""
        return self.copies.unusable

    def server_unusable(self, detail: str) -> None:
        """Discovery (or any request) showed the server cannot be used: from now on
        nothing is fresh, whatever replies land (no fresh read after the error)."""
        self.copies.unusable = detail or "the server cannot be used"
        for table in self.hit_tables.values():
            table.clear()
        self.catalogs.unusable = True  # no row is built again (a coverage change)
        for rows in self.catalogs.rows.values():
            rows.clear()

    def denied_on_another_worker(self, uri: str, partition: Partition) -> None:
        """Another worker's read of ``uri`` for ``partition`` was refused (a fleet-wide
        denial heard): its hit row goes, so its next read asks `lookup`, which hands it
        nothing of this worker's either until its own read succeeds."""
        self.copies.rows.pop(uri, partition)

    def adopt_catalog(self, done: CatalogWalk, shared: SharedWalk) -> Catalog | None:
        """Another worker's walk from the fleet's store: fresh, or ``None`` (walk it):
        never for a principal without standing here (`denied_elsewhere`), as for a
        resource's shared copy (`may_share`)."""
        elsewhere = self.reads.denied_elsewhere
        if self.copies.unusable is not None or (
            elsewhere is not None and elsewhere(catalog_subject(done.kind), done.partition)
        ):
            return None
        return self.catalogs.adopt(done, shared)

    def catalog_shared(self, done: CatalogWalk) -> bool:
        """Whether a fleet may hand ``done`` another worker's walk (`CatalogBook.shares`)."""
        return self.copies.unusable is None and self.catalogs.shares(done)

    def catalog_heard_alone(self, done: CatalogWalk) -> int | None:
        """The mark of a change of ``done``'s catalog only this worker heard, which a
        fleet must publish before another worker's walk stands in for ``done``
        (`CatalogBook.heard_alone`)."""
        return None if self.copies.unusable is not None else self.catalogs.heard_alone(done)

    def catalog_to_share(self, done: CatalogWalk) -> SharedWalk | None:
        """``done``'s settled catalog as the fleet may store it, else ``None``."""
        return None if self.copies.unusable is not None else self.catalogs.to_share(done)

    # ------------------------------------------------------------------ selection, events

    def select(self, uris: Iterable[str]) -> list[Decision]:
        """Replace the selection.

        Returns a re-listen when the selection changed. New URIs are read at once only
        when no stream will come (the server has no listen); otherwise the new
        stream's acknowledgment reads what it newly covers (invariant 4), so entering
        reads each selected URI once and adding one URI costs one read.
        """
        copies, selected = self.copies, self._selected
        unsupported = self.coverage.listen_supported is False
        wanted = dict.fromkeys(uris)
        removed = [uri for uri in selected if uri not in wanted]
        added = [uri for uri in wanted if uri not in selected]
        for uri in removed:
            selected.discard(uri)
            state = copies.records.of(uri)
            state.selected = False
            copies.reindex(uri, state)
            copies.records.forget_if_idle(uri, state)
        decisions: list[Decision] = []
        for uri in added:
            state = copies.records.of(uri)
            state.selected = True
            selected.add(uri)
            copies.reindex(uri, state)
            if unsupported:
                decisions.append(ReadResource(uri, self.default_partition, "selected"))
        if (removed or added) and not unsupported:
            decisions.append(Relisten(frozenset(selected), "selection_changed"))
        return decisions

    def events(self, event: StreamEvent, cause: str = "resources/updated") -> list[Decision]:
        """`handle` by the general rules (what `Rereads.handle` does not take). ``cause``:
        a fleet follower's copy of the listener's invalidation names the listener's
        (``acknowledged``, ``stream_lost``: a re-proof, `Copies.reason_for`)."""
        streams = self.streams
        match event:
            case ListenStarted():
                streams.started(event)
                return []
            case ListenAcknowledged():
                return streams.acknowledged(event)
            case ResourceUpdated():
                return streams.updated(event, cause)
            case ResourceListChanged():
                self.counters.notifications += 1
                alone = not streams.trusted(event.subscription_id)
                # Templates change with the resource list.
                return [
                    *self.lists.resources_changed("list_changed"),
                    *self.lists.invalidate("resource_templates", "list_changed", alone=alone),
                ]
            case CatalogListChanged():
                self.counters.notifications += 1
                alone = not streams.trusted(event.subscription_id)
                return self.lists.invalidate(event.kind, "list_changed", alone=alone)
            case StreamLost():
                return streams.ended(event.subscription_id, lost=True)
            case StreamClosed():
                return streams.ended(event.subscription_id, lost=False)
            case ListenUnsupported():
                return streams.unsupported()
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
        self.streams.drop(subscription_id)

    # ------------------------------------------------------------------ lists (`ListRules`)

    def lookup_list_page(self, cursor: str | None, partition: Partition) -> ListReply | None:
        """A fresh cached ``resources/list`` page, or ``None``."""
        return self.lists.lookup_page(cursor, partition)

    def begin_list(self, cursor: str | None, partition: Partition) -> ListTicket:
        """Note that a list page request is being sent now."""
        return self.lists.begin_page(cursor, partition)

    def finish_list(
        self, ticket: ListTicket, reply: ListReply | RequestFailed
    ) -> ListReply | RequestFailed | None:
        """Judge a list page reply (see `ListPages.finish`); ``None``: list again from
        the first page (a list change overtook it, or the cursor was refused)."""
        return self.lists.finish_page(ticket, reply)

    def page_window(self, cursor: str | None, partition: Partition) -> tuple[float, bool] | None:
        """How long the held page at ``cursor`` is fresh, and whether it is private."""
        return self.lists.pages.window(cursor, partition)

    def list_complete(self, listed: Iterable[str], partition: Partition) -> list[Decision]:
        """A full re-list finished: selected URIs that left it are checked by a direct read."""
        return self.lists.complete(listed, partition)

    def list_generation(self, kind: ListKind) -> int:
        """`ListRules.generation`."""
        return self.lists.generation(kind)

    def list_current(
        self, kind: ListKind, generation: int, closes_at: float = float("inf")
    ) -> bool:
        """`ListRules.current`."""
        return self.lists.current(kind, generation, closes_at)

    def list_changed_elsewhere(self, name: str, cause: str = "list_changed") -> list[Decision]:
        """A list's change another worker of a fleet heard (``tools``, ``prompts``,
        ``resources``: templates change with it), on the fleet's channel: as a change
        hint here, but one the whole fleet knows of (its shared walks after it may
        stand in for this worker's own). ``cause``: a re-proof (`REPROOF_CAUSES`) when
        the fleet's listener fenced the list off (a new stream, a lost one)."""
        return self.lists.changed_elsewhere(name, cause)

    def begin_catalog(self, kind: CatalogKind, partition: Partition) -> CatalogWalk:
        """A walk of ``kind`` to run now (its tickets count as list requests)."""
        return self.catalogs.begin(kind, partition)

    def catalog_asked(self) -> list[Decision]:
        """`ListRules.asked`: the first catalog asked for wants a listen."""
        return self.lists.asked()

    def settle_catalog(self, done: CatalogWalk) -> Catalog:
        """Judge a finished walk (see `CatalogBook.settle`)."""
        return self.lists.settle(done)

    def catalog_published(self, kind: CatalogKind, mark: int) -> None:
        """A fleet published change ``mark`` of ``kind`` (`CatalogBook.published_alone`)."""
        self.catalogs.published_alone(kind, mark)

    def catalog_current(self, walk: CatalogWalk) -> bool:
        """Whether no change of the catalog landed since ``walk`` began (invariant 1)."""
        return self.lists.current(walk.kind, walk.generation)

    def invalidate_catalog(
        self, kind: CatalogKind, cause: str = "invalidated", *, alone: bool = True
    ) -> list[Decision]:
        """``kind`` may have changed (an "unknown tool" answer, a caller's word): not
        fresh until walked again; re-listed in the background if anyone asked for it.
        ``alone``: heard by this client only (not on a trusted stream, which a fleet's
        listener publishes first): no other worker's walk stands in for its own until
        a fleet publishes it (`catalog_published`)."""
        return self.lists.invalidate(kind, cause, alone=alone)


__all__ = [
    "FRESH",
    "Counters",
    "FreshnessEngine",
    "Invalidation",
    "ListTicket",
    "ReadTicket",
]
