"""Open subscriptions and the URIs they cover (DESIGN §2 invariants 4, 5, 9).

Sans-IO bookkeeping the engine consults: which subscriptions are open, which are
acknowledged, and, per URI, how many acknowledged subscriptions cover it and how
many asked for it. Counts (not sets rebuilt per call) keep every question O(1) in
the selection; `parents_asked_for` answers the sub-resource rule from a URI's own
prefixes, so a notification never scans the selection (DESIGN §6).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeVar

SubscriptionId = str | int
_K = TypeVar("_K")


@dataclass(slots=True)
class Subscription:
    """One ``subscriptions/listen`` stream, as the engine knows it."""

    requested: frozenset[str]
    list_changed_requested: bool
    acknowledged: bool = False
    covered: frozenset[str] = frozenset()
    """What the acknowledgment honoured (a subset of `requested`)."""
    list_changed: bool = False


@dataclass(frozen=True, slots=True)
class Acknowledgment:
    """What one acknowledgment changed."""

    subscription: Subscription
    newly_covered: tuple[str, ...]
    """Covered now and by no other acknowledged subscription a moment before, sorted."""
    asked_beyond_request: bool
    """The ack named URIs that were never asked for (not trusted, not covered)."""


@dataclass(slots=True)
class Coverage:
    """Every open subscription of one server, and what it covers."""

    _subs: dict[SubscriptionId, Subscription] = field(default_factory=dict)
    covering: dict[str, int] = field(default_factory=dict)
    """URI -> acknowledged subscriptions covering it (no zero counts). Read it (``uri in
    coverage.covering`` is `covers` without a call: the speed path's); change it here only."""
    trusted_ids: set[SubscriptionId] = field(default_factory=set)
    """The acknowledged subscriptions' ids (`trusted`; the speed path reads it without a
    call); change it here only."""
    _asked: dict[str, int] = field(default_factory=dict)
    """URI -> open subscriptions that asked for it (no zero counts)."""
    _asked_lengths: dict[int, int] = field(default_factory=dict)
    """Length -> URIs of that length in `_asked`: a prefix of any other length is
    no parent, so `parents_asked_for` slices and looks up only those that may be."""
    shortest: float = float("inf")
    """The shortest length in `_asked_lengths`: a URI no longer than it has no parent
    asked for (`parents_asked_for` answers at once; every notification asks)."""
    status: str = "idle"
    """The primary stream: ``idle``, ``opening``, ``live``, ``closed``, ``lost`` or
    ``unsupported`` (`FreshnessEngine.stream_status`)."""
    listen_supported: bool | None = None
    """``False`` once the server showed it has no ``subscriptions/listen``."""

    def __bool__(self) -> bool:
        return bool(self._subs)

    def __contains__(self, subscription_id: object) -> bool:
        return subscription_id in self._subs

    def ids(self) -> list[SubscriptionId]:
        return list(self._subs)

    def get(self, subscription_id: SubscriptionId) -> Subscription | None:
        return self._subs.get(subscription_id)

    @property
    def covered(self) -> frozenset[str]:
        return frozenset(self.covering)

    def covers(self, uri: str) -> bool:
        """Whether an acknowledged subscription covers ``uri`` now."""
        return uri in self.covering

    def covered_by(self, subscription_id: SubscriptionId | None, uri: str) -> bool:
        """Whether the acknowledged subscription ``subscription_id`` itself covers ``uri``."""
        sub = None if subscription_id is None else self._subs.get(subscription_id)
        return sub is not None and sub.acknowledged and uri in sub.covered

    def trusted(self, subscription_id: SubscriptionId | None) -> bool:
        """Whether messages with this id come from an acknowledged subscription."""
        return subscription_id in self.trusted_ids

    def parents_asked_for(self, uri: str) -> list[str]:
        """Subscribed URIs that ``uri`` names a sub-resource of (each once)."""
        if len(uri) <= self.shortest:  # (also when nothing is asked for: inf)
            return []
        lengths = self._asked_lengths
        asked = self._asked
        parents: list[str] = []
        last = len(uri) - 1
        for found in _SEPARATORS.finditer(uri):  # scanned in C: a notification's cost
            i = found.start()
            # ``p`` is a parent when it ends with ``/``, or the character after it in
            # ``uri`` is ``/``, ``#`` or ``?`` (the sub-resource rule).
            if i and i in lengths and (parent := uri[:i]) in asked and parent not in parents:
                parents.append(parent)
            if i < last and i + 1 in lengths and found.group() == "/":
                parent = uri[: i + 1]
                if parent in asked and parent not in parents:
                    parents.append(parent)
        return parents

    def open(
        self, subscription_id: SubscriptionId, uris: frozenset[str], list_changed: bool
    ) -> list[str]:
        """A listen request went out; returns URIs that lost coverage (a reused id)."""
        lost = self.drop(subscription_id)
        self._subs[subscription_id] = Subscription(uris, list_changed)
        asked, lengths = self._asked, self._asked_lengths
        for uri in uris:
            count = asked.get(uri, 0)
            asked[uri] = count + 1
            if not count:
                lengths[len(uri)] = lengths.get(len(uri), 0) + 1
                self.shortest = min(self.shortest, len(uri))
        return lost

    def acknowledge(
        self, subscription_id: SubscriptionId, uris: frozenset[str], list_changed: bool
    ) -> Acknowledgment | None:
        """The server acknowledged; ``None`` when no such subscription awaited one."""
        sub = self._subs.get(subscription_id)
        if sub is None or sub.acknowledged:
            return None
        sub.acknowledged = True
        self.trusted_ids.add(subscription_id)
        sub.covered = uris & sub.requested
        sub.list_changed = list_changed and sub.list_changed_requested
        newly: list[str] = []
        for uri in sorted(sub.covered):
            before = self.covering.get(uri, 0)
            if before == 0:
                newly.append(uri)
            self.covering[uri] = before + 1
        return Acknowledgment(sub, tuple(newly), bool(uris - sub.requested))

    def drop(self, subscription_id: SubscriptionId) -> list[str]:
        """Forget one subscription; returns the URIs no longer covered by any."""
        sub = self._subs.pop(subscription_id, None)
        if sub is None:
            return []
        self.trusted_ids.discard(subscription_id)
        lengths = self._asked_lengths
        for uri in _count_out(self._asked, sub.requested):
            if _count_out(lengths, (len(uri),)) and len(uri) == self.shortest:
                self.shortest = min(lengths, default=float("inf"))
        return _count_out(self.covering, sub.covered) if sub.acknowledged else []


def _count_out(counts: dict[_K, int], uris: Iterable[_K]) -> list[_K]:
    """Decrement ``uris``; returns those whose count reached zero (and were removed)."""
    gone: list[_K] = []
    for uri in uris:
        left = counts.get(uri, 0) - 1
        if left > 0:
            counts[uri] = left
        elif uri in counts:
            del counts[uri]
            gone.append(uri)
    return gone


_SEPARATORS = re.compile("[/#?]")
