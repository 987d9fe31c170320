"""Catalogs: tools, prompts and resource templates (DESIGN §2 invariants 13, 14).

A catalog is a whole list (``tools/list``, ``prompts/list``,
``resources/templates/list``) walked over every page with the list machinery of
`_lists` (`ListPages`, `ListWalk`: the cursor rule, a generation per list). It keeps
the promise resource text keeps:

- a ``*/list_changed`` (tools, prompts; templates change with ``resources/list_changed``)
  bumps the catalog's generation: nothing walked before it is fresh again, and a walk
  overtaken by it starts again;
- only a complete walk is fresh; its window is the minimum over its pages, and any
  private page makes the whole catalog private;
- a catalog a live acknowledged stream covers (the ack honoured ``toolsListChanged``,
  ``promptsListChanged``, ``resourcesListChanged``) is fresh within that window; one no
  stream covers is walked before each use (`Policy.uncovered`), like an uncovered URI;
- an acknowledgment that newly covers a catalog, and the loss of the stream that
  covered it, invalidate it (invariant 4);
- 2025-11-25 pages have no hints: fresh until notified while covered, else walked
  before each use.

`CatalogBook` holds that bookkeeping for one server; the engine feeds it events and
asks it; the middleware walks and hands out what `settle` returns. A fresh catalog is
built once and handed out as the same immutable object on every hit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, get_args

from ._coverage import SubscriptionId
from ._denials import LIMIT, Denials
from ._entries import PUBLIC, EntryKey, Partition, Store
from ._events import ListReply, RequestFailed
from ._frozen import canonical_json, frozen
from ._lists import ListPages, ListResult, ListTicket, ListWalk
from ._model import (
    AWAITING_FRESH_SOURCE,
    DENIED,
    FRESH,
    NOT_FOUND,
    REPROOF_CAUSES,
    STALE_REASONS,
    Reason,
    State,
    labelled_stale,
)
from ._policy import Policy

CatalogKind = Literal["tools", "prompts", "resource_templates"]
"""The catalogs an agent acts on."""

CATALOG_KINDS: tuple[CatalogKind, ...] = get_args(CatalogKind)

CATALOG_METHODS: Mapping[CatalogKind, str] = {
    "tools": "tools/list",
    "prompts": "prompts/list",
    "resource_templates": "resources/templates/list",
}
"""The list request of each catalog."""

CATALOG_FIELDS: Mapping[CatalogKind, str] = {
    "tools": "tools",
    "prompts": "prompts",
    "resource_templates": "resourceTemplates",
}
"""The field of a list result that holds the catalog's items."""

ListKind = Literal["resources", "tools", "prompts", "resource_templates"]
"""What a list walk lists: ``resources/list``, or a catalog (`CatalogKind`)."""

LIST_METHODS: Mapping[ListKind, str] = {"resources": "resources/list", **CATALOG_METHODS}  # type: ignore[dict-item]
"""The list request of each kind of list."""

_METHOD_KINDS = {method: kind for kind, method in CATALOG_METHODS.items()}


@dataclass(frozen=True, slots=True)
class Catalog:
    """One catalog as handed out: its items only when ``fresh`` (or opt-in ``stale``).

    Immutable all the way down (items are read-only mappings over frozen copies), so
    the same object can be handed to every caller: mutating it is impossible, and
    nothing a caller does changes what the next caller gets (invariant 13).
    """

    kind: CatalogKind
    state: State
    reason: Reason | None = None
    """Why the catalog is not plain ``fresh``; ``None`` for a fresh one."""
    items: tuple[Mapping[str, Any], ...] = ()
    """The tools, prompts or templates, in MCP's shape; ``()`` unless fresh or stale."""
    version: str | None = None
    """Digest of the items."""
    fetched_at: float | None = None
    """Wall-clock time the walk that produced the items completed."""
    server_read: bool = False
    """Whether a server request happened for this call."""
    age: float | None = None
    """Seconds since the items were fetched; set on ``stale``."""
    detail: str | None = field(default=None, compare=False)
    excluded: Mapping[str, str] = field(default_factory=lambda: _NOTHING_EXCLUDED)
    """Items the server listed that a protocol rule left out, name -> why (a tool whose
    ``x-mcp-header`` annotations are invalid: never handed out, never called)."""

    @property
    def names(self) -> tuple[str, ...]:
        """The items' names (a tool's, a prompt's, a template's ``name``)."""
        return tuple(str(item.get("name", "")) for item in self.items)

    @property
    def ok(self) -> bool:
        """True when the catalog may be acted on as current (``fresh``)."""
        return self.state == FRESH


