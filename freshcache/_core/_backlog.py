"""What a consumer that falls behind its stream means for freshness (invariant 9, 11).

Every source queues what a stream carried for the task that takes it in, up to a
limit. A hint that does not fit cannot simply be dropped: the URI it named would stay
fresh although a change was heard of. The one rule, for every source (the 2026 listen
stream, the 2025 GET stream, stdio's shared channel, a loader's change feed): the
stream that overflowed is *lost*, so the engine invalidates what it covered and
re-listens (everything re-reads). Sources call `overflowed` and queue its answer as
the stream's final event; none of them decides what to drop.
"""

from __future__ import annotations

from ._events import StreamLost


def overflowed(subscription_id: str | int | None, limit: int) -> StreamLost:
    """The event that ends a stream whose consumer fell ``limit`` messages behind."""
    return StreamLost(subscription_id, f"the consumer fell {limit} messages behind")


__all__ = ["overflowed"]
