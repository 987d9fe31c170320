"""What a fleet may share, decided here for resource text and catalogs alike.

A fleet's shared store is written by other processes, so two of its rules belong to
the core rather than to the fleet's I/O:

- `shared_expiry_ms`: whether a server's reply may be stored for the other workers,
  and for how long (the store keeps it that long, by its own clock);
- `Standing`: whether a copy that is not a principal's own read (another worker's
  fill, a shared walk, the public copy) may serve that principal on this worker. A
  fleet-wide denial is a marker and a message in a store others can write: deleted or
  never written (a store that restarted, a writer with the namespace's password), its
  *absence* would grant. So absence proves nothing: a principal takes another's copy
  of a thing (a URI, or a catalog: `catalog_subject`) only after one of its own
  server reads of that thing succeeded on this worker, and not since a refusal of it,
  here or heard from another worker. `FreshnessEngine.may_share` and
  `catalog_shared` ask it (as ``denied_elsewhere``).
"""

from __future__ import annotations

from collections.abc import Callable

from ._entries import PUBLIC, Partition
from ._events import ReadReply, RequestFailed
from ._policy import Policy

LIMIT = 10_000
"""Proofs kept at most (oldest forgotten first: that principal reads once more)."""


def catalog_subject(kind: str) -> str:
    """The subject a catalog's standing is kept under (no URI starts with a control
    character, so it never names a resource)."""
    return f"\x1fcatalog:{kind}"


def shared_expiry_ms(
    reply: ReadReply | RequestFailed, policy: Policy, covered_entry_ttl: float
) -> int | None:
    """How long a shared store may keep ``reply`` (ms), or ``None``: not shared. Only a
    reply that came from the server in one round trip without a change hint proves
    anything about the server; ``ttlMs`` 0 means read before each use (nothing to
    share) unless the policy is subscription-backed, where a covered entry lives
    ``covered_entry_ttl`` seconds."""
    if not isinstance(reply, ReadReply):
        return None
    if reply.from_server is not True or reply.multi_round_trip or reply.hints:
        return None
    ttl = reply.ttl_ms or 0
    if ttl > 0:
        return max(1, int(min(ttl, policy.max_ttl * 1000.0)))
    if policy.subscription_backed:
        return int(covered_entry_ttl * 1000)
    return None


class Standing:
    """Which principals may take another's copy of what, on this worker (see the
    module docstring). Called as ``standing(subject, partition)``: ``True`` when a
    copy that is not its own read must not serve it."""

    def __init__(self, tag: Callable[[Partition], str], limit: int = LIMIT) -> None:
        self._proved: dict[tuple[str, Partition], None] = {}
        self._tag = tag
        """The keyed partition tag another worker's refusal names (`SharedStore.tag`)."""
        self._limit = limit

    def __call__(self, subject: str, partition: Partition) -> bool:
        return partition != PUBLIC and (subject, partition) not in self._proved

    def succeeded(self, subject: str, partition: Partition) -> None:
        """``partition``'s own server read of ``subject`` succeeded on this worker."""
        key = (subject, partition)
        self._proved.pop(key, None)
        self._proved[key] = None
        while len(self._proved) > self._limit:
            del self._proved[next(iter(self._proved))]

    def refused(self, subject: str, partition: Partition) -> None:
        """``partition``'s own server read of ``subject`` was refused, here."""
        self._proved.pop((subject, partition), None)

    def heard_refusal(self, subject: str, tag: str) -> None:
        """Another worker's read of ``subject`` for the partition ``tag`` names was refused."""
        for key in [k for k in self._proved if k[0] == subject and self._tag(k[1]) == tag]:
            del self._proved[key]


__all__ = ["LIMIT", "Standing", "catalog_subject", "shared_expiry_ms"]
