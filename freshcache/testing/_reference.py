"""The reference server: a transport-neutral MCP resource server with fault switches.

It holds resources whose text changes, answers reads and lists, keeps listening
subscribers and publishes notifications to them. Its faults (hold reads, time out,
deny, drop streams, go down, omit URIs from acknowledgments, notify before the
acknowledgment ...) are what the acceptance tables switch on. `InMemorySource`
talks to it directly; the wire servers in `freshcache.acceptance` put it behind real
HTTP and stdio transports.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .._core import (
    CatalogListChanged,
    ListenAcknowledged,
    ListReply,
    ReadReply,
    Remediation,
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
from .._core._frozen import frozen
from ._reference_catalogs import ReferenceCatalogs

Shape = Literal[
    "hint",
    "hint_no_id",
    "hint_unknown_id",
    "hint_body",
    "no_contents",
    "ttl_string",
    "ttl_bool",
    "input_rounds",
    "version_refused",
]
Fault = Literal[
    "timeout", "denied", "not_found", "server_error", "local_copy", "unreachable", Shape
]
"""What the next read of a URI does instead of answering normally: an outcome, or
an answer of an odd `Shape`."""

SHAPES: frozenset[str] = frozenset(get_args(Shape))
"""Faults that change the shape of an answer, not its outcome. Here they become
`ReadReply.hints` (a change hint on the read's own answer) and ``multi_round_trip``
(a result reached through ``requestState`` rounds); the wire servers act the rest
out in JSON (`freshcache.acceptance.ReferenceProtocol`)."""

Push = tuple[str, object]
"""A message queued for one subscriber: (kind, payload)."""

APPROVAL_URL = "https://reference.invalid/approve"
"""Where a remediable denial of the reference server sends the user."""

FOREIGN_SUBSCRIPTION = "not-a-subscription"
"""The subscription id a ``foreign_update`` push carries: one no client opened."""


TOOL_FAULTS = {
    "lost": "runs, and its answer is lost (HTTP: an SSE answer cut after a notification; "
    "stdio: the process dies)",
    "fails": "runs and fails: -32603 'tool NAME failed: customer record not found'",
    "ts_unknown": "refused as the TypeScript SDK does: an isError result "
    "'MCP error -32602: Tool NAME not found'",
    "asks": "answers input_required with a requestState; a call echoing it runs",
}
"""What `ReferenceServer.tool_faults` make the next call of a tool meet."""


def call_tool(
    server: ReferenceServer,
    name: object,
    arguments: object,
    params: Mapping[str, Any] | None = None,
) -> dict[str, object] | RequestFailed:
    """One ``tools/call`` on ``server``: a tool it lists answers with its name and
    arguments; any other (or one in ``tools_unknown_once``) is ``-32602`` "Unknown tool"
    (spec server/tools, error handling); one in ``tools_error_once`` runs and answers a
    tool error; one in ``tool_faults`` meets that fault once (`TOOL_FAULTS`). The server
    down is ``unreachable`` (the wire hangs up)."""
    if server.down:
        return RequestFailed("unreachable", "reference server is down")
    server.tool_calls.append(str(name))
    if name in server.tools_unknown_once or name not in server.catalogs.names("tools"):
        server.tools_unknown_once.discard(str(name))
        return RequestFailed("not_found", f"Unknown tool: {name}", code=-32602)
    shown = json.dumps(arguments or {}, sort_keys=True)
    match server.tool_faults.pop(str(name), None):
        case "lost":
            return RequestFailed("unreachable", f"{name} ran; its answer was lost", lost=True)
        case "fails":
            detail = f"tool {name} failed: customer record not found"
            return RequestFailed("server_error", detail, code=-32603)
        case "ts_unknown":
            text = f"MCP error -32602: Tool {name} not found"
            return {"isError": True, "content": [{"type": "text", "text": text}]}
        case "asks":
            server.tool_faults[f"{name}#state"] = f"confirm-{name}"
            return {"resultType": "input_required", "requestState": f"confirm-{name}"}
        case _:
            pass
    token = server.tool_faults.get(f"{name}#state")
    if token is not None and (params or {}).get("requestState") == token:
        del server.tool_faults[f"{name}#state"]
        return {"content": [{"type": "text", "text": f"{name} confirmed, called with {shown}"}]}
    if name in server.tools_error_once:
        server.tools_error_once.discard(str(name))
        text = f"Unknown tool: {name} (its backend reloaded while it ran)"
        return {"isError": True, "content": [{"type": "text", "text": text}]}
    return {"content": [{"type": "text", "text": f"{name} called with {shown}"}]}


def push_event(subscription_id: str | int, push: Push) -> StreamEvent:
    """What a client hears from one queued push, as a core stream event.

    The one reading of `Push`, for the in-memory source, the bare-engine world and the
    wire shells. ``complete`` ends the stream with `StreamClosed`, ``drop`` with
    `StreamLost`; a ``garbage`` push is an `UntrustedMessage` (the wire shells write
    its raw payload instead).
    """
    kind, payload = push
    match kind:
        case "ack":
            assert isinstance(payload, tuple)
            honoured, list_changed, catalogs = payload
            return ListenAcknowledged(subscription_id, honoured, list_changed, catalogs)
        case "catalog_changed":
            return CatalogListChanged(
                "prompts" if payload == "prompts" else "tools", subscription_id
            )
        case "updated":
            return ResourceUpdated(str(payload), subscription_id)
        case "updated_body":
            assert isinstance(payload, tuple)
            uri, contents = payload
            return ResourceUpdated(uri, subscription_id, contents)
        case "foreign_body":
            assert isinstance(payload, tuple)
            uri, contents = payload
            return ResourceUpdated(uri, FOREIGN_SUBSCRIPTION, contents)
        case "list_changed":
            return ResourceListChanged(subscription_id)
        case "foreign_update":
            return ResourceUpdated(str(payload), FOREIGN_SUBSCRIPTION)
        case "garbage":
            return UntrustedMessage(f"malformed frame: {payload!r}", subscription_id)
        case "complete":
            return StreamClosed(subscription_id)
        case _:  # "drop"
            return StreamLost(subscription_id, "stream dropped")


@dataclass(slots=True)
class Resource:
    """One resource the reference server serves."""

    uri: str
    text: str
    ttl_ms: int = 60_000
    cache_scope: Literal["public", "private"] = "private"
    listed: bool = True
    mime_type: str = "text/plain"
    blob: str | None = None
    """Base64 contents; when set the resource is a blob and ``text`` is unused."""


def _plain_reply(
    resource: Resource, multi_round_trip: bool, hints: tuple[ResourceUpdated, ...]
) -> ReadReply:
    item = ResourceContents(
        resource.uri,
        text=None if resource.blob is not None else resource.text,
        blob=resource.blob,
        mime_type=resource.mime_type,
    )
    return ReadReply(
        (item,),
        ttl_ms=resource.ttl_ms,
        cache_scope=resource.cache_scope,
        multi_round_trip=multi_round_trip,
        hints=hints,
    )


class _SameReplies:
    """Per URI, the last plain answer and what it was made of: a resource read again
    unchanged gets the same (immutable) answer instead of a new one built per read."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[tuple[object, ...], ReadReply]] = {}

    def of(self, resource: Resource) -> ReadReply:
        made_of = (
            resource.text,
            resource.blob,
            resource.mime_type,
            resource.ttl_ms,
            resource.cache_scope,
        )
        last = self._last.get(resource.uri)
        if last is not None and last[0] == made_of:
            return last[1]
        reply = _plain_reply(resource, False, ())
        self._last[resource.uri] = (made_of, reply)
        return reply


@dataclass(slots=True)
class Subscriber:
    """One open listen stream, as the server sees it."""

    subscription_id: str | int
    resource_uris: frozenset[str]
    list_changed: bool
    send: MemoryObjectSendStream[Push]
    acknowledged: bool = False
    requested: frozenset[str] = frozenset()
    """The filter the listen asked for (``resource_uris`` is what the ack honoured)."""
    embed: bool = False
    """The listen asked for pushed bodies (``embedResources``): its ``resources/updated``
    notifications carry the new contents."""
    catalogs: frozenset[str] = frozenset()
    """Catalog changes the ack honoured (``tools``, ``prompts``)."""
    receive: MemoryObjectReceiveStream[Push] | None = None
    """The reading end, closed by `close_listens` if no one took it."""


@dataclass(slots=True)
class ReferenceServer:
    """State and faults of the embedded reference server (no transport)."""

    resources: dict[str, Resource] = field(default_factory=dict)
    down: bool = False
    """While true, reads fail as unreachable and listens are refused."""
    listen_supported: bool = True
    omit_from_ack: set[str] = field(default_factory=set)
    """URIs the acknowledgment leaves out (the server will not notify for them)."""
    list_changed_supported: bool = True
    faults: dict[str, deque[Fault]] = field(default_factory=dict)
    """Per URI, faults that the next reads consume in order."""
    sticky_faults: dict[str, Fault] = field(default_factory=dict)
    """Per URI, a fault every read hits until it is cleared."""
    denied_principals: dict[str, set[str | None]] = field(default_factory=dict)
    """Per URI, principals refused until further notice."""
    tool_calls: list[str] = field(default_factory=list)
    """Names of the ``tools/call`` requests answered (or refused) so far."""
    tools_unknown_once: set[str] = field(default_factory=set)
    """Tools whose next call is refused as unknown although listed (a server reloading
    its tool registry)."""
    tools_error_once: set[str] = field(default_factory=set)
    """Tools whose next call runs and answers a tool error starting "Unknown tool"."""
    tool_faults: dict[str, str] = field(default_factory=dict)  # next calls' faults, TOOL_FAULTS
    denial_envelopes: dict[str, bool] = field(default_factory=dict)
    """Per URI, a structured denial envelope (SEP-2643) on its refusals: ``True`` with a
    remediation hint (a URL to approve access at), ``False`` with none."""
    local_copies: dict[str, str] = field(default_factory=dict)
    """What a loader's local copy holds (for the ``local_copy`` fault)."""
    page_size: int = 100
    list_ttl_ms: int = 60_000
    later_pages_ttl_ms: int | None = None  # ttlMs of pages after the first (None: list_ttl_ms)
    endless_list: bool = False  # every list page names a new next cursor: it never ends
    reads: int = 0
    """Server reads answered (or failed) so far."""
    lists: int = 0
    """``resources/list`` pages asked for so far (how a list's server read is seen)."""
    read_log: list[str] = field(default_factory=list)
    subscribers: dict[str | int, Subscriber] = field(default_factory=dict)
    _held: anyio.Event | None = None
    _held_count: int = 0
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    early_notifications: list[str] = field(default_factory=list)
    """URIs to notify about *before* the acknowledgment of the next listen (invariant 9)."""
    early_bodies: list[str] = field(default_factory=list)
    """URIs whose body to push *before* the acknowledgment of the next listen."""
    cursor_epoch: int = 0
    list_hints: int = 0
    """First list pages still to answer as a list that raced a change (`list_page`)."""
    listen_refusals: int = 0
    """Listens still to answer with ``-32022`` (naming the version asked for) before one
    is served: a wire answer, played by the 2026 protocol handler."""
    acks_held: bool = False
    _unsubscribes_released: anyio.Event | None = None
    """Set while 2025 ``resources/unsubscribe`` requests are held (`hold_unsubscribes`)."""
    """While true, the acknowledgment of every new listen waits for `release_acks`."""
    held_acks: set[str | int] = field(default_factory=set)
    """Subscription ids of the listens whose acknowledgment is held."""
    sessions_ended: int = 0
    """How often the server ended its sessions (`end_sessions`); a 2025 session opened
    before the latest end is unknown to the server (HTTP 404)."""
    _acks_released: anyio.Event | None = None
    catalogs: ReferenceCatalogs = field(default_factory=ReferenceCatalogs)
    """Tools, prompts and resource templates (`set_catalog` changes one)."""
    _replies: _SameReplies = field(default_factory=_SameReplies)

    # --- content -----------------------------------------------------------------

    def set(self, uri: str, text: str, *, notify: bool = False, **options: object) -> None:
        """Create or change a resource; with ``notify`` publish ``resources/updated``."""
        existing = self.resources.get(uri)
        if existing is None:
            self.resources[uri] = Resource(uri, text, **options)  # type: ignore[arg-type]
            if notify:
                self.notify_list_changed()
        else:
            existing.text = text
            for name, value in options.items():
                setattr(existing, name, value)
        if notify:
            self.notify_updated(uri)

    def remove(self, uri: str, *, notify: bool = True) -> None:
        """Delete a resource (reads then answer not found)."""
        self.resources.pop(uri, None)
        if notify:
            self.notify_list_changed()

    def hide(self, uri: str, *, notify: bool = True) -> None:
        """Keep a resource readable but leave it out of the list."""
        self.resources[uri].listed = False
        if notify:
            self.notify_list_changed()

    # --- faults ------------------------------------------------------------------

    def fail_next(self, uri: str, fault: Fault) -> None:
        """Make the next read of ``uri`` fail with ``fault``."""
        self.faults.setdefault(uri, deque()).append(fault)

    def fail_always(self, uri: str, fault: Fault | None) -> None:
        """Make every read of ``uri`` fail with ``fault`` (``None``: answer normally again)."""
        if fault is None:
            self.sticky_faults.pop(uri, None)
        else:
            self.sticky_faults[uri] = fault

    def hold_reads(self) -> None:
        """Keep every read in flight until `release_reads`."""
        if self._held is None:
            self._held = anyio.Event()

    def release_reads(self) -> None:
        """Let held reads answer (with whatever the resource holds by then)."""
        held, self._held = self._held, None
        if held is not None:
            held.set()

    @property
    def reads_in_flight(self) -> int:
        """Reads waiting on `hold_reads`."""
        return self._held_count

    # --- requests ----------------------------------------------------------------

    async def read(self, uri: str, principal: str | None = None) -> ReadReply | RequestFailed:
        """Answer one ``resources/read``.

        The answer is decided when the request *arrives*; a held read delivers that
        answer late, like a server that read its database and then stalled.
        """
        answer = self._answer(uri, principal)
        held = self._held
        if held is not None:
            self._held_count += 1
            try:
                await held.wait()
            finally:
                self._held_count -= 1
        return answer

    def answer_now(self, uri: str, principal: str | None) -> ReadReply | RequestFailed | None:
        """`read` for a server whose reads are not held: the answer at once (what `read`
        returns without waiting); ``None`` while reads are held (await `read`)."""
        return None if self._held is not None else self._answer(uri, principal)

    def _answer(self, uri: str, principal: str | None) -> ReadReply | RequestFailed:
        self.reads += 1
        self.read_log.append(uri)
        if self.down:
            return RequestFailed("unreachable", "reference server is down")
        queue = self.faults.get(uri)
        fault = queue.popleft() if queue else self.sticky_faults.get(uri)
        shape = fault if fault in SHAPES else None
        match fault:
            case "local_copy":
                copy = self.local_copies.get(uri, "")
                return ReadReply(
                    (ResourceContents(uri, text=copy, mime_type="text/plain"),), from_server=False
                )
            case "timeout" | "denied" | "not_found" | "server_error" | "unreachable":
                return RequestFailed(fault, f"injected fault: {fault}")
            case _:
                pass  # none, or an answer-shape fault
        denied = self.denied_principals.get(uri)
        if denied is not None and principal in denied:
            return RequestFailed(
                "denied",
                f"principal {principal!r} may not read {uri}",
                remediation=denial_remediation(self, uri),
            )
        resource = self.resources.get(uri)
        if resource is None:
            return RequestFailed("not_found", f"Resource not found: {uri}", code=-32602)
        self.local_copies[uri] = resource.text
        if shape is None:
            return self._replies.of(resource)
        return _plain_reply(resource, shape == "input_rounds", self._hints_for(uri, shape))

    def _hints_for(self, uri: str, shape: str | None) -> tuple[ResourceUpdated, ...]:
        """The change hint an answer-shape fault puts on the read's own answer."""
        if shape == "hint":
            live = next(reversed(self.subscribers), None)
            return (ResourceUpdated(uri, live),)
        if shape == "hint_no_id":
            return (ResourceUpdated(uri, None),)
        if shape == "hint_unknown_id":
            return (ResourceUpdated(uri, "not-a-subscription"),)
        if shape == "hint_body":
            live = next(reversed(self.subscribers), None)
            return (ResourceUpdated(uri, live, body_of(self, uri)),)
        return ()

    def list_page(self, cursor: str | None) -> ListReply | RequestFailed:
        """Answer one ``resources/list`` page."""
        self.lists += 1
        if self.down:
            return RequestFailed("unreachable", "reference server is down")
        hints: tuple[ResourceListChanged, ...] = ()
        if self.list_hints and cursor is None:
            # A list that raced a change: it still shows what was unlisted, and its
            # own answer says the list changed.
            self.list_hints -= 1
            hints = (ResourceListChanged(next(reversed(self.subscribers), None)),)
        listed = [r for r in self.resources.values() if r.listed or hints]
        start = 0
        if cursor is not None:
            try:
                epoch, offset = cursor.split(":")
                if int(epoch) != self.cursor_epoch:
                    raise ValueError(cursor)
                start = int(offset)
            except ValueError:
                return RequestFailed("not_found", f"Invalid cursor: {cursor!r}", code=-32602)
        page = listed[start : start + self.page_size]
        end = start + self.page_size
        more = end < len(listed) or self.endless_list
        return ListReply(
            tuple(ResourceInfo(r.uri, r.uri.rsplit("/", 1)[-1], r.mime_type) for r in page),
            next_cursor=f"{self.cursor_epoch}:{end}" if more else None,
            ttl_ms=self.list_ttl_ms
            if start == 0 or self.later_pages_ttl_ms is None
            else self.later_pages_ttl_ms,
            cache_scope="private",
            hints=hints,
        )

    # --- subscriptions -------------------------------------------------------------

    def subscribe(
        self,
        subscription_id: str | int,
        resource_uris: frozenset[str],
        list_changed: bool,
        catalogs: frozenset[str] = frozenset(),
        *,
        embed: bool = False,
    ) -> tuple[Subscriber, MemoryObjectReceiveStream[Push]] | None:
        """Register a listen stream; ``None`` when down. Queues the acknowledgment."""
        if self.down:
            return None
        send, receive = anyio.create_memory_object_stream[Push](max_buffer_size=10_000)
        sub = Subscriber(subscription_id, resource_uris, list_changed, send, receive=receive)
        sub.requested, sub.embed = resource_uris, embed
        self.subscribers[subscription_id] = sub
        for uri in self.early_notifications:
            send.send_nowait(("updated", uri))
        self.early_notifications.clear()
        for uri in self.early_bodies:
            send.send_nowait(("updated_body", (uri, body_of(self, uri))))
        self.early_bodies.clear()
        sub.resource_uris = frozenset(resource_uris - self.omit_from_ack)
        sub.list_changed = list_changed and self.list_changed_supported
        granted = catalogs if self.catalogs.list_changed_supported else frozenset()
        templates = {"resource_templates"} if sub.list_changed else set()
        sub.catalogs = frozenset({*granted, *templates})
        if self.acks_held:
            self.held_acks.add(subscription_id)
        else:
            self._acknowledge(sub)
        return sub, receive

    def _acknowledge(self, sub: Subscriber) -> None:
        sub.send.send_nowait(("ack", (sub.resource_uris, sub.list_changed, sub.catalogs)))
        sub.acknowledged = True

    def hold_acks(self) -> None:
        """Keep the acknowledgment of every listen from now on until `release_acks`
        (on revision 2025-11-25: the answer of every ``resources/subscribe``)."""
        self.acks_held = True
        if self._acks_released is None:
            self._acks_released = anyio.Event()

    async def acks_released(self) -> None:
        """Return once acknowledgments are no longer held."""
        while self.acks_held:
            if self._acks_released is None:
                self._acks_released = anyio.Event()
            await self._acks_released.wait()

    def hold_unsubscribes(self) -> None:
        """Handle no 2025-11-25 ``resources/unsubscribe`` until `release_unsubscribes`: a
        server that finishes them after a later subscribe for the same URI."""
        if self._unsubscribes_released is None:
            self._unsubscribes_released = anyio.Event()

    @property
    def unsubscribes_held(self) -> bool:
        """Whether 2025 unsubscribes are held (a subscribe after one waits for it)."""
        return self._unsubscribes_released is not None

    async def unsubscribes_released(self) -> None:
        """Return once unsubscribes are no longer held."""
        held = self._unsubscribes_released
        if held is not None:
            await held.wait()

    def release_unsubscribes(self) -> None:
        """Handle the held unsubscribes now (after whatever was answered meanwhile)."""
        held, self._unsubscribes_released = self._unsubscribes_released, None
        if held is not None:
            held.set()

    def release_acks(self) -> None:
        """Acknowledge the listens that wait, and every new one at once again."""
        self.acks_held = False
        released, self._acks_released = self._acks_released, None
        if released is not None:
            released.set()
        held, self.held_acks = self.held_acks, set()
        for subscription_id in sorted(held, key=str):
            sub = self.subscribers.get(subscription_id)
            if sub is not None:
                self._acknowledge(sub)

    def listens_for(self, resource_uris: frozenset[str]) -> bool:
        """Whether an open listen asked for exactly ``resource_uris``."""
        return any(sub.requested == resource_uris for sub in self.subscribers.values())

    def unsubscribe(self, subscription_id: str | int) -> None:
        """The client went away (closed the stream or sent ``notifications/cancelled``)."""
        sub = self.subscribers.pop(subscription_id, None)
        self.held_acks.discard(subscription_id)
        if sub is not None:
            sub.send.close()

    def notify_updated(self, uri: str, *, raw: bool = False) -> None:
        """Publish ``resources/updated`` for ``uri`` to subscribers that asked for it,
        with the new contents to those whose listen asked for pushed bodies.

        With ``raw`` it goes to every subscriber whatever its filter (a misbehaving server).
        """
        for sub in list(self.subscribers.values()):
            if raw or uri in sub.resource_uris:
                if sub.embed and not raw and uri in self.resources and uri in sub.resource_uris:
                    self._push(sub, ("updated_body", (uri, body_of(self, uri))))
                    continue
                try:  # (`_push`, in place: a notification per URI of a burst)
                    sub.send.send_nowait(("updated", uri))
                except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    self.unsubscribe(sub.subscription_id)

    def notify_list_changed(self) -> None:
        """Publish ``resources/list_changed`` to subscribers that asked for it."""
        for sub in list(self.subscribers.values()):
            if sub.list_changed:
                self._push(sub, ("list_changed", None))

    def set_catalog(
        self, kind: str, items: list[dict[str, object]], *, notify: bool = True
    ) -> None:
        """Change catalog ``kind``; with ``notify`` publish its ``list_changed``
        (templates: ``resources/list_changed``)."""
        self.catalogs.set(kind, items)
        if notify:
            self.notify_catalog_changed(kind)

    def notify_catalog_changed(self, kind: str) -> None:
        """Publish ``tools/list_changed`` or ``prompts/list_changed`` to subscribers
        granted it (resource templates change with the resource list)."""
        if kind == "resource_templates":
            self.notify_list_changed()
            return
        for sub in list(self.subscribers.values()):
            if kind in sub.catalogs:
                self._push(sub, ("catalog_changed", kind))

    def push_raw(self, kind: str, payload: object = None) -> None:
        """Queue an arbitrary message to every subscriber (garbage, foreign ids ...)."""
        for sub in list(self.subscribers.values()):
            self._push(sub, (kind, payload))

    def drop_streams(self) -> None:
        """Break every listen stream abruptly (no ``complete`` result)."""
        for sub in list(self.subscribers.values()):
            self._push(sub, ("drop", None))
            self.unsubscribe(sub.subscription_id)  # the receiver still gets what was queued

    def end_sessions(self) -> None:
        """End every stream on purpose and forget every session (revision 2025-11-25:
        the session expired; requests naming it get HTTP 404)."""
        self.sessions_ended += 1
        self.close_streams()

    def close_streams(self) -> None:
        """End every listen stream on purpose (``resultType: "complete"``)."""
        for sub in list(self.subscribers.values()):
            self._push(sub, ("complete", None))
            self.unsubscribe(sub.subscription_id)

    def next_subscription_id(self) -> int:
        return next(self._ids)

    def _push(self, sub: Subscriber, message: Push) -> None:
        try:
            sub.send.send_nowait(message)
        except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            # A subscriber that cannot keep up or went away loses its stream.
            self.unsubscribe(sub.subscription_id)


def body_of(server: ReferenceServer, uri: str) -> tuple[ResourceContents, ...]:
    """What a read of ``uri`` would hold now, as a pushed body carries it."""
    resource = server.resources[uri]
    return (
        ResourceContents(
            uri,
            text=None if resource.blob is not None else resource.text,
            blob=resource.blob,
            mime_type=resource.mime_type,
        ),
    )


def push_body_raw(server: ReferenceServer, uri: str, *, foreign: bool = False) -> None:
    """Push ``uri``'s body to every subscriber, asked for or not (a misbehaving
    server); with ``foreign`` under a subscription id nobody opened."""
    kind = "foreign_body" if foreign else "updated_body"
    server.push_raw(kind, (uri, body_of(server, uri)))


def denial_remediation(server: ReferenceServer, uri: str) -> Remediation | None:
    """The denial envelope a refusal of ``uri`` carries (`denial_envelopes`)."""
    remediable = server.denial_envelopes.get(uri)
    if remediable is None:
        return None
    hints = (frozen({"type": "url", "url": APPROVAL_URL}),) if remediable else ()
    return Remediation(
        available=remediable,
        hints=hints,
        context_id="authzctx-reference",
        reason="insufficient_authorization",
    )


def close_listens(server: ReferenceServer) -> None:
    """Close both ends of every listen ``server`` still has registered (its transport
    stopped: a request cancelled between registering and streaming leaves none open)."""
    for sub in list(server.subscribers.values()):
        server.unsubscribe(sub.subscription_id)
        if sub.receive is not None:
            sub.receive.close()
