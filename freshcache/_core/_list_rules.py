"""What a list change, a list page and a catalog walk do (DESIGN §5 lists, §2 inv. 1, 3).

A part of `FreshnessEngine`: ``resources/list`` pages (`ListPages`) and the catalogs
(`CatalogBook`) judged with the engine's standing (a server that cannot be used hands
out nothing fresh), and the decisions a list's change makes (`Relist`, `Relisten`).
"""

from __future__ import annotations

from collections.abc import Iterable

from ._catalogs import CATALOG_KINDS, Catalog, CatalogBook, CatalogKind, CatalogWalk, ListKind
from ._copies import Copies
from ._coverage import Coverage
from ._entries import Partition
from ._events import Decision, ListReply, ReadResource, Relist, Relisten, RequestFailed
from ._lists import ListPages, ListTicket
from ._model import AWAITING_FRESH_SOURCE, FRESH, STALE


class ListRules:
    """The resource list's pages and the catalogs, for one engine."""

    def __init__(
        self, copies: Copies, coverage: Coverage, selected: set[str], catalogs: CatalogBook
    ) -> None:
        self.copies = copies
        self.coverage = coverage
        self.selected = selected
        """The engine's selection (the same set)."""
        self.pages = ListPages(copies.store, copies.server_id, copies.policy)
        """``resources/list`` pages (`ListPages`)."""
        self.catalogs = catalogs
        self.wanted = False
        """A catalog was asked for: the listen is wanted for the lists' changes."""

    # ------------------------------------------------------------------ resources/list

    def lookup_page(self, cursor: str | None, partition: Partition) -> ListReply | None:
        return self.pages.lookup(cursor, partition, self.copies.clock())

    def begin_page(self, cursor: str | None, partition: Partition) -> ListTicket:
        self.copies.counters.list_requests += 1
        return self.pages.begin(cursor, partition)

    def finish_page(
        self, ticket: ListTicket, reply: ListReply | RequestFailed
    ) -> ListReply | RequestFailed | None:
        judged = self.pages.finish(ticket, reply, self.copies.clock())
        if judged is None and isinstance(reply, ListReply):
            self.copies.counters.superseded_replies += 1
        return judged

    def complete(self, listed: Iterable[str], partition: Partition) -> list[Decision]:
        """A full re-list finished: selected URIs that left it are checked by a direct read."""
        present = set(listed)
        decisions: list[Decision] = []
        for uri in sorted(self.selected - present):
            # Invariant 3: the list alone does not decide; a direct read does.
            self.copies.invalidate(uri, "invalidated", "left_list", None, True)
            decisions.append(ReadResource(uri, partition, "left_list"))
        return decisions

    def resources_changed(self, cause: str) -> list[Decision]:
        """``resources/list`` changed (or may have): its pages go; it is re-listed in
        the background only when someone relies on it (a URI selected, a list walked),
        as a catalog is only when someone asked for it."""
        self.pages.invalidate()
        return [Relist(cause)] if self.selected or self.pages.asked else []

    def changed_elsewhere(self, name: str, cause: str = "list_changed") -> list[Decision]:
        """`FreshnessEngine.list_changed_elsewhere`."""
        self.copies.counters.notifications += 1
        if name == "resources":
            return [
                *self.resources_changed(cause),
                *self.invalidate("resource_templates", cause, alone=False),
            ]
        for kind in CATALOG_KINDS:
            if kind == name:
                return self.invalidate(kind, cause, alone=False)
        return []  # a list this version does not know: nothing of it is held

    # ------------------------------------------------------------------ both

    def generation(self, kind: ListKind) -> int:
        """The generation of list ``kind`` (``resources`` or a catalog): what a walk
        that completes now is true under."""
        return (self.pages if kind == "resources" else self.catalogs.pages[kind]).generation

    def current(self, kind: ListKind, generation: int, closes_at: float = float("inf")) -> bool:
        """Whether a walk of ``kind`` true under ``generation`` is still current: no
        change of the list landed since (invariant 1), the server still usable, and
        the walk's window (`ListWalk.closes_at`) still open, as at the walk's end."""
        return (
            self.copies.unusable is None
            and generation == self.generation(kind)
            and self.copies.clock() < closes_at
        )

    # ------------------------------------------------------------------ catalogs

    def catalog_lookup(self, kind: CatalogKind, partition: Partition) -> Catalog | None:
        """The fresh catalog ``kind`` for ``partition``, or ``None``: walk it."""
        if self.copies.unusable is not None:
            return None
        return self.catalogs.lookup(kind, partition)

    def catalog_status(self, kind: CatalogKind, partition: Partition) -> Catalog:
        """What `catalog_lookup` or a walk would hand out now, without any I/O."""
        unusable = self.copies.unusable
        if unusable is not None:
            return Catalog(kind, AWAITING_FRESH_SOURCE, "server_error", detail=unusable)
        return self.catalogs.status(kind, partition)

    def asked(self) -> list[Decision]:
        """A catalog is being walked: the first time, a listen is wanted for the
        catalogs' changes, so a cache used only for tools, prompts or templates (nothing
        selected) hears them too: the acknowledgment covers what it honoured, later
        calls are hits and a change arrives as an invalidation."""
        if self.wanted or self.coverage.listen_supported is False:
            return []
        self.wanted = True
        return [Relisten(frozenset(self.selected), "catalog_asked")]

    def settle(self, done: CatalogWalk) -> Catalog:
        """Judge a finished walk (see `CatalogBook.settle`)."""
        catalog = self.catalogs.settle(done)
        unusable = self.copies.unusable
        if unusable is not None and catalog.state in (FRESH, STALE):
            for rows in self.catalogs.rows.values():
                rows.clear()
            return Catalog(done.kind, AWAITING_FRESH_SOURCE, "server_error", detail=unusable)
        return catalog

    def invalidate(
        self, kind: CatalogKind, cause: str = "invalidated", *, alone: bool = True
    ) -> list[Decision]:
        """`FreshnessEngine.invalidate_catalog`."""
        if self.catalogs.invalidate(kind, "invalidated", alone=alone):
            return [Relist(cause, kind)]
        return []


__all__ = ["ListRules"]
