"""Denials remembered per (URI, principal), apart from any copy (invariant 12).

A principal the server refused must not be handed a copy someone else's read put in a
shared place (the public partition, the fleet store) until that principal's *own*
server read succeeds. The denial therefore lives here, not on an entry or a record
that an eviction or an idle sweep may drop with the copy. Bounded: past `LIMIT` the
oldest denial is forgotten (that principal's next read of a shared copy may then be
served; see docs/architecture.md, "What the fleet trusts").
"""

from __future__ import annotations

from ._entries import Partition

LIMIT = 10_000
"""Denials kept at most (oldest forgotten first); about 150 bytes each."""


class Denials:
    """The (URI, partition) pairs whose latest own server read was refused."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.pairs: dict[tuple[str, Partition], None] = {}
        """Oldest first. Read it (empty: no denial, without a call); change it here only."""
        self._limit = limit

    def __len__(self) -> int:
        return len(self.pairs)

    def __contains__(self, key: tuple[str, Partition]) -> bool:
        return key in self.pairs

    def note(self, uri: str, partition: Partition) -> None:
        key = (uri, partition)
        self.pairs.pop(key, None)
        self.pairs[key] = None
        while len(self.pairs) > self._limit:
            del self.pairs[next(iter(self.pairs))]

    def cleared(self, uri: str, partition: Partition) -> None:
        """That principal's own server read succeeded."""
        self.pairs.pop((uri, partition), None)


__all__ = ["LIMIT", "Denials"]
