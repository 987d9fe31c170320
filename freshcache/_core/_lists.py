"""Cached pages of ``resources/list`` (spec server/resources, pagination; invariant 3).

Each page is its own entry with its own ``ttlMs``. A generation covers the whole
list: a ``list_changed`` (or an acknowledgment that watches the list) bumps it and
discards every page, and a page reply sent under an older generation is never
stored. A refused cursor discards every page too, and the walk starts again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from typing_extensions import assert_never

from ._entries import PUBLIC, Entry, EntryKey, Partition, Store
from ._events import ListReply, RequestFailed

if TYPE_CHECKING:
    from ._policy import Policy

LIST = "resources/list"
_PAGE_OVERHEAD = 256  # rough bytes of bookkeeping per page beyond its items


@dataclass(frozen=True, slots=True)
class ListTicket:
    """Handed out when a list page request is sent."""

    cursor: str | None
    partition: Partition
    generation: int


class ListPages:
    """The list pages of one server, in the engine's store."""

    def __init__(self, store: Store, server_id: str, policy: Policy) -> None:
        self._store = store
        self._server_id = server_id
        self._policy = policy
        self.generation = 0
        self._keys: set[EntryKey] = set()

    def lookup(self, cursor: str | None, partition: Partition, now: float) -> ListReply | None:
        """A fresh cached page, or ``None``."""
        for part in (partition, PUBLIC) if self._policy.share_public else (partition,):
            entry = self._store.get((self._server_id, LIST, _cursor_key(cursor), part))
            if (
                entry is not None
                and entry.generation == self.generation
                and now < entry.expires_at
                and isinstance(entry.value, ListReply)
            ):
                return entry.value
        return None

    def begin(self, cursor: str | None, partition: Partition) -> ListTicket:
        return ListTicket(cursor, partition, self.generation)

    def finish(
        self, ticket: ListTicket, reply: ListReply | RequestFailed, now: float
    ) -> ListReply | RequestFailed | None:
        """Judge a page reply; ``None``: list again from the first page."""
        match reply:
            case RequestFailed():
                if reply.kind == "not_found" and ticket.cursor is not None:
                    self.invalidate()  # a refused cursor discards every cached page
                    return None
                return reply
            case ListReply():
                if ticket.generation != self.generation:
                    return None
                scope = reply.cache_scope or "private"
                part = (
                    PUBLIC if scope == "public" and self._policy.share_public else ticket.partition
                )
                key: EntryKey = (self._server_id, LIST, _cursor_key(ticket.cursor), part)
                self._keys.add(key)
                self._store.put(
                    key,
                    Entry(
                        value=reply,
                        generation=ticket.generation,
                        received_at=now,
                        expires_at=now + self._policy.ttl_seconds(reply.ttl_ms),
                        scope=scope,
                        size=_PAGE_OVERHEAD + sum(len(r.uri) + 64 for r in reply.resources),
                    ),
                )
                return reply
            case _:
                assert_never(reply)

    def invalidate(self) -> None:
        """The list changed: every page is discarded, replies in flight are outdated."""
        self.generation += 1
        for key in self._keys:
            self._store.discard(key)
        self._keys.clear()

    def evicted(self, key: EntryKey) -> None:
        self._keys.discard(key)


def _cursor_key(cursor: str | None) -> str:
    # The spec says "" is a valid cursor, distinct from "no cursor" (the first page).
    return "\x00first" if cursor is None else cursor
