"""What a stream event does (DESIGN §5 streams; invariants 4, 5, 9), a part of
`FreshnessEngine`: a change heard, an acknowledgment, a stream's end, a pushed body.
"""

from __future__ import annotations

from ._catalogs import CATALOG_KINDS
from ._copies import Copies
from ._coverage import Coverage, SubscriptionId
from ._denials import Denials
from ._events import (
    Decision,
    ListenAcknowledged,
    ListenStarted,
    ReadReply,
    ReadResource,
    Relist,
    Relisten,
    ResourceUpdated,
)
from ._heard import ChangesHeard
from ._list_rules import ListRules
from ._model import ResourceContents


class StreamRules:
    """Coverage, changes heard and invalidations as stream events land."""

    def __init__(
        self, copies: Copies, heard: ChangesHeard, denials: Denials, lists: ListRules
    ) -> None:
        self.copies = copies
        self.coverage: Coverage = copies.coverage
        self.heard = heard
        self.denials = denials
        self.lists = lists

    def trusted(self, subscription_id: SubscriptionId | None) -> bool:
        if not self.coverage.trusted(subscription_id):
            # Unknown id or before the acknowledgment: may only make content less fresh.
            self.copies.counters.untrusted_messages += 1
            return False
        return True

    def started(self, event: ListenStarted) -> None:
        coverage = self.coverage
        self.lists.catalogs.dropped(event.subscription_id)
        self.coverage_lost(
            coverage.open(event.subscription_id, event.resource_uris, event.list_changed)
        )
        if coverage.status != "live":
            coverage.status = "opening"

    def updated(self, event: ResourceUpdated, cause: str = "resources/updated") -> list[Decision]:
        """A ``resources/updated`` (the general case: a body, a subscribed parent), or a
        fleet listener's invalidation for ``cause`` (`FreshnessEngine.handle`)."""
        copies = self.copies
        copies.counters.notifications += 1
        trusted = self.trusted(event.subscription_id)
        self.heard.note(event.uri)
        body = None if event.contents is None else self._pushed_body(event, trusted)
        decisions: list[Decision] = []
        for uri in self._named_by(event.uri):
            state = copies.records.of(uri)
            reason = copies.reason_for(uri, state, cause)
            copies.invalidate(uri, reason, cause, event.subscription_id, trusted, state)
            if body is not None and uri == event.uri:
                self._fill_pushed(uri, body)  # one decision with the bump above
                continue
            if state.selected:
                decisions.append(ReadResource(uri, copies.default_partition, cause))
        return decisions

    def _named_by(self, uri: str) -> list[str]:
        """URIs a ``resources/updated`` for ``uri`` invalidates.

        The URI itself, and, when the notification names a sub-resource of a URI we
        subscribed to (the schema allows that), the subscribed parent too: a hint may
        only make content less fresh. Parents are found among ``uri``'s own prefixes,
        so the cost does not grow with the selection.
        """
        records = self.copies.records
        named = [uri] if uri in records else []
        for parent in self.coverage.parents_asked_for(uri):
            self.heard.note(parent)
            if parent in records:
                named.append(parent)
        return named

    def _pushed_body(
        self, event: ResourceUpdated, trusted: bool
    ) -> tuple[ResourceContents, ...] | None:
        """The body ``event`` pushed, if it may make its URI fresh: the caller opted in
        (`Policy.pushed_bodies`), it came on an acknowledged stream that itself covers
        the URI (invariant 9: not before the ack, not with an unknown id, not from
        another stream or a request's answer), the URI is selected, the server is
        usable and no denial of this principal stands. Otherwise ``None``: the
        notification only invalidates, like one without a body."""
        copies = self.copies
        uri, partition = event.uri, copies.default_partition
        state = copies.records.get(uri)
        if (
            copies.policy.pushed_bodies
            and trusted
            and self.coverage.covered_by(event.subscription_id, uri)
            and state is not None
            and state.selected
            and copies.unusable is None
            and (uri, partition) not in self.denials
            and event.contents
        ):
            return event.contents
        copies.counters.pushed_bodies_refused += 1
        return None

    def _fill_pushed(self, uri: str, contents: tuple[ResourceContents, ...]) -> None:
        """Store a pushed body at the generation its own notification just gave ``uri``:
        it is the newest change heard of, so it is fresh (while its stream covers the
        URI) exactly as a read sent after that invalidation would be."""
        copies = self.copies
        self.heard.proved(uri, self.heard.count)
        copies.keep(
            uri,
            copies.default_partition,
            copies.records.of(uri),
            ReadReply(contents, cache_scope="private"),
            pushed=True,
        )
        copies.counters.pushed_bodies += 1

    def acknowledged(self, event: ListenAcknowledged) -> list[Decision]:
        copies, coverage, counters = self.copies, self.coverage, self.copies.counters
        sid = event.subscription_id
        ack = coverage.acknowledge(sid, event.resource_uris, event.list_changed)
        if ack is None:
            counters.untrusted_messages += 1
            return []
        counters.acknowledgments += 1
        if ack.asked_beyond_request:
            counters.untrusted_messages += 1  # an ack cannot cover what was not asked for
        coverage.listen_supported = True
        coverage.status = "live"
        partition = copies.default_partition
        decisions: list[Decision] = []
        for uri in ack.newly_covered:
            state = copies.records.get(uri)
            if state is None:
                continue
            # A new stream proves nothing about the time before it (invariant 4): what
            # was read before this moment is not fresh until read again. That holds for
            # a URI deselected while the ack was on its way too: selected again, it
            # must not pass its old copy off as subscription-backed.
            reason = copies.reason_for(uri, state, "acknowledged")
            copies.invalidate(uri, reason, "acknowledged", sid, True, state)
            if state.selected:
                decisions.append(ReadResource(uri, partition, "acknowledged"))
        sub = ack.subscription
        for uri in sorted(sub.requested - sub.covered):
            state = copies.records.get(uri)
            if state is not None and state.selected and not copies.has_current_entry(uri, state):
                # Not covered: read before use; read once now so entering warms it.
                decisions.append(ReadResource(uri, partition, "acknowledged"))
        if sub.list_changed:
            decisions += self.lists.resources_changed("acknowledged")
        # Only what the ack names is covered (a source that cannot say, e.g. a fleet
        # follower, names none: its catalogs are listed before each use).
        asked = sub.list_changed_requested
        kinds = frozenset(kind for kind in CATALOG_KINDS if asked and kind in event.catalogs)
        catalogs = self.lists.catalogs
        for kind in catalogs.acknowledged(sid, kinds):
            # Invariant 4 for catalogs: what was walked before the ack is not fresh.
            if catalogs.invalidate(kind, catalogs.reason_now(kind)):
                decisions.append(Relist("acknowledged", kind))
        return decisions

    def ended(self, subscription_id: SubscriptionId | None, *, lost: bool) -> list[Decision]:
        copies, coverage, counters = self.copies, self.coverage, self.copies.counters
        if subscription_id is not None:
            if subscription_id not in coverage:
                counters.untrusted_messages += 1
                return []
            ended = [subscription_id]
        elif lost:
            ended = coverage.ids()  # a loss with no id: the channel broke, all are gone
        else:
            counters.untrusted_messages += 1
            return []
        if lost:
            counters.stream_losses += 1
            self.heard.note_everything()  # changes may have been missed for any URI
            watched_lists = False
            for sid in ended:
                gone = coverage.get(sid)
                assert gone is not None
                watched_lists = watched_lists or gone.list_changed
                # Only what an acknowledged stream covered was ever vouched for.
                for uri in sorted(gone.covered):
                    state = copies.records.get(uri)
                    if state is not None:
                        reason = copies.reason_for(uri, state, "stream_lost")
                        copies.invalidate(uri, reason, "stream_lost", subscription_id, True, state)
            if watched_lists:
                self.lists.pages.invalidate()
            for sid in ended:
                for kind in sorted(self.lists.catalogs.covered_by(sid)):
                    self.lists.catalogs.invalidate(kind, "stream_lost")
        for sid in ended:
            self.drop(sid)
        if coverage:
            return []
        coverage.status = "lost" if lost else "closed"
        selected = frozenset(self.lists.selected)
        return [Relisten(selected, "stream_lost" if lost else "stream_closed")]

    def unsupported(self) -> list[Decision]:
        """The server has no listen: no stream will ever cover the selection."""
        copies, coverage = self.copies, self.coverage
        coverage.listen_supported = False
        coverage.status = "unsupported"
        for sid in coverage.ids():
            self.drop(sid)
        # No stream will ever cover them: read what was never read (entering).
        reads: list[Decision] = []
        for uri in sorted(self.lists.selected):
            state = copies.records.of(uri)
            copies.reindex(uri, state)
            if not copies.has_current_entry(uri, state):
                reads.append(ReadResource(uri, copies.default_partition, "selected"))
        return reads

    def drop(self, subscription_id: SubscriptionId) -> None:
        """The subscription is gone (ended, replaced, cancelled)."""
        self.lists.catalogs.dropped(subscription_id)
        self.coverage_lost(self.coverage.drop(subscription_id))

    def coverage_lost(self, uris: list[str]) -> None:
        """``uris`` are covered by no stream any more: re-judge their hit-table rows."""
        copies = self.copies
        for uri in uris:
            state = copies.records.get(uri)
            if state is not None and state.selected:
                copies.reindex(uri, state)


__all__ = ["StreamRules"]