_NOTHING_EXCLUDED: Mapping[str, str] = frozen({})


def _excluded(pages: Sequence[ListReply]) -> Mapping[str, str]:
    """What a walk's pages left out (`ListReply.excluded`), name -> why."""
    pairs = [pair for page in pages for pair in page.excluded]
    return frozen(dict(pairs)) if pairs else _NOTHING_EXCLUDED


@dataclass(frozen=True, slots=True)
class CatalogChange:
    """A catalog moved from one (state, version) to another (`FreshCache.changes`)."""

    kind: CatalogKind
    old_state: State | None
    old_version: str | None
    new_state: State
    new_version: str | None
    reason: Reason | None = None
    cause: str | None = None
    """What invalidated it, for a move a re-list decision made: ``list_changed`` (a
    change heard of), ``acknowledged`` (a new stream re-proves what was walked before
    it: nothing is known to have changed), ...; else ``None`` (`StateChange.cause`)."""

    @property
    def reproof(self) -> bool:
        """Whether an invalidation made this move only to re-prove (`REPROOF_CAUSES`)."""
        return self.cause in REPROOF_CAUSES


def catalog_version(items: tuple[Mapping[str, Any], ...]) -> str:
    """A short digest of a catalog's items (so "v1"/"v2" are observable)."""
    digest = hashlib.blake2b(digest_size=8)
    digest.update(canonical_json(items).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


class PageVersions:
    """`catalog_version` of a walk's pages, each page's canonical JSON made once: a
    re-walk that takes pages from the cache encodes only the pages the server sent
    again (the pages are immutable, so the same object means the same items). The
    digest is `catalog_version`'s over the items of every page, so a walk and a fleet's
    adopted copy of the same items agree. Keeps the pages of the latest walk of each
    catalog, with their JSON, and nothing else."""

    def __init__(self) -> None:
        self._known: dict[CatalogKind, dict[int, tuple[ListReply, bytes]]] = {}

    def version(self, kind: CatalogKind, pages: Sequence[ListReply]) -> str:
        known = self._known.get(kind, {})
        kept: dict[int, tuple[ListReply, bytes]] = {}
        digest = hashlib.blake2b(digest_size=8)
        digest.update(b"[")
        for page in pages:
            if not page.items:
                continue
            held = known.get(id(page))
            if held is not None and held[0] is page:
                text = held[1]
            else:  # "[a,b]" -> "a,b": the page's part of the whole list's canonical JSON
                text = canonical_json(page.items)[1:-1].encode("utf-8", "surrogatepass")
            if kept:
                digest.update(b",")
            kept[id(page)] = (page, text)
            digest.update(text)
        digest.update(b"]")
        self._known[kind] = kept
        return digest.hexdigest()

    def forget(self, kind: CatalogKind) -> None:
        """``kind`` changed: its pages are gone, so is their JSON."""
        self._known.pop(kind, None)


def catalog_kind_of(method: str) -> CatalogKind | None:
    """The catalog a list method fetches, else ``None``."""
    return _METHOD_KINDS.get(method)


@dataclass(frozen=True, slots=True)
class SharedWalk:
    """A complete public walk of a catalog as a fleet shares it (`CatalogBook.to_share`,
    `CatalogBook.adopt`): its items and how long its window has left."""

    items: tuple[Mapping[str, Any], ...]
    ttl: float
    """Seconds left of the walk's window (the minimum over its pages)."""


@dataclass(slots=True)
class _Held:
    """A catalog that was fresh when its walk completed."""

    catalog: Catalog
    generation: int
    expires_at: float
    received_at: float
    backed: bool
    """Its pages had no caching hints (2025): fresh until notified while covered."""


class _PagesJudge:
    """The `ListJudge` of one catalog: a `ListWalk` walks it as it walks resources."""

    def __init__(self, pages: ListPages, policy: Policy, clock: Callable[[], float]) -> None:
        self.policy = policy
        self._pages = pages
        self.clock = clock

    def lookup_list_page(self, cursor: str | None, partition: Partition) -> ListReply | None:
        return self._pages.lookup(cursor, partition, self.clock())

    def begin_list(self, cursor: str | None, partition: Partition) -> ListTicket:
        return self._pages.begin(cursor, partition)

    def finish_list(
        self, ticket: ListTicket, reply: ListReply | RequestFailed
    ) -> ListReply | RequestFailed | None:
        return self._pages.finish(ticket, reply, self.clock())

    def page_window(self, cursor: str | None, partition: Partition) -> tuple[float, bool] | None:
        return self._pages.window(cursor, partition)


@dataclass(slots=True)
class CatalogWalk:
    """A walk of one catalog for one partition; ``generation``: the catalog's when it
    began, then (`CatalogBook.settle`) the one its complete walk is true under."""

    kind: CatalogKind
    partition: Partition
    generation: int
    walk: ListWalk


class CatalogBook:
    """Every catalog of one server: pages, generations, coverage and what was walked."""

    def __init__(
        self,
        store: Store,
        server_id: str,
        policy: Policy,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
        default_partition: Partition = PUBLIC,
    ) -> None:
        self.policy = policy
        self._default = default_partition
        self._clock = clock
        self._wall_clock = wall_clock
        self.pages = {
            kind: ListPages(store, server_id, policy, CATALOG_METHODS[kind])
            for kind in CATALOG_KINDS
        }
        self._judges = {
            kind: _PagesJudge(self.pages[kind], policy, clock) for kind in CATALOG_KINDS
        }
        self._held: dict[tuple[CatalogKind, Partition], _Held] = {}
        """Catalogs fresh when walked; one goes when one of its pages leaves the store,
        and past `limit` the oldest goes (its items are outside the store's byte bound)."""
        self._problems: dict[tuple[CatalogKind, Partition], tuple[int, Catalog]] = {}
        """The last failed walk per (kind, partition); past `limit` the oldest goes."""
        self.limit = LIMIT
        self._reasons: dict[CatalogKind, Reason] = dict.fromkeys(CATALOG_KINDS, "not_cached")
        self._covering: dict[SubscriptionId, frozenset[CatalogKind]] = {}
        self._covered: dict[CatalogKind, int] = {}
        self._denied = Denials(LIMIT)
        """(kind, partition) refused, until that partition's own walk succeeds."""
        self._proved = Denials(LIMIT)
        """(kind, partition) whose own walk here succeeded since its last refusal: only
        those (and this client's default partition) take a fleet's shared walk. A
        refusal another worker heard is not known here, so a principal takes a walk
        from the store only once this worker saw the server let it list (invariant 12
        for catalogs, without sharing the refusals themselves)."""
        self.unusable = False
        """The server cannot be used: no hit-table row is built again."""
        self.rows: dict[CatalogKind, dict[Partition, tuple[Catalog, float]]] = {
            kind: {} for kind in CATALOG_KINDS
        }
        """The hit tables: kind -> partition -> (the fresh catalog, until when). A row
        exists only while `lookup` would hand that catalog out (one dict lookup and
        one clock compare on the hit path); rebuilt whenever coverage or a
        generation moves."""
        self.walks = 0
        """Walks begun (each may take cached pages or fetch them)."""
        self._alone: dict[CatalogKind, int] = {}
        """Catalogs changed by a word only this client heard (a hint on an answer, the
        caller's), each with the mark of its latest such change: the fleet's store may
        still hold a walk filled before it, so none is taken (nor given) until a fleet
        published the change (`published_alone`: the list's generation in the store
        moved past every walk filled before it). Neither this client's own walks nor a
        change heard fleet-wide meanwhile (it may have been published before this one)
        end it."""
        self._marks = 0
        self.versions = PageVersions()

    # ------------------------------------------------------------------ queries

    def covers(self, kind: CatalogKind) -> bool:
        """Whether a live acknowledged stream carries ``kind``'s ``list_changed``."""
        return kind in self._covered

    def held_kinds(self) -> set[CatalogKind]:
        """Catalogs someone asked for (the ones worth re-listing in the background)."""
        return {kind for kind, _ in self._held} | {kind for kind, _ in self._problems}

    def last_held(self, kind: CatalogKind, partition: Partition) -> Catalog | None:
        """The catalog ``partition`` was last handed (fresh or not since): what a caller
        may have acted on (`FreshCache.call_tool`). No I/O."""
        held = self._held_for(kind, partition)
        return None if held is None else held.catalog

    def unchanged(self, kind: CatalogKind, partition: Partition) -> Catalog | None:
        """The catalog ``partition`` was last handed if no change of ``kind`` was heard
        since its walk (its window may have closed). No I/O."""
        held = self._held_for(kind, partition)
        current = held is not None and held.generation == self.pages[kind].generation
        return held.catalog if current and held is not None else None

    def lookup(self, kind: CatalogKind, partition: Partition) -> Catalog | None:
        """The fresh catalog, or ``None`` when a walk is needed. No I/O, no copy."""
        held = self._held_for(kind, partition)
        if held is None or held.generation != self.pages[kind].generation:
            return None
        if kind in self._covered:
            if held.backed or self.policy.subscription_backed:
                return held.catalog
        elif self.policy.uncovered == "read_before_use":
            return None
        return held.catalog if self._clock() < held.expires_at else None

    def _index(self, kind: CatalogKind) -> None:
        """Rebuild ``kind``'s hit-table rows from what is held and covered now."""
        rows = self.rows[kind]
        rows.clear()
        if self.unusable:
            return
        generation = self.pages[kind].generation
        covered = kind in self._covered
        for (held_kind, partition), held in self._held.items():
            if held_kind != kind or held.generation != generation:
                continue
            if covered and (held.backed or self.policy.subscription_backed):
                rows[partition] = (held.catalog, float("inf"))
            elif covered or self.policy.uncovered == "ttl":
                rows[partition] = (held.catalog, held.expires_at)

    def hit(self, kind: CatalogKind, partition: Partition, now: float) -> Catalog | None:
        """What `lookup` hands out, from the hit tables alone: ``partition``'s own row,
        else the shared public one where `_held_for` would take it. Dict lookups only,
        so another thread may ask (`SyncFreshCache`); a miss says nothing (ask `lookup`)."""
        rows = self.rows[kind]
        row = rows.get(partition)
        if (
            row is None
            and partition != PUBLIC
            and self.policy.share_public
            and (kind, partition) not in self._held
            and (kind, partition) not in self._denied
        ):
            row = rows.get(PUBLIC)
        return row[0] if row is not None and now < row[1] else None

    def _held_for(self, kind: CatalogKind, partition: Partition) -> _Held | None:
        """``partition``'s own catalog, else the shared public one where allowed (never
        while a denial of ``partition`` stands: only its own walk ends that)."""
        held = self._held.get((kind, partition))
        if (
            held is None
            and partition != PUBLIC
            and self.policy.share_public
            and (kind, partition) not in self._denied
        ):
            held = self._held.get((kind, PUBLIC))
        return held

    def status(self, kind: CatalogKind, partition: Partition) -> Catalog:
        """What `lookup` or a walk would hand out now, without any I/O."""
        fresh = self.lookup(kind, partition)
        if fresh is not None:
            return fresh
        generation = self.pages[kind].generation
        problem = self._problems.get((kind, partition))
        if problem is not None and problem[0] == generation:
            return self._maybe_stale(problem[1], partition)
        held = self._held.get((kind, partition))
        if held is not None and held.generation == generation:
            if kind not in self._covered and self.policy.uncovered == "read_before_use":
                return Catalog(kind, AWAITING_FRESH_SOURCE, "uncovered")
            return Catalog(kind, AWAITING_FRESH_SOURCE, "expired")
        return Catalog(kind, AWAITING_FRESH_SOURCE, self._reasons[kind])

    # ------------------------------------------------------------------ walks

    def begin(self, kind: CatalogKind, partition: Partition) -> CatalogWalk:
        """A walk to run now; cached pages are taken only when the catalog is covered
        (or the policy relaxes read-before-use)."""
        self.walks += 1
        # A denied partition takes no cached page (not its own from before the
        # denial, not a shared one): only its own successful read ends a denial.
        cached = (kind in self._covered or self.policy.uncovered == "ttl") and (
            (kind, partition) not in self._denied
        )
        walk = ListWalk(self._judges[kind], partition, cached=cached)
        return CatalogWalk(kind, partition, self.pages[kind].generation, walk)

    def settle(self, done: CatalogWalk) -> Catalog:
        """Judge a finished walk: the fresh catalog (kept for the next callers), or
        an explicit state (with the last-known catalog, labelled ``stale``, where
        `Policy.stale_catalogs_on_error` opted in)."""
        kind, partition, walk = done.kind, done.partition, done.walk
        result = walk.result
        assert result is not None
        # A complete walk, and the failed page that ended a walk, are of the current
        # generation (`ListPages.finish` starts the walk again when a change overtook
        # an answer), so the result is true under this one.
        generation = done.generation = self.pages[kind].generation
        if result.state != FRESH:
            return self._failed(done, result)
        items = tuple(walk.items)  # frozen when each page landed (`ListPages.finish`)
        handed = Catalog(
            kind,
            FRESH,
            items=items,
            version=self.versions.version(kind, walk.pages),
            fetched_at=self._wall_clock(),
            server_read=result.server_read,
            excluded=_excluded(walk.pages),
        )
        public = not walk.private and self.policy.share_public
        held = _Held(
            replace(handed, server_read=False) if handed.server_read else handed,
            generation,
            walk.expires_at,
            self._clock(),
            walk.hintless,
        )
        self._keep(kind, partition, PUBLIC if public else partition, held)
        self._denied.cleared(kind, partition)  # its own walk succeeded (see `begin`)
        self._proved.note(kind, partition)
        return handed

    def _keep(
        self, kind: CatalogKind, partition: Partition, stored: Partition, held: _Held
    ) -> None:
        """Hold ``held`` for ``stored`` (``partition``'s own, or the shared public one)."""
        key = (kind, partition)
        self._held.pop((kind, stored), None)
        self._held[(kind, stored)] = held
        while len(self._held) > self.limit:
            old_kind, old_partition = next(iter(self._held))
            del self._held[(old_kind, old_partition)]
            self.rows[old_kind].pop(old_partition, None)
        if stored != partition:
            self._held.pop(key, None)  # its own copy is superseded by the shared one
        self._problems.pop(key, None)
        self._reasons[kind] = "not_cached"
        self._index(kind)

    # ------------------------------------------------------------------ a fleet's walks

    def shares(self, done: CatalogWalk) -> bool:
        """Whether ``done`` may be taken from, or given to, the other workers of a fleet:
        the catalog is covered by a live acknowledged stream (a fleet-wide change is
        heard), no change only this client heard is pending, public catalogs are shared,
        and ``done``'s partition is not denied: it is this client's default one, or its
        own walk here succeeded since its last refusal (`_proved`)."""
        return done.kind not in self._alone and self._may_share(done)

    def _may_share(self, done: CatalogWalk) -> bool:
        return (
            not self.unusable
            and done.kind in self._covered
            and self.policy.share_public
            and (done.kind, done.partition) not in self._denied
            and (done.partition == self._default or (done.kind, done.partition) in self._proved)
        )

    def to_share(self, done: CatalogWalk) -> SharedWalk | None:
        """``done``'s catalog as the fleet may share it, else ``None``: only a complete
        public walk with caching hints, every page from the server, whose window is
        still open, and still current."""
        walk = done.walk
        if (
            not self.shares(done)
            or walk.result is None
            or walk.result.state != FRESH
            or walk.private
            or walk.hintless
            or not walk.all_from_server  # a cached page may predate the fleet's fence
            or done.generation != self.pages[done.kind].generation
        ):
            return None
        held = self._held.get((done.kind, PUBLIC))
        ttl = walk.expires_at - self._clock()
        if held is None or held.generation != done.generation or not 0 < ttl < float("inf"):
            return None
        return SharedWalk(held.catalog.items, ttl)

    def adopt(self, done: CatalogWalk, shared: SharedWalk) -> Catalog | None:
        """Another worker's walk, found current in the fleet's store (its fill fenced by
        the shared generation: walked after the last change published): fresh here only
        while `shares` holds and no change landed since ``done`` began; else ``None``
        (walk it)."""
        kind = done.kind
        generation = self.pages[kind].generation
        if not self.shares(done) or done.generation != generation or shared.ttl <= 0:
            return None
        items = tuple(frozen(item) for item in shared.items)
        handed = Catalog(
            kind, FRESH, items=items, version=catalog_version(items), fetched_at=self._wall_clock()
        )
        now = self._clock()
        held = _Held(handed, generation, now + shared.ttl, now, False)
        self._keep(kind, done.partition, PUBLIC, held)
        return handed

    def _failed(self, done: CatalogWalk, result: ListResult) -> Catalog:
        kind, partition = done.kind, done.partition
        key = (kind, partition)
        reason: Reason = _reason(result.reason)
        state: State = (
            DENIED
            if result.state == DENIED
            else NOT_FOUND
            if result.state == NOT_FOUND
            else AWAITING_FRESH_SOURCE
        )
        problem = Catalog(kind, state, reason, server_read=result.server_read, detail=result.detail)
        if state in (DENIED, NOT_FOUND):
            # Do not offer it to this principal; its copy is dropped (DESIGN §1).
            self._held.pop(key, None)
            self.rows[kind].pop(partition, None)
            if state == DENIED:
                self._denied.note(kind, partition)
                self._proved.cleared(kind, partition)
        self._problems.pop(key, None)
        self._problems[key] = (done.generation, problem)
        _trim(self._problems, self.limit)
        return self._maybe_stale(problem, partition)

    def timed_out(self, kind: CatalogKind, partition: Partition) -> Catalog:
        """The caller's deadline passed before the walk completed."""
        problem = Catalog(
            kind,
            AWAITING_FRESH_SOURCE,
            "timeout",
            server_read=True,
            detail="the list did not complete before the deadline",
        )
        return self._maybe_stale(problem, partition)

    def _maybe_stale(self, problem: Catalog, partition: Partition) -> Catalog:
        """The opt-in last-known catalog, labelled ``stale`` with its age."""
        if not self.policy.stale_catalogs_on_error or problem.reason not in STALE_REASONS:
            return problem
        held = self._held_for(problem.kind, partition)
        if held is None:
            return problem
        return labelled_stale(held.catalog, problem, held.received_at, self._clock())

    # ------------------------------------------------------------------ changes

    def invalidate(self, kind: CatalogKind, reason: Reason, *, alone: bool = False) -> bool:
        """``kind`` changed (or may have): nothing walked before now is fresh; walks in
        flight start again. Returns whether anyone had asked for it (re-list it).
        ``alone``: a change only this client heard: no other worker's walk is taken
        for it (`shares`) until a fleet published it (`published_alone`)."""
        if alone:
            self._marks += 1
            self._alone[kind] = self._marks
        self._reasons[kind] = reason
        self.pages[kind].invalidate()
        self.versions.forget(kind)
        self._index(kind)
        return kind in self.held_kinds()

    def heard_alone(self, done: CatalogWalk) -> int | None:
        """The mark of the change of ``done``'s catalog only this client heard and the
        fleet was not told of yet, when that alone keeps ``done`` from being shared
        (worth publishing); else ``None``."""
        mark = self._alone.get(done.kind)
        return mark if mark is not None and self._may_share(done) else None

    def published_alone(self, kind: CatalogKind, mark: int) -> None:
        """The fleet was told of change ``mark`` of ``kind`` (its list's generation in the
        store moved after it): shared walks stand in again, unless a later change only
        this client heard came meanwhile."""
        if self._alone.get(kind) == mark:
            del self._alone[kind]

    def reason_now(self, kind: CatalogKind) -> Reason:
        """Why ``kind`` is not fresh after an acknowledgment newly covers it: a catalog
        held is now ``invalidated``; one already not fresh keeps its reason."""
        generation = self.pages[kind].generation
        held = any(k == kind and h.generation == generation for (k, _), h in self._held.items())
        return "invalidated" if held else self._reasons[kind]

    def acknowledged(
        self, subscription_id: SubscriptionId, kinds: frozenset[CatalogKind]
    ) -> list[CatalogKind]:
        """An acknowledgment honoured ``kinds``: those no other stream covered are
        invalidated (a new stream proves nothing about the time before it)."""
        self._covering[subscription_id] = kinds
        newly = []
        for kind in CATALOG_KINDS:
            if kind in kinds:
                before = self._covered.get(kind, 0)
                self._covered[kind] = before + 1
                if before == 0:
                    newly.append(kind)
                    self._index(kind)
        return newly

    def covered_by(self, subscription_id: SubscriptionId) -> frozenset[CatalogKind]:
        return self._covering.get(subscription_id, frozenset())

    def dropped(self, subscription_id: SubscriptionId) -> None:
        """A subscription is gone: what it covered is covered by one stream fewer."""
        for kind in self._covering.pop(subscription_id, frozenset()):
            left = self._covered.get(kind, 0) - 1
            if left > 0:
                self._covered[kind] = left
            else:
                self._covered.pop(kind, None)
                self._index(kind)

    def evicted(self, key: EntryKey) -> None:
        """A page left the store: the catalog walked over it goes too."""
        kind = catalog_kind_of(key[1])
        if kind is not None:
            self.pages[kind].evicted(key)
            if self._held.pop((kind, key[3]), None) is not None:
                self.rows[kind].pop(key[3], None)


def _trim(book: dict[Any, Any], limit: int) -> None:
    """Forget the oldest entries of ``book`` past ``limit``."""
    while len(book) > limit:
        del book[next(iter(book))]


def _reason(reason: str | None) -> Reason:
    if reason in ("timeout", "unreachable", "server_error", "denied", "not_found", "expired"):
        return reason  # type: ignore[return-value]
    return "invalidated"


__all__ = [
    "CATALOG_FIELDS",
    "CATALOG_KINDS",
    "CATALOG_METHODS",
    "Catalog",
    "CatalogBook",
    "CatalogChange",
    "CatalogKind",
    "CatalogWalk",
    "LIST_METHODS",
    "ListKind",
    "SharedWalk",
    "catalog_kind_of",
    "catalog_version",
]
