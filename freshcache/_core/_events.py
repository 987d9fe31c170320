"""Events the engine is fed and decisions it hands back (DESIGN §4).

Events are past-tense facts that a source saw on the wire or that the middleware
observed; decisions are imperatives for the middleware to carry out. All are frozen,
slotted dataclasses so they can be recorded, compared and replayed in tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ._model import CacheScope, Remediation, ResourceContents
from ._slots import filled_by_slots

FailureKind = Literal["timeout", "unreachable", "denied", "not_found", "server_error"]
"""Why a server request did not produce contents (see DESIGN §5 for the mapping)."""


# --- Replies to requests (what a source hands back for one read or one list page) ---


@filled_by_slots
@dataclass(frozen=True, slots=True)
class ReadReply:
    """Contents a source obtained for one ``resources/read``."""

    contents: tuple[ResourceContents, ...]
    ttl_ms: float | None = None
    """The result's ``ttlMs``; ``None`` (absent) counts as 0."""
    cache_scope: CacheScope | None = None
    from_server: bool | None = True
    """False when a loader answered from a local copy instead of the server; ``None``
    when it cannot tell: trusted only until a change of the URI is heard of (see
    `ChangesHeard`)."""
    multi_round_trip: bool = False
    """True for results of a retry with ``inputResponses``/``requestState``: never cached."""
    hintless: bool = False
    """The revision has no caching hints (2025-11-25): no ``ttlMs``/``cacheScope`` was
    ever possible. Counts as ``ttlMs`` 0 and private, except that a selected URI a live
    subscription covers stays fresh until notified (`Policy.hintless_ttl` for others)."""
    shared_copy: bool = False
    """A copy another principal's or worker's server read put in a shared store (the
    fleet's): not this principal's own read. Served only where the engine says so
    (`FreshnessEngine.may_share`); it never ends a denial."""
    hints: tuple[StreamEvent, ...] = ()
    """Change hints that arrived on this request's own answer (e.g. a
    ``resources/updated`` in the SSE answer before the result). The middleware feeds
    them to the engine *before* judging the reply, so a reply whose answer carried a
    hint for its own URI is never stored as fresh (invariant 9)."""


@dataclass(frozen=True, slots=True)
class ResourceInfo:
    """One entry of a ``resources/list`` page."""

    uri: str
    name: str | None = None
    mime_type: str | None = None
    item: Mapping[str, Any] | None = field(default=None, compare=False)
    """The entry as the server listed it, read-only: ``title``, ``description``,
    ``size``, ``annotations``, ``icons``, ``_meta``; ``None`` when no server listed it
    (a loader's own list)."""


@dataclass(frozen=True, slots=True)
class ListReply:
    """One page of a ``resources/list`` result, or of a catalog (``tools/list``, ...)."""

    resources: tuple[ResourceInfo, ...]
    next_cursor: str | None = None
    ttl_ms: float | None = None
    cache_scope: CacheScope | None = None
    hints: tuple[StreamEvent, ...] = ()
    """Change hints that arrived on this page's own answer (see `ReadReply.hints`)."""
    items: tuple[Mapping[str, Any], ...] = ()
    """A catalog page's items (tools, prompts or templates), deeply frozen."""
    item_bytes: int = 0
    """Size of `items` (JSON bytes), for the store's byte bound; once the page is
    stored, of its `resources` too, each with what its server listed (`ListPages`)."""
    hintless: bool = False
    """The revision has no caching hints (2025-11-25): see `ReadReply.hintless`."""
    excluded: tuple[tuple[str, str], ...] = ()
    """A catalog page's items left out by a protocol rule, as (name, reason): a tool
    whose ``x-mcp-header`` annotations are invalid (2026-07-28 over HTTP)."""


@dataclass(frozen=True, slots=True)
class RequestFailed:
    """A request that produced no contents; ``kind`` decides the result state."""

    kind: FailureKind
    detail: str = ""
    code: int | None = None
    """The JSON-RPC error code or HTTP status, when there was one."""
    hints: tuple[StreamEvent, ...] = ()
    """Change hints that arrived on this request's own answer (see `ReadReply.hints`)."""
    remediation: Remediation | None = None
    """A ``denied`` failure's structured denial envelope, when the server sent one."""
    lost: bool = False
    """The request may have reached the server and its answer was lost (cut, broken,
    unusable, or not in time): whatever it does may have happened. ``False`` when the
    server answered, or the request never left (`freshcache._protocol._reissue`)."""


