"""`LoaderSource`: a `Source` around any ``async (uri) -> contents`` function.

DESIGN §4 ("a generic wrapper for a user's own async loader"). Agents often already
have a loader (a database query, a file read, a call into another client) and a feed
of change events (a message bus, a file watcher). This source wraps both: the loader
answers reads, the feed becomes the subscription stream.

**Where an answer came from.** A loader returns `Loaded(contents, from_server=...)`:

- ``from_server=True``: it asked the source of truth for this answer.
- ``from_server=False``: it answered from a copy of its own. The engine never makes
  content fresh from such an answer (invariant 1, seed case 3): the result is
  ``awaiting_fresh_source`` (``local_copy_only``), always.
- ``from_server=None``, or a bare value (``str``, ``bytes``, `ResourceContents`): it
  cannot tell. Such an answer is accepted as the server's **until freshcache has
  heard of a change to that URI**, and treated as a local copy (``local_copy_only``)
  from then on, until the loader answers that URI with ``from_server=True``.

The rule itself is the engine's (`ChangesHeard`); this source only reports: every
change its feed names reaches the engine (on the open stream, or, while none is
open, as hints on its next reply), and so does a URI that left the list between two
lists. TTL expiry is *not* a change heard of: an unknown-origin answer after the
``ttlMs`` window is still accepted while no change was heard. If your loader may
answer from its own cache past a change, say ``from_server`` explicitly.

**Failures.** A loader signals failures by raising (or returning a `RequestFailed`):

===============================================  ==============================
what the loader does                             result state
===============================================  ==============================
raises ``PermissionError``                       ``denied``
raises ``FileNotFoundError`` or ``KeyError``     ``not_found``
returns ``None``                                 ``not_found``
raises ``TimeoutError`` (asyncio's, anyio's)     awaiting (``timeout``)
raises ``ConnectionError``, another ``OSError``  awaiting (``unreachable``)
raises anything else                             awaiting (``server_error``)
returns a `RequestFailed`                        the state its ``kind`` names
===============================================  ==============================

**The change feed** (``changes=``) is an async iterator of: a URI string (that
resource changed), ``LoaderSource.LIST_CHANGED`` (the list of resources changed),
``LoaderSource.LOST`` (the feed itself missed events, e.g. it reconnected: every URI
is invalidated and re-read). It is read by one background task from the first
``start``/``listen`` on, and shared by every subscription stream. When it ends the
streams close and URIs are read before each use from then on; when it raises, that
counts as a loss first. Without a feed, every selected URI is read before each use.

**Catalogs** (``catalogs=``, optional) is an async function ``(kind) -> items``: the
tools, prompts or resource templates there are (``kind`` is ``"tools"``, ``"prompts"``
or ``"resource_templates"``), as MCP-shaped mappings (a tool's ``name`` and
``inputSchema``, a template's ``name`` and ``uriTemplate``; items without them are left
out), in one page whose ``ttlMs`` is ``default_ttl_ms``. ``None`` means there is no
such catalog (``not_found``); raising maps as for reads. The feed names catalog
changes with ``LoaderSource.TOOLS_CHANGED`` and ``LoaderSource.PROMPTS_CHANGED``;
resource templates change with ``LoaderSource.LIST_CHANGED``. With a feed and
``catalogs=`` a catalog is fresh until such a change (or ``default_ttl_ms``); without a
feed it is listed again before each use. Without ``catalogs=``, ``cache.tools()`` &
co. answer ``awaiting_fresh_source`` (``server_error``) with a detail saying so.
``tools/call`` is not a loader's: `FreshCache.call_tool` answers ``unavailable``.
"""

from __future__ import annotations

import base64
import itertools
import logging
from collections import deque
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, replace
from typing import Any, Final

import anyio

