"""What the engine hands out about itself: read tickets, invalidation records, counters."""

from __future__ import annotations

from dataclasses import dataclass

from ._counters import Tally
from ._coverage import SubscriptionId
from ._entries import Partition
from ._slots import filled_by_slots


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


__all__ = ["Counters", "Invalidation", "ReadTicket"]
