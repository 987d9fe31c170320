"""Cached pages of ``resources/list`` and of the catalogs (``tools/list``,
``prompts/list``, ``resources/templates/list``): spec pagination, invariants 3 and 14.

Each page is its own entry with its own ``ttlMs``. A generation covers the whole
list: a ``list_changed`` (or an acknowledgment that watches the list) bumps it and
discards every page, and a page reply sent under an older generation is never
stored. A refused cursor discards every page too, and the walk starts again.

`ListWalk` is the walk over every page, sans-IO: the cache and the bare-engine world
both drive it, so they cannot disagree on when a walk starts again or gives up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from typing_extensions import assert_never

from ._entries import PUBLIC, Entry, EntryKey, Partition, Store
from ._events import ListReply, RequestFailed, ResourceInfo
from ._frozen import canonical_json, frozen_mapping
from ._model import AWAITING_FRESH_SOURCE, FRESH, Reason

if TYPE_CHECKING:
    from ._policy import Policy

LIST = "resources/list"
_PAGE_OVERHEAD = 256  # rough bytes of bookkeeping per page beyond its items
_RESOURCE_OVERHEAD = 64  # rough bytes of one `ResourceInfo` beyond its URI and item


@dataclass(frozen=True, slots=True)
class ListTicket:
    """Handed out when a list page request is sent."""

    cursor: str | None
    partition: Partition
    generation: int


class ListPages:
    """The pages of one list (``method``) of one server, in the engine's store."""

    def __init__(self, store: Store, server_id: str, policy: Policy, method: str = LIST) -> None:
        self._store = store
        self._server_id = server_id
        self._policy = policy
        self.method = method
        self.generation = 0
        self.asked = False
        """Whether a page of this list was ever asked for."""
        self._keys: set[EntryKey] = set()

    def lookup(self, cursor: str | None, partition: Partition, now: float) -> ListReply | None:
        """A fresh cached page, or ``None``."""
        for part in (partition, PUBLIC) if self._policy.share_public else (partition,):
            entry = self._store.get((self._server_id, self.method, _cursor_key(cursor), part))
            if (
                entry is not None
                and entry.generation == self.generation
                and now < entry.expires_at
                and isinstance(entry.value, ListReply)
            ):
                return entry.value
        return None

    def window(self, cursor: str | None, partition: Partition) -> tuple[float, bool] | None:
        """When the current page at ``cursor`` stops being fresh, and whether it is
        private; ``None`` when no such page is held (evicted at once)."""
        for part in (partition, PUBLIC) if self._policy.share_public else (partition,):
            entry = self._store.get((self._server_id, self.method, _cursor_key(cursor), part))
            if entry is not None and entry.generation == self.generation:
                return entry.expires_at, entry.scope != "public" or part != PUBLIC
        return None

    def begin(self, cursor: str | None, partition: Partition) -> ListTicket:
        self.asked = True
        return ListTicket(cursor, partition, self.generation)

    def finish(
        self, ticket: ListTicket, reply: ListReply | RequestFailed, now: float
    ) -> ListReply | RequestFailed | None:
        """Judge a page reply; ``None``: list again from the first page."""
        match reply:
            case RequestFailed():
                if ticket.generation != self.generation:
                    return None  # an answer from before a change says nothing now
                if reply.kind == "not_found" and ticket.cursor is not None:
                    self.invalidate()  # a refused cursor discards every cached page
                    return None
                return reply
            case ListReply():
                if ticket.generation != self.generation:
                    return None
                reply = _landed(reply)
                scope = reply.cache_scope or "private"
                part = (
                    PUBLIC if scope == "public" and self._policy.share_public else ticket.partition
                )
                key: EntryKey = (self._server_id, self.method, _cursor_key(ticket.cursor), part)
                self._keys.add(key)
                self._store.put(
                    key,
                    Entry(
                        value=reply,
                        generation=ticket.generation,
                        received_at=now,
                        expires_at=now + self._policy.ttl_seconds(reply.ttl_ms),
                        scope=scope,
                        size=page_bytes(reply),
                        hintless=reply.hintless,
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


def _landed(reply: ListReply) -> ListReply:
    """A page from the server as it is stored: its items frozen (a source may give plain
    dicts: every caller gets the same items, none may change what the next gets,
    invariant 13) and its size counted (`ListReply.item_bytes`), both once here, never
    on a walk over cached pages."""
    items = tuple(frozen_mapping(item) or {} for item in reply.items)
    size = reply.item_bytes if reply.item_bytes or not items else len(canonical_json(items))
    if reply.resources:
        size += sum(_RESOURCE_OVERHEAD + len(r.uri) for r in reply.resources) + len(
            canonical_json([r.item for r in reply.resources if r.item is not None])
        )
    return replace(reply, items=items, item_bytes=size)


def page_bytes(page: ListReply) -> int:
    """A page's size: what the store counts it as, and a walk's byte bound. A stored
    page's items, resources with all they carry (title, description, annotations,
    icons, ``_meta``) among them, were counted when it landed (`_landed`)."""
    return _PAGE_OVERHEAD + page.item_bytes


@dataclass(frozen=True, slots=True)
class ListResult:
    """The answer to a whole-list request (`FreshCache.list_resources`)."""

    state: str
    """``fresh``, ``awaiting_fresh_source``, ``denied`` or ``not_found``."""
    resources: tuple[ResourceInfo, ...] = ()
    reason: str | None = None
    server_read: bool = False
    detail: str | None = None


class ListJudge(Protocol):
    """What a `ListWalk` asks of the engine (`FreshnessEngine` is one; no import of it,
    so `_engine` importing this module makes no circle)."""

    @property
    def policy(self) -> Policy: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    def lookup_list_page(self, cursor: str | None, partition: Partition) -> ListReply | None: ...

    def begin_list(self, cursor: str | None, partition: Partition) -> ListTicket: ...

    def finish_list(
        self, ticket: ListTicket, reply: ListReply | RequestFailed
    ) -> ListReply | RequestFailed | None: ...

    def page_window(
        self, cursor: str | None, partition: Partition
    ) -> tuple[float, bool] | None: ...


class ListWalk:
    """One walk over every page of a list (``resources/list`` or a catalog's), from the
    first page; the one walk both kinds of list share.

    Ask `next_page` for the page to request (its ticket; fresh cached pages are taken
    on the way), hand its reply to `landed`, until `next_page` says ``None``; then
    `result` is the answer. It starts again from the first page when a change or a
    refused cursor overtakes it, or when the window of a page it took closed before
    the last page came (invariant 14: the whole list is fresh only while every page
    is; the closed page is asked for again), at most ``Policy.max_rereads`` times.
    It stops past ``Policy.max_list_pages`` pages or ``Policy.max_list_bytes`` bytes
    in all (a cursor that never ends), with ``awaiting_fresh_source``.

    A complete walk also says how long the whole list stays fresh (`expires_at`: the
    minimum over its pages), whether any page was private (`private`) and gathers the
    catalog items of its pages (`items`). ``cached=False`` asks the server for every
    page (read before use).
    """

    def __init__(self, engine: ListJudge, partition: Partition, *, cached: bool = True) -> None:
        self._engine = engine
        self._partition = partition
        self._cached = cached
        policy = engine.policy
        self._walks_left = policy.max_rereads
        self._pages_left = policy.max_list_pages
        self._bytes_left = policy.max_list_bytes
        self._server_read = False
        self._why: Reason = "invalidated"
        self.result: ListResult | None = None
        self._start_over()

    def _start_over(self) -> None:
        if self._walks_left == 0:
            self.result = ListResult(AWAITING_FRESH_SOURCE, reason=self._why, server_read=True)
            return
        self._walks_left -= 1
        self.items: list[Any] = []
        self.pages: list[ListReply] = []
        """The pages taken, in order (cached ones are the store's very objects)."""
        self.expires_at = float("inf")
        self.private = False
        self.hintless = False
        self._resources: list[ResourceInfo] = []
        self._cursor: str | None = None
        self._seen: set[str | None] = set()
        self._from_cache = False
        self._closes_at = float("inf")
        """When the first window of the pages taken closes (pages with a ``ttlMs``
        above 0; one without is true when it lands and bounds nothing)."""

    @property
    def closes_at(self) -> float:
        """When the complete walk stops being true (the first window of its pages with a
        ``ttlMs`` closes; ``inf``: none bounds it). Judged at its end, and again for
        every caller woken to its result (`FreshnessEngine.list_current`)."""
        return self._closes_at

    @property
    def all_from_server(self) -> bool:
        """Every page of this walk (since it last started over) came from the server."""
        return not self._from_cache

    def next_page(self) -> ListTicket | None:
        """The page request to send now, or ``None``: the walk is over (`result`)."""
        while self.result is None:
            page = (
                self._engine.lookup_list_page(self._cursor, self._partition)
                if self._cached
                else None
            )
            if page is None:
                self._server_read = True
                return self._engine.begin_list(self._cursor, self._partition)
            self._take(page, from_server=False)
        return None

    def landed(self, ticket: ListTicket, reply: ListReply | RequestFailed) -> None:
        judged = self._engine.finish_list(ticket, reply)
        if judged is None:
            self._why = "invalidated"
            self._start_over()
        elif isinstance(judged, RequestFailed):
            state = judged.kind if judged.kind in ("denied", "not_found") else AWAITING_FRESH_SOURCE
            self.result = ListResult(
                state, reason=judged.kind, server_read=True, detail=judged.detail
            )
        else:
            self._take(judged, from_server=True)

    def _take(self, page: ListReply, *, from_server: bool) -> None:
        self._pages_left -= 1
        self._bytes_left -= page_bytes(page)
        if self._pages_left < 0 or self._bytes_left < 0:
            policy = self._engine.policy
            self.result = ListResult(
                AWAITING_FRESH_SOURCE,
                reason="server_error",
                server_read=self._server_read,
                detail=f"the list did not end within Policy.max_list_pages "
                f"({policy.max_list_pages}) pages and Policy.max_list_bytes "
                f"({policy.max_list_bytes}) bytes",
            )
            return
        self._resources.extend(page.resources)
        self.items.extend(page.items)
        self.pages.append(page)
        if not from_server:
            self._from_cache = True
        self.hintless = self.hintless or page.hintless
        window = self._engine.page_window(self._cursor, self._partition)
        if window is None:
            self.expires_at, self.private = float("-inf"), True
        else:
            self.expires_at = min(self.expires_at, window[0])
            self.private = self.private or window[1]
            if self._engine.policy.ttl_seconds(page.ttl_ms) > 0:
                self._closes_at = min(self._closes_at, window[0])
        self._seen.add(self._cursor)
        self._cursor = page.next_cursor
        if self._cursor is None or self._cursor in self._seen:
            if self._engine.clock() >= self._closes_at:
                self._why = "expired"
                self._start_over()  # the closed page is asked for again
                return
            self.result = ListResult(FRESH, tuple(self._resources), server_read=self._server_read)


def _cursor_key(cursor: str | None) -> str:
    # The spec says "" is a valid cursor, distinct from "no cursor" (the first page).
    return "\x00first" if cursor is None else cursor