from .._core import (
    CATALOG_FIELDS,
    CacheScope,
    CatalogKind,
    CatalogListChanged,
    ChangesMissed,
    FailureKind,
    ListenAcknowledged,
    ListenStarted,
    ListenUnsupported,
    ListReply,
    Partition,
    ReadReply,
    RequestFailed,
    ResourceContents,
    ResourceInfo,
    ResourceListChanged,
    ResourceUpdated,
    StreamClosed,
    StreamEvent,
    StreamLost,
    UntrustedMessage,
)
from .._core._backlog import overflowed
from .._errors import ConfigurationError
from .._protocol._tools import ToolReply
from .._protocol._wire import catalog_reply
from ._background import BackgroundTask
from ._source import PROTOCOL_VERSION, CatalogPager, ServerInfo, no_tool_calls

log = logging.getLogger("freshcache")

Contents = str | bytes | ResourceContents | Sequence[ResourceContents]
"""What a loader may hand back as contents: text, bytes (a blob), or MCP items."""


@dataclass(frozen=True, slots=True)
class Loaded:
    """A loader's answer, with where it came from."""

    contents: Contents
    """Text, bytes (sent as a base64 blob), one `ResourceContents` or several."""
    from_server: bool | None
    """``True``: read from the source of truth now. ``False``: a local copy (never
    fresh). ``None``: cannot tell (fresh only until a change of the URI is heard of)."""
    ttl_ms: float | None = None
    """How long the answer may be served without asking again; ``None``: the
    source's ``default_ttl_ms``."""
    cache_scope: CacheScope | None = None
    """``"public"`` or ``"private"`` (the default)."""
    mime_type: str | None = None
    """MIME type of text or bytes contents."""


LoaderResult = Loaded | Contents | RequestFailed | None
Loader = Callable[[str], Awaitable[LoaderResult]]
Lister = Callable[[], Awaitable[Iterable[str | ResourceInfo]]]
CatalogLoader = Callable[[CatalogKind], Awaitable[Iterable[Mapping[str, Any]] | None]]
"""``catalogs=``: the items of a catalog (``tools``, ``prompts``, ``resource_templates``)."""