# --- Stream events (a source yields these from its subscription stream) ---


@dataclass(frozen=True, slots=True)
class ListenStarted:
    """A ``subscriptions/listen`` request went out with this id and filter."""

    subscription_id: str | int
    resource_uris: frozenset[str]
    list_changed: bool


@dataclass(frozen=True, slots=True)
class ListenAcknowledged:
    """``notifications/subscriptions/acknowledged``: the honoured subset of the filter."""

    subscription_id: str | int
    resource_uris: frozenset[str]
    list_changed: bool
    catalogs: frozenset[str] = frozenset()
    """Catalogs whose changes the server will notify: ``tools`` (``toolsListChanged``),
    ``prompts`` (``promptsListChanged``), ``resource_templates`` (with
    ``resourcesListChanged``). Only what is named here is covered."""


@filled_by_slots
@dataclass(frozen=True, slots=True)
class ResourceUpdated:
    """``notifications/resources/updated`` for ``uri``.

    ``subscription_id`` is ``None`` when the envelope carried none: the hint still
    invalidates (invariant 9: a change hint may only make content less fresh).

    ``contents`` is a pushed body: the new contents of ``uri`` the server put in the
    notification because the listen asked for them (``embedResources``, a proposal:
    SEP-3119). Only the engine decides whether it may make ``uri`` fresh
    (`Policy.pushed_bodies`, an acknowledged stream that covers ``uri``); otherwise
    the notification only invalidates, as one without a body does.
    """

    uri: str
    subscription_id: str | int | None
    contents: tuple[ResourceContents, ...] | None = None


@dataclass(frozen=True, slots=True)
class ResourceListChanged:
    """``notifications/resources/list_changed``."""

    subscription_id: str | int | None


@dataclass(frozen=True, slots=True)
class CatalogListChanged:
    """``notifications/tools/list_changed`` (``kind`` ``tools``) or
    ``notifications/prompts/list_changed`` (``prompts``). Resource templates change
    with the resource list (`ResourceListChanged`)."""

    kind: Literal["tools", "prompts", "resource_templates"]
    subscription_id: str | int | None


@dataclass(frozen=True, slots=True)
class ChangesMissed:
    """The source may have missed changes of any URI (a change feed that lost events
    while no stream was open). Only a hint: no stream ended."""

    detail: str = ""


@dataclass(frozen=True, slots=True)
class StreamLost:
    """The subscription stream ended without the server's ``complete`` result."""

    subscription_id: str | int | None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class StreamClosed:
    """The server ended the subscription on purpose (``resultType: "complete"``)."""

    subscription_id: str | int | None


@dataclass(frozen=True, slots=True)
class ListenUnsupported:
    """The server has no ``subscriptions/listen`` (no capability, -32601/404, no ack)."""

    detail: str = ""


@dataclass(frozen=True, slots=True)
class UntrustedMessage:
    """A message the source could not trust (malformed, unknown id, wrong order)."""

    detail: str
    subscription_id: str | int | None = None


StreamEvent = (
    ListenStarted
    | ListenAcknowledged
    | ResourceUpdated
    | ResourceListChanged
    | CatalogListChanged
    | StreamLost
    | StreamClosed
    | ListenUnsupported
    | UntrustedMessage
    | ChangesMissed
)
"""Everything a subscription stream can report to the engine."""


# --- Decisions (the engine tells the middleware what to do) ---


@filled_by_slots
@dataclass(frozen=True, slots=True)
class ReadResource:
    """Read ``uri`` from the server now (in the background) for ``partition``."""

    uri: str
    partition: str | None
    cause: str


@dataclass(frozen=True, slots=True)
class Relist:
    """Fetch ``resources/list`` (or the catalog ``kind``) again from the first page."""

    cause: str
    kind: str = "resources"
    """``resources``, or a catalog: ``tools``, ``prompts``, ``resource_templates``."""


@dataclass(frozen=True, slots=True)
class Relisten:
    """Open a new ``subscriptions/listen`` stream for the current selection."""

    resource_uris: frozenset[str]
    cause: str


Decision = ReadResource | Relist | Relisten

ChangeHint = ResourceUpdated | ResourceListChanged | CatalogListChanged
"""A change hint: it may only make content less fresh (invariant 9)."""