class _Signal:
    """A feed item that is not a URI (`LoaderSource.LIST_CHANGED`, `LoaderSource.LOST`)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"LoaderSource.{self.name}"


LIST_CHANGED: Final = _Signal("LIST_CHANGED")
LOST: Final = _Signal("LOST")
TOOLS_CHANGED: Final = _Signal("TOOLS_CHANGED")
PROMPTS_CHANGED: Final = _Signal("PROMPTS_CHANGED")

_MAX_PENDING = 1024
"""Per stream; a stream that falls further behind is lost (its URIs are re-read)."""


@dataclass(eq=False)
class _Inbox:
    """Feed items waiting for one open stream."""

    uris: frozenset[str]
    items: deque[tuple[str, str]]
    wake: anyio.Event
    overflowed: bool = False


class LoaderSource:
    """A `Source` that calls ``load(uri)`` for reads and reads ``changes`` for the stream.

    See the module docstring for what ``from_server`` means, how exceptions map to
    result states and what the change feed may carry. ``list`` (optional) returns the
    URIs (or `ResourceInfo` items) there are; ``default_ttl_ms`` is the ``ttlMs`` of answers
    and lists that name none (``None``: 0, read again before each use). The loader is
    called with the URI only: one loader serves one principal. ``catalogs``
    (optional) returns the items of a catalog (see the module docstring).
    """

    LIST_CHANGED: Final = LIST_CHANGED
    """Put this in the change feed when the list of resources changed."""
    LOST: Final = LOST
    """Put this in the change feed when the feed itself may have missed changes."""
    TOOLS_CHANGED: Final = TOOLS_CHANGED
    """Put this in the change feed when the tools (``catalogs("tools")``) changed."""
    PROMPTS_CHANGED: Final = PROMPTS_CHANGED
    """Put this in the change feed when the prompts changed."""

    def __init__(
        self,
        load: Loader,
        *,
        changes: AsyncIterable[object] | None = None,
        list: Lister | None = None,
        catalogs: CatalogLoader | None = None,
        identity: str | None = None,
        default_ttl_ms: float | None = None,
    ) -> None:
        if not callable(load):
            raise ConfigurationError(
                f"load must be an async function (uri) -> contents, got {load!r}"
            )
        if list is not None and not callable(list):
            raise ConfigurationError(f"list must be an async function () -> URIs, got {list!r}")
        if catalogs is not None and not callable(catalogs):
            raise ConfigurationError(
                f"catalogs must be an async function (kind) -> items, got {catalogs!r}"
            )
        if changes is not None and not hasattr(changes, "__aiter__"):
            raise ConfigurationError(
                f"changes must be an async iterator of change events, got {changes!r}"
            )
        if default_ttl_ms is not None and not default_ttl_ms >= 0:
            raise ConfigurationError(f"default_ttl_ms must be >= 0 or None, got {default_ttl_ms!r}")
        self._load = load
        self._list = list
        self._catalogs = catalogs
        self._changes = changes
        self._identity = identity if identity is not None else _identity_of(load)
        self.default_ttl_ms = default_ttl_ms
        self._undelivered: deque[StreamEvent] = deque()
        """Changes the feed named while no stream was open: hints on the next reply."""
        self._listed: set[str] | None = None
        # The feed and the streams it serves.
        self._inboxes: set[_Inbox] = set()
        self._feed_over: str | None = None
        self._feed_task = BackgroundTask(f"change feed of {self._identity}", self._pump)
        self._ids = itertools.count(1)

    def __repr__(self) -> str:
        return f"LoaderSource({self._identity!r})"

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def list_catalog(self) -> CatalogPager | None:
        """Catalog pages when this loader was given ``catalogs=``; else ``None`` (every
        catalog is a state)."""
        return None if self._catalogs is None else self._list_catalog

    ask_pushed_bodies = None
    """A loader's feed carries change hints only."""
    shared_catalogs = None
    forward = None
    """A loader reaches no MCP server: it passes no request through."""

    @property
    def queued(self) -> int:
        """Feed items taken from the change feed that the open streams have not handed
        on yet (summed over them): ``0`` once every change heard reached the cache."""
        return sum(len(inbox.items) for inbox in self._inboxes)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> ServerInfo:
        has_feed = self._changes is not None
        if has_feed:
            self._feed_task.start()
        return ServerInfo(
            reachable=True,
            supported_versions=(PROTOCOL_VERSION,),
            protocol_version=PROTOCOL_VERSION,
            subscribe=has_feed,
            list_changed=has_feed and self._list is not None,
            listen=has_feed and self._feed_over is None,
            name="loader",
            detail="" if has_feed else "no change feed: selected URIs are read before each use",
        )

    async def aclose(self) -> None:
        await self._feed_task.stop()

    # ------------------------------------------------------------------ reads

    async def read_resource(self, uri: str, principal: Partition) -> ReadReply | RequestFailed:
        try:
            answer = await self._load(uri)
        except Exception as exc:
            return replace(failure_from_exception(exc), hints=self._take_undelivered())
        match answer:
            case RequestFailed():
                return replace(answer, hints=self._take_undelivered())
            case None:
                return RequestFailed(
                    "not_found",
                    f"the loader found nothing for {uri}",
                    hints=self._take_undelivered(),
                )
            case Loaded(contents=contents, from_server=said, ttl_ms=ttl, cache_scope=scope):
                mime = answer.mime_type
            case _:
                contents, said, ttl, scope, mime = answer, None, None, None, None
        try:
            items = _contents(uri, contents, mime)
        except TypeError as exc:
            return RequestFailed("server_error", str(exc), hints=self._take_undelivered())
        return ReadReply(
            items,
            ttl_ms=ttl if ttl is not None else self.default_ttl_ms,
            cache_scope=scope,
            from_server=said,
            hints=self._take_undelivered(),
        )

    async def call_tool(
        self, params: Mapping[str, Any], principal: Partition, tool: Mapping[str, Any] | None
    ) -> ToolReply | RequestFailed:
        """A loader reaches no MCP server: it cannot call tools."""
        return no_tool_calls(self)

    async def list_resources(
        self, cursor: str | None, principal: Partition
    ) -> ListReply | RequestFailed:
        if self._list is None:
            return RequestFailed("not_found", "this LoaderSource was given no list= function")
        if cursor is not None:
            return RequestFailed(
                "not_found", f"unknown cursor {cursor!r}: loader lists have one page"
            )
        try:
            listed = await self._list()
            resources = tuple(
                item if isinstance(item, ResourceInfo) else ResourceInfo(str(item))
                for item in listed
            )
        except Exception as exc:
            return failure_from_exception(exc)
        present = {r.uri for r in resources}
        # A URI that left the list changed, as far as an unknown-origin loader goes.
        left = [] if self._listed is None else sorted(self._listed - present)
        self._listed = present
        hints = (*self._take_undelivered(), *(ResourceUpdated(uri, None) for uri in left))
        return ListReply(resources, ttl_ms=self.default_ttl_ms, hints=hints)

    async def _list_catalog(
        self, kind: CatalogKind, cursor: str | None, principal: Partition
    ) -> ListReply | RequestFailed:
        """The whole catalog ``kind`` as one page (``catalogs=``), with held hints."""
        assert self._catalogs is not None
        if cursor is not None:
            return RequestFailed(
                "not_found", f"unknown cursor {cursor!r}: loader catalogs have one page"
            )
        try:
            items = await self._catalogs(kind)
            listed = None if items is None else [dict(item) for item in items]
        except Exception as exc:
            return replace(failure_from_exception(exc), hints=self._take_undelivered())
        if listed is None:
            return RequestFailed(
                "not_found", f"the loader has no {kind}", hints=self._take_undelivered()
            )
        result: dict[str, Any] = {CATALOG_FIELDS[kind]: listed}
        if self.default_ttl_ms is not None:
            result["ttlMs"] = self.default_ttl_ms
        page = catalog_reply(kind, result)
        return replace(page, hints=self._take_undelivered())

    # ------------------------------------------------------------------ listening

    async def listen(
        self, uris: frozenset[str], list_changed: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        sid = f"loader-listen-{next(self._ids)}"
        yield ListenStarted(sid, uris, list_changed)
        if self._changes is None:
            yield ListenUnsupported("this LoaderSource was given no change feed (changes=)")
            return
        if self._feed_over is not None:
            yield ListenUnsupported(f"the change feed is over: {self._feed_over}")
            return
        self._feed_task.start()
        # The feed names tool and prompt changes; templates change with the resource list.
        covered = (
            frozenset({"tools", "prompts", "resource_templates"})
            if list_changed and self._catalogs is not None
            else frozenset()
        )
        inbox = _Inbox(uris, deque(), anyio.Event())
        self._inboxes.add(inbox)  # before the ack: nothing after it can be missed
        try:
            yield ListenAcknowledged(sid, uris, list_changed and self._list is not None, covered)
            while True:
                while not inbox.items:
                    if inbox.overflowed:
                        yield overflowed(sid, _MAX_PENDING)
                        return
                    await inbox.wake.wait()
                    inbox.wake = anyio.Event()
                kind, value = inbox.items.popleft()
                match kind:
                    case "updated":
                        yield ResourceUpdated(value, sid)
                    case "list_changed":
                        if list_changed:
                            yield ResourceListChanged(sid)
                    case "tools":
                        yield CatalogListChanged("tools", sid)
                    case "prompts":
                        yield CatalogListChanged("prompts", sid)
                    case "untrusted":
                        yield UntrustedMessage(value, sid)
                    case "closed":
                        yield StreamClosed(sid)
                        return
                    case _:  # "lost"
                        yield StreamLost(sid, value)
                        return
        finally:
            self._inboxes.discard(inbox)

    async def _pump(self) -> None:
        """The background task: read the feed once, fan each item out to every stream."""
        changes = self._changes
        assert changes is not None
        iterator = changes.__aiter__()
        try:
            async for item in iterator:
                self._take(item)
        except Exception as exc:
            detail = f"the change feed raised {type(exc).__name__}: {exc}"
            self._feed_over = detail
            self._deliver("lost", detail)
            return
        finally:
            close = getattr(iterator, "aclose", None)
            if close is not None:
                with anyio.move_on_after(1.0, shield=True):
                    try:
                        await close()
                    except Exception as exc:  # its own cleanup failing is not ours to raise
                        log.debug("closing the change feed: %r", exc)
        self._feed_over = "the change feed ended"
        self._deliver("closed", self._feed_over)

    def _take(self, item: object) -> None:
        if isinstance(item, str) and item:
            self._deliver("updated", item)
        elif item is LIST_CHANGED:
            self._deliver("list_changed", "")
        elif item is TOOLS_CHANGED:
            self._deliver("tools", "")
        elif item is PROMPTS_CHANGED:
            self._deliver("prompts", "")
        elif item is LOST:
            self._deliver("lost", "the change feed reported that it lost changes")
        else:
            # Not a change we understand: it can make nothing fresher (invariant 9).
            self._deliver("untrusted", f"unrecognised change feed item {item!r}")

    def _deliver(self, kind: str, value: str) -> None:
        if not self._inboxes:
            self._hold_undelivered(kind, value)
        for inbox in self._inboxes:
            if len(inbox.items) >= _MAX_PENDING:
                inbox.overflowed = True
            else:
                inbox.items.append((kind, value))
            inbox.wake.set()

    def _hold_undelivered(self, kind: str, value: str) -> None:
        """No stream is open: keep what makes content less fresh for the next reply."""
        match kind:
            case "updated":
                event: StreamEvent = ResourceUpdated(value, None)
            case "lost":
                event = ChangesMissed(value)
            case "tools":
                event = CatalogListChanged("tools", None)
            case "prompts":
                event = CatalogListChanged("prompts", None)
            case "list_changed" if self._catalogs is not None:
                event = CatalogListChanged("resource_templates", None)
            case _:
                return
        if self._undelivered and isinstance(self._undelivered[0], ChangesMissed):
            return  # everything is in doubt already
        if len(self._undelivered) >= _MAX_PENDING:
            event = ChangesMissed(f"more than {_MAX_PENDING} changes waiting")
        if isinstance(event, ChangesMissed):
            self._undelivered.clear()
        self._undelivered.append(event)

    def _take_undelivered(self) -> tuple[StreamEvent, ...]:
        held = tuple(self._undelivered)
        self._undelivered.clear()
        return held


def failure_from_exception(exc: BaseException) -> RequestFailed:
    """Map what a loader raised to a result-deciding failure (see the module table)."""
    kind: FailureKind
    if isinstance(exc, PermissionError):
        kind = "denied"
    elif isinstance(exc, (FileNotFoundError, KeyError)):
        kind = "not_found"
    elif isinstance(exc, TimeoutError):  # an OSError subclass: before the next line
        kind = "timeout"
    elif isinstance(exc, OSError):  # ConnectionError included
        kind = "unreachable"
    else:
        kind = "server_error"
    text = str(exc)
    return RequestFailed(kind, f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def _contents(uri: str, contents: object, mime_type: str | None) -> tuple[ResourceContents, ...]:
    match contents:
        case str():
            return (ResourceContents(uri, text=contents, mime_type=mime_type),)
        case bytes() | bytearray():
            blob = base64.b64encode(bytes(contents)).decode("ascii")
            return (ResourceContents(uri, blob=blob, mime_type=mime_type),)
        case ResourceContents():
            return (contents,)
        case Sequence() if all(isinstance(item, ResourceContents) for item in contents):
            return tuple(contents)
    raise TypeError(
        f"the loader returned {type(contents).__name__} for {uri}; return text, bytes, "
        "ResourceContents, a sequence of them, or Loaded(...)"
    )


def _identity_of(load: Callable[..., Any]) -> str:
    module = getattr(load, "__module__", None) or "?"
    name = getattr(load, "__qualname__", None) or type(load).__qualname__
    return f"loader:{module}.{name}"


__all__ = [
    "LIST_CHANGED",
    "LOST",
    "PROMPTS_CHANGED",
    "TOOLS_CHANGED",
    "CatalogLoader",
    "Loaded",
    "LoaderSource",
    "failure_from_exception",
]
