"""The MCP client protocol, sans-IO: one object per source, used by every transport.

In the spirit of h11's ``Connection``: `ClientProtocol` performs no I/O. A transport
asks it for the requests to send (`ClientProtocol.request`, `ClientProtocol.listen`:
the JSON-RPC message and, as data, the headers an HTTP transport needs), hands it every
message that comes back (`ClientProtocol.receive`) and acts on the small named values
it returns. It owns the client rules of MCP 2026-07-28 that are the same whatever
carries the bytes:

- which request ids are in flight and which subscriptions are open; ids compare with
  their JSON type (``1`` is not ``"1"``: `id_key`, the one implementation);
- acknowledgment first, per subscription (an update before it is passed on marked
  ``before_ack``: the engine counts it untrusted and lets it only invalidate; a second
  acknowledgment is untrusted);
- trust: a change hint no open subscription claims keeps the id it carried (unknown
  to the engine, so it may only make content less fresh) unless that id names another
  open subscription that did not send it, then it goes on without one;
- how a listen ends: its ``complete`` result or a ``notifications/cancelled`` naming
  it is a graceful `StreamClosed`; its error is `ListenUnsupported` (``-32601``),
  `Renegotiate` (``-32022``) or a `StreamLost`; anything else ending the stream is the
  transport's to report as lost;
- answers to outcomes (`ClientProtocol.answer`): a result, a `RequestFailed`
  (`DenialRules` decide denials), `Renegotiate` after ``-32022`` (`renegotiated_version`,
  once per request), or a `ProtocolError` raised for configuration problems;
- ``requestState`` rounds (`ReadRounds`) and the ``server/discover`` to `ServerInfo`
  mapping (`ClientProtocol.server_info`, the one mapping).

Two kinds of channel differ in what a stray message means, and only there: on a
*shared* channel (stdio: every request and subscription on one pipe) a response for an
id not in flight is a late answer (ignored, counted), and messages no one claims are
reported to one open subscription; on a *stream* channel (an HTTP listen stream,
``receive(..., stream=id)``) only that stream's subscription may claim what it carries,
and anything else on it is untrusted.

The revision spoken is a `Revision` strategy chosen by negotiation: ``server/discover``
first (2026-07-28, `Revision2026`); any refusal of it that is not a 2026 answer
(`ClientProtocol.discover_declined`) falls back to ``initialize`` offering 2025-11-25
(`Revision2025`, whose state is a `LegacySession`: the negotiated version, the HTTP
``Mcp-Session-Id``, the server's capabilities, and which URIs ``resources/subscribe``
covers on the current channel). 2025 has no ``subscriptions/listen``; a transport
opens the channel (HTTP: the GET SSE stream; stdio: the pipe), subscribes per URI and
reports the *listen* the engine expects as one virtual subscription whose
acknowledgment (`ClientProtocol.acknowledge`) covers the URIs whose subscribe
succeeded. Notifications carry no subscription id there: the open subscription that
asked for the URI claims them (`LegacySession.claimant`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from .._core import (
    CatalogListChanged,
    ChangeHint,
    ListenAcknowledged,
    ListenUnsupported,
    RequestFailed,
    ResourceListChanged,
    ResourceUpdated,
    StreamClosed,
    StreamEvent,
    StreamLost,
    UntrustedMessage,
)
from .._errors import (
    HeaderMismatchError,
    MethodNotFoundError,
    ProtocolError,
    UnsupportedVersionError,
)
from .._sources._source import ServerInfo
from ._legacy import LegacySession
from ._wire import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    LEGACY_VERSION,
    META_SERVER_INFO,
    METHOD_NOT_FOUND,
    PROTOCOL_VERSION,
    UNSUPPORTED_PROTOCOL_VERSION,
    ClientIdentity,
    DenialRules,
    ErrorResponse,
    Malformed,
    Message,
    Notification,
    ReadRounds,
    Request,
    Response,
    build_legacy_request,
    build_notification,
    build_request,
    failure_from_error,
    http_headers,
    initialize_params,
    legacy_http_headers,
    listen_params,
    parse_message,
    pushed_contents,
    renegotiated_version,
    subscription_id_of,
)

log = logging.getLogger("freshcache.protocol")

RequestId = str | int
IdKey = tuple[bool, RequestId]
Params = Mapping[str, Any]

_NOT_A_REFUSAL_CODES = frozenset({UNSUPPORTED_PROTOCOL_VERSION, HEADER_MISMATCH, INTERNAL_ERROR})
"""``server/discover`` errors that are 2026 answers or trouble, not "not this revision"."""
_REVISION_BLIND_STATUS = frozenset({401, 403, 407, 408, 425, 429})
"""HTTP refusals a server (or a proxy in front of it) gives whatever revision is asked:
credentials (401, 407 for a proxy), denial (403), a request timeout (408), too early
(425), rate limits (429)."""

IGNORED_NOTIFICATIONS = frozenset({"notifications/progress", "notifications/message"})
"""Notifications that are not about subscriptions (spec: progress, logging)."""


def id_key(request_id: RequestId) -> IdKey:
    """A request or subscription id as a key that keeps its JSON type."""
    return (isinstance(request_id, str), request_id)


def is_id(value: object) -> bool:
    """Whether a JSON value can be a request id (a string or an integer, not a bool)."""
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def same_id(got: object, expected: RequestId) -> bool:
    """Ids compare with their JSON type: ``1`` is not ``"1"``."""
    return is_id(got) and id_key(got) == id_key(expected)  # type: ignore[arg-type]


def decode(data: str | bytes) -> Message:
    """One framed message (a stdio line, an SSE ``data`` field, a JSON body) as a
    `Message`; never raises. The one parser of every transport: a request written by
    the server stays a `Request` (`ClientProtocol.receive` says what it means), what
    is not JSON or not JSON-RPC is `Malformed`. A well-formed notification, the
    common case of a flood, skips the validating parser (`_fast_notification`)."""
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError) as exc:  # ValueError includes UnicodeDecodeError
        return Malformed(f"invalid JSON: {exc}")
    return _fast_notification(obj) or parse_message(obj)


def _fast_notification(obj: Any) -> Notification | None:
    """A well-formed notification without the validating parser; anything else
    (``None``) goes through `parse_message`, which decides the same way for these."""
    if (
        type(obj) is dict
        and obj.get("jsonrpc") == "2.0"
        and type(obj.get("method")) is str
        and type(obj.get("params")) is dict
        and "id" not in obj
        and "result" not in obj
        and "error" not in obj
    ):
        return Notification(obj["method"], obj["params"])
    return None


# --------------------------------------------------------------------------- revisions


class Revision(Protocol):
    """What differs between protocol revisions, as data (chosen by negotiation)."""

    @property
    def version(self) -> str: ...

    def message(self, request_id: RequestId, method: str, params: Params) -> dict[str, Any]: ...

    def headers(self, method: str, params: Params) -> dict[str, str]: ...

    def with_version(self, version: str) -> Revision: ...


@dataclass(frozen=True, slots=True)
class Revision2026:
    """MCP 2026-07-28: stateless, ``_meta`` on every request (with ``identity``),
    ``server/discover``, ``subscriptions/listen``."""

    identity: ClientIdentity
    version: str = PROTOCOL_VERSION

    def message(self, request_id: RequestId, method: str, params: Params) -> dict[str, Any]:
        return build_request(
            request_id, method, params, identity=self.identity, protocol_version=self.version
        )

    def headers(self, method: str, params: Params) -> dict[str, str]:
        return http_headers(method, params, self.version)

    def with_version(self, version: str) -> Revision2026:
        return replace(self, version=version)


@dataclass(frozen=True, slots=True)
class Revision2025:
    """MCP 2025-11-25 (and 2025-06-18 / 2025-03-26): ``initialize`` once, then plain
    JSON-RPC; HTTP requests carry ``MCP-Protocol-Version`` and ``Mcp-Session-Id``."""

    identity: ClientIdentity
    session: LegacySession

    @property
    def version(self) -> str:
        return self.session.version

    def message(self, request_id: RequestId, method: str, params: Params) -> dict[str, Any]:
        return build_legacy_request(request_id, method, params)

    def headers(self, method: str, params: Params) -> dict[str, str]:
        return legacy_http_headers(self.session.version, self.session.session_id)

    def with_version(self, version: str) -> Revision2025:
        return self  # 2025 negotiates once, in initialize; there is no -32022


# --------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One request to send: the JSON-RPC message and the HTTP headers it implies."""

    request_id: RequestId
    method: str
    message: dict[str, Any]
    headers: dict[str, str]


@dataclass(frozen=True, slots=True)
class Answer:
    """The answer to one of our requests in flight."""

    request_id: RequestId
    message: Response | ErrorResponse


@dataclass(frozen=True, slots=True)
class ForSubscription:
    """A stream event an open subscription claims; ``final`` ends the subscription."""

    subscription_id: RequestId
    event: StreamEvent
    final: bool = False
    before_ack: bool = False
    """A change hint that came before its subscription's acknowledgment."""


@dataclass(frozen=True, slots=True)
class Unclaimed:
    """A change hint no open subscription claims: it may still invalidate."""

    event: ChangeHint


Stray = Literal[
    "malformed", "server_request", "unknown_response", "unknown_subscription", "unexpected"
]


@dataclass(frozen=True, slots=True)
class Untrusted:
    """A message no one can trust; reported so the engine counts it."""

    event: UntrustedMessage
    why: Stray


@dataclass(frozen=True, slots=True)
class Ignored:
    """A message that changes nothing (progress, logging, a late answer)."""

    why: Literal["not_about_subscriptions", "unknown_response", "unknown_subscription"]


@dataclass(frozen=True, slots=True)
class Renegotiate:
    """``-32022`` named a version both sides speak: send the request again."""

    version: str
    reason: str


@dataclass(frozen=True, slots=True)
class ListenAgain:
    """``-32022`` answered a listen, before its acknowledgment, with a version both
    sides speak: the subscription stays open and ``outgoing`` (the same listen, same
    id, in the new version) is to be sent again, once per listen (a second ``-32022``,
    or one after the acknowledgment, ends it with `StreamLost`). A transport that
    cannot send ``outgoing`` ends the subscription with `StreamLost` too."""

    subscription_id: RequestId
    outgoing: Outgoing
    reason: str


Received = Answer | ForSubscription | Unclaimed | Untrusted | Ignored | ListenAgain
AnswerChannel = Answer | Unclaimed | Untrusted | Ignored
"""What a request's own answer channel carries (`ClientProtocol.receive_answer`)."""


@dataclass(slots=True)
class _Subscription:
    subscription_id: RequestId
    acknowledged: bool = False
    uris: frozenset[str] = frozenset()
    list_changed: bool = False
    renegotiated: bool = False
    embed_resources: bool = False
    """The listen asked for pushed bodies: only then is a body read off its notifications."""


# --------------------------------------------------------------------------- the object


def cancellation(request_id: RequestId, reason: str) -> dict[str, Any]:
    """The ``notifications/cancelled`` that withdraws a request or a listen."""
    params = {"requestId": request_id, "reason": reason}
    return build_notification("notifications/cancelled", params)


class ClientProtocol:
    """The client side of one MCP server conversation, sans-IO (module docstring)."""

    def __init__(
        self,
        server: str,
        *,
        identity: ClientIdentity | None = None,
        denial: DenialRules | None = None,
        revision: Revision | None = None,
    ) -> None:
        self.server = server
        """The server's name in messages (URL, command line)."""
        self.identity = identity if identity is not None else ClientIdentity()
        self.denial = denial if denial is not None else DenialRules()
        self.revision: Revision = revision if revision is not None else Revision2026(self.identity)
        self._pending: set[IdKey] = set()
        self._subscriptions: dict[IdKey, _Subscription] = {}
        self.embed_resources = False  # listens ask for pushed bodies (Policy.pushed_bodies)

    @property
    def version(self) -> str:
        """The protocol version sent in ``_meta`` and headers; ``-32022`` may change it."""
        return self.revision.version

    # ------------------------------------------------------------------ outgoing

    def request(
        self, request_id: RequestId, method: str, params: Mapping[str, Any], *, track: bool = True
    ) -> Outgoing:
        """A request to send; with ``track`` its answer is expected on the channel."""
        if track:
            self.expect(request_id)
        return Outgoing(
            request_id,
            method,
            self.revision.message(request_id, method, params),
            self.revision.headers(method, params),
        )

    def expect(self, request_id: RequestId) -> None:
        """An answer for ``request_id`` may come on the channel from now on."""
        self._pending.add(id_key(request_id))

    def forget(self, request_id: RequestId) -> None:
        """Stop expecting an answer (it came, timed out or was abandoned)."""
        self._pending.discard(id_key(request_id))

    def listen(
        self, subscription_id: RequestId, uris: frozenset[str], list_changed: bool
    ) -> Outgoing:
        """A ``subscriptions/listen`` to send; the subscription is open from now on."""
        self.open_subscription(subscription_id, uris, list_changed)
        sub = self._subscriptions[id_key(subscription_id)]
        sub.embed_resources = self.embed_resources
        return self.request(subscription_id, "subscriptions/listen", _params(sub), track=False)

    def open_subscription(
        self,
        subscription_id: RequestId,
        uris: frozenset[str] = frozenset(),
        list_changed: bool = False,
    ) -> None:
        """Claim what the server sends for ``subscription_id`` (``listen`` does this)."""
        self._subscriptions[id_key(subscription_id)] = _Subscription(
            subscription_id, uris=uris, list_changed=list_changed
        )

    def reset(self) -> None:
        """The channel is gone: nothing is in flight, no subscription is open (the
        server keeps no subscription state across connections)."""
        self._pending.clear()
        self._subscriptions.clear()
        if self.legacy is not None:
            self.legacy.ended()

    # ------------------------------------------------------------------ 2025-11-25

    @property
    def legacy(self) -> LegacySession | None:
        """The 2025-11-25 session state, when negotiation fell back to it."""
        revision = self.revision
        return revision.session if isinstance(revision, Revision2025) else None

    def discover_declined(self, outcome: object, *, status: int | None = None) -> bool:
        """Whether a ``server/discover`` outcome is a refusal that is not a 2026 answer,
        so negotiation falls back to ``initialize`` (`_is_2025_refusal`)."""
        return _is_2025_refusal(outcome, status=status)

    def initialize(self) -> dict[str, Any]:
        """The ``initialize`` params (offering 2025-11-25); from now on the protocol
        speaks 2025, on a new session (its id and capabilities come with the answer)."""
        if not isinstance(self.revision, Revision2025):
            self.revision = Revision2025(self.identity, LegacySession())
        self.revision.session.expired()
        return initialize_params(self.identity)

    def initialized(self, result: Mapping[str, Any]) -> ServerInfo:
        """Take the ``initialize`` result (`LegacySession.accept`; raises when the
        version is not one freshcache speaks)."""
        session = self.legacy
        assert session is not None, "initialize() first"
        return session.accept(self.server, result)

    def initialize_answer(self, message: Response | ErrorResponse) -> ServerInfo | RequestFailed:
        """The outcome of an ``initialize`` answered on the channel: the session taken
        (`initialized`), or a `RequestFailed` (try again on the next request); raises
        `ProtocolError` naming both revisions when the server refuses it for good
        (``-32601``, ``-32020``), `UnsupportedVersionError` for a version not spoken."""
        try:
            outcome = self.answer("initialize", message, retried=True)
        except UnsupportedVersionError:
            raise
        except ProtocolError as exc:
            raise ProtocolError(
                neither_revision(self.server, "server/discover was declined", exc)
            ) from exc
        assert not isinstance(outcome, Renegotiate)  # 2025 has no -32022 (retried=True)
        return outcome if isinstance(outcome, RequestFailed) else self.initialized(outcome)

    def initialized_notification(self) -> dict[str, Any]:
        """``notifications/initialized``, sent once the ``initialize`` answer is taken."""
        return build_notification("notifications/initialized", {})

    def legacy_listen(
        self, subscription_id: RequestId, uris: frozenset[str], list_changed: bool
    ) -> list[str]:
        """Open a virtual subscription for ``uris``: the URIs to ``resources/subscribe``
        before it is acknowledged (`acknowledge`)."""
        session = self.legacy
        assert session is not None
        self.open_subscription(subscription_id, uris, list_changed)
        return session.to_subscribe(uris)

    def subscribed(self, uri: str, ok: bool) -> None:
        """A ``resources/subscribe`` for ``uri`` succeeded (``ok``) or failed."""
        session = self.legacy
        if session is not None:
            session.ledger.settle_oldest(uri, "subscribe", ok)

    def acknowledge(self, subscription_id: RequestId) -> ListenAcknowledged | None:
        """The acknowledgment of a virtual subscription: what a successful subscribe
        covers on the live channel; ``None`` if it is not open any more."""
        session, sub = self.legacy, self._subscriptions.get(id_key(subscription_id))
        if session is None or sub is None:
            return None
        sub.acknowledged = True
        return ListenAcknowledged(
            subscription_id,
            frozenset(sub.uris & session.subscribed),
            sub.list_changed and session.list_changed,
            _legacy_catalogs(sub.list_changed, session),
        )

    def legacy_close(self, subscription_id: RequestId) -> list[str]:
        """Close a virtual subscription: the URIs to ``resources/unsubscribe`` (no other
        open subscription wants them)."""
        self.close_subscription(subscription_id)
        session = self.legacy
        if session is None:
            return []
        wanted: set[str] = set()
        for sub in self._subscriptions.values():
            wanted |= sub.uris
        return session.to_unsubscribe(wanted)

    def channel_ended(self, detail: str, *, graceful: bool = False) -> list[ForSubscription]:
        """The channel broke (an abrupt end, not a ``complete`` result): every open
        subscription ends with `StreamLost`, nothing is in flight any more. On 2025,
        where no message ends a subscription, a channel the server ended on purpose
        (``graceful``: a finished GET body, a clean exit) ends them with `StreamClosed`."""
        closed = graceful and self.legacy is not None
        ended = [
            ForSubscription(
                sid, StreamClosed(sid) if closed else StreamLost(sid, detail), final=True
            )
            for sid in self.open_subscriptions
        ]
        self.reset()
        return ended

    def close_subscription(self, subscription_id: RequestId) -> None:
        self._subscriptions.pop(id_key(subscription_id), None)

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    @property
    def open_subscriptions(self) -> list[RequestId]:
        return [sub.subscription_id for sub in self._subscriptions.values()]

    def catch_all(self) -> RequestId | None:
        """On a shared channel, the open subscription that hears about what no
        subscription claims (the oldest; ``None`` when none is open)."""
        for sub in self._subscriptions.values():
            return sub.subscription_id
        return None

    def is_open(self, subscription_id: RequestId) -> bool:
        return id_key(subscription_id) in self._subscriptions

    # ------------------------------------------------------------------ incoming

    def receive(self, message: Message, *, stream: RequestId | None = None) -> Received:
        """Judge one message from the server; ``stream``: the listen stream it came on
        (``None``: the shared channel)."""
        if type(message) is Notification and message.method != "notifications/cancelled":
            return self._notification(message.method, message.params, stream)  # a flood
        match message:
            case Response(id=rid) | ErrorResponse(id=rid):
                return self._response(message, rid, stream)
            case Notification(method="notifications/cancelled", params=params):
                rid = params.get("requestId")
                sub = self._claimant(rid, stream)
                if sub is not None:
                    # cancellation.mdx: a server ending a listen may send this instead of a result.
                    return self._final(sub.subscription_id, StreamClosed(sub.subscription_id))
                return Untrusted(
                    UntrustedMessage(f"notifications/cancelled for unknown request {rid!r}"),
                    "unknown_subscription",
                )
            case Notification(method=method, params=params):
                return self._notification(method, params, stream)
            case Request(method=method):
                return Untrusted(
                    UntrustedMessage(f"the server sent a request ({method}); not allowed"),
                    "server_request",
                )
            case Malformed(detail=detail):
                return Untrusted(UntrustedMessage(detail), "malformed")
        return Untrusted(UntrustedMessage(f"unrecognised message {message!r}"), "malformed")

    def receive_answer(
        self, message: Message, request_id: RequestId, *, any_id: bool = False
    ) -> AnswerChannel:
        """Judge one message on the channel of one request's own answer (an HTTP POST's
        JSON body or SSE stream), which carries only that request's answer and what
        the server says on the way. Ids match with their JSON type; an error without
        an id answers (JSON-RPC 2.0: the server could not read it), and with
        ``any_id`` (the transport says the exchange itself failed, e.g. HTTP 4xx) an
        error answers whatever id it names (SDK 1.x: ``"server-error"``). A change
        hint is `Unclaimed`, with the id it carried (invariant 9: it may only make
        content less fresh); progress and logging are `Ignored`; anything else is
        `Untrusted`."""
        got = _answer_channel(message, request_id, any_id=any_id)
        if isinstance(got, Answer):
            self.forget(request_id)
        return got

    def _claimant(self, sid: object, stream: RequestId | None) -> _Subscription | None:
        """The open subscription ``sid`` names, if it may claim a message on this channel."""
        if not is_id(sid):
            return None
        key = id_key(sid)  # type: ignore[arg-type]
        if stream is not None and key != id_key(stream):
            return None
        return self._subscriptions.get(key)

    def _response(
        self, message: Response | ErrorResponse, rid: RequestId | None, stream: RequestId | None
    ) -> Received:
        if stream is None and rid is not None and id_key(rid) in self._pending:
            self._pending.discard(id_key(rid))
            return Answer(rid, message)
        sub = self._claimant(rid, stream)
        if sub is not None:
            return self._listen_answer(sub.subscription_id, message)
        if stream is None:
            return Ignored("unknown_response")  # a late answer, after a timeout ...
        if isinstance(message, ErrorResponse):
            detail = f"error for unknown request id {rid!r}: {message.code} {message.message}"
        else:
            detail = f"response for unknown request id {rid!r}"
        return Untrusted(UntrustedMessage(detail), "unknown_response")

    def _listen_answer(self, sid: RequestId, message: Response | ErrorResponse) -> Received:
        if isinstance(message, ErrorResponse):
            return self.listen_error(sid, message)
        result_type = message.result.get("resultType", "complete")
        if result_type == "complete":
            return self._final(sid, StreamClosed(sid))
        return ForSubscription(
            sid, UntrustedMessage(f"listen result with resultType {result_type!r}", sid)
        )

    def listen_error(
        self, sid: RequestId, error: ErrorResponse, *, where: str = ""
    ) -> ForSubscription | ListenAgain:
        """What an error answering ``subscriptions/listen`` ``sid`` means, on every wire
        (``where``: the transport's own words on how it came, e.g. the HTTP status):
        ``-32601`` is `ListenUnsupported`; ``-32022`` naming a version both sides speak
        is `ListenAgain` in that version, once per listen, but only while the listen is
        open and not yet acknowledged; anything else (a second ``-32022``, one without
        a version in common, one after the acknowledgment, ``-32020``, any other error)
        ends the subscription with `StreamLost`.

        After the acknowledgment the server has stopped listening: sending the listen
        again in silence would leave its URIs covered while nothing listens (and the
        new acknowledgment would be refused as a second one), so the stream is lost
        and everything re-listens and re-reads (invariant 4)."""
        sub = self._subscriptions.get(id_key(sid))
        late = sub is not None and sub.acknowledged
        if late:
            sub = None
        retried = sub is not None and sub.renegotiated
        refused = _listen_refused(
            sid,
            error,
            where,
            lambda e: self._renegotiate(e, "subscriptions/listen", retried=retried),
        )
        if isinstance(refused, Renegotiate):
            if sub is None:
                after = " after its acknowledgment" if late else ""
                return self._final(sid, StreamLost(sid, f"{refused.reason}{after}"))
            sub.renegotiated = True
            outgoing = self.request(
                sid,
                "subscriptions/listen",
                _params(sub),
                track=False,
            )
            return ListenAgain(sid, outgoing, refused.reason)
        return self._final(sid, refused)

    def _final(self, sid: RequestId, event: StreamEvent) -> ForSubscription:
        self.close_subscription(sid)
        return ForSubscription(sid, event, final=True)

    def _notification(
        self, method: str, params: dict[str, Any], stream: RequestId | None
    ) -> Received:
        sid = subscription_id_of(params)
        claimant = self._claimant(sid, stream)
        if claimant is None and sid is None and self.legacy is not None:
            claimant = _legacy_claimant(list(self._subscriptions.values()), params)
        if method in IGNORED_NOTIFICATIONS:
            if claimant is not None or sid is None:
                return Ignored("not_about_subscriptions")
            return Ignored("unknown_subscription")
        if claimant is not None:
            return _claimed(claimant, method, params)
        # It keeps its own id, unless that id would be trusted for a subscription that
        # did not send it.
        own = None if sid is not None and self.is_open(sid) else sid
        return _unclaimed(method, params, own, on_stream=stream is not None)

    # ------------------------------------------------------------------ outcomes

    def renegotiation(
        self, method: str, message: Response | ErrorResponse | object, *, retried: bool
    ) -> Renegotiate | None:
        """Whether an answer asks to send the request again in another version
        (``-32022`` naming one both sides speak, once per request); raises
        `UnsupportedVersionError` when it names none. The one ``-32022`` rule of
        requests, used by `answer` and by transports that hand raw answers on."""
        if isinstance(message, ErrorResponse) and message.code == UNSUPPORTED_PROTOCOL_VERSION:
            return self._renegotiate(message, method, retried=retried)
        return None

    def answer(
        self, method: str, message: Response | ErrorResponse, *, retried: bool = False
    ) -> dict[str, Any] | RequestFailed | Renegotiate:
        """The outcome of one answer: its result, a failure, or `Renegotiate`.

        Raises `ProtocolError` (and subclasses) for configuration problems: ``-32020``
        (headers and body disagree), ``-32601`` (no such method: the wrong endpoint),
        and ``-32022`` without a version in common (`UnsupportedVersionError`).
        """
        if isinstance(message, Response):
            return message.result
        renegotiate = self.renegotiation(method, message, retried=retried)
        if renegotiate is not None:
            return renegotiate
        if message.code == HEADER_MISMATCH:
            raise _header_mismatch(message)
        if message.code == METHOD_NOT_FOUND:
            raise MethodNotFoundError(
                f"{self.server} does not implement {method} (-32601): {message.message}. "
                f"Check that it is an MCP {PROTOCOL_VERSION} endpoint."
            )
        return failure_from_error(
            message.code, message.message, data=message.data, denial=self.denial
        )

    def _renegotiate(self, error: ErrorResponse, method: str, *, retried: bool) -> Renegotiate:
        version = renegotiated_version(
            error, current=self.version, server=self.server, method=method, retried=retried
        )
        self.revision = self.revision.with_version(version)
        return Renegotiate(version, f"-32022: retrying {method} with {version}")

    def read_rounds(self, uri: str) -> ReadRounds:
        """The ``requestState`` rounds of one ``resources/read``."""
        return ReadRounds(uri, hintless=self.legacy is not None)

    def server_info(self, outcome: Mapping[str, Any] | RequestFailed | ErrorResponse) -> ServerInfo:
        """What a ``server/discover`` outcome says about the server (the one mapping)."""
        return discover_info(outcome, self.version)


# --------------------------------------------------------------------------- helpers


def discovery_unanswered(outcome: object) -> RequestFailed | None:
    """Why a ``server/discover`` outcome leaves the revision undecided, or ``None`` when it
    decides it. Nothing decides it without the server's own word: no answer (timed out,
    unreachable) or an HTTP answer with no JSON-RPC in it (a gateway's 502, a 503 or 429
    while the server starts). A result decides it, so does a JSON-RPC error (the server
    speaking: `_is_2025_refusal`) and so does a denial (credentials are per principal:
    the requests of others go on)."""
    if isinstance(outcome, RequestFailed) and (
        outcome.kind in ("timeout", "unreachable")
        or (outcome.kind == "server_error" and outcome.code is None)
    ):
        return outcome
    return None


def discover_info(
    outcome: Mapping[str, Any] | RequestFailed | ErrorResponse, speaking: str
) -> ServerInfo:
    """What a ``server/discover`` outcome says about the server (the one mapping)."""
    if isinstance(outcome, ErrorResponse):
        # An older server (spec: era detection) or a broken one.
        return ServerInfo(
            reachable=True,
            detail=f"server/discover failed: {outcome.message} ({outcome.code})",
            failure="error",
        )
    if isinstance(outcome, RequestFailed):
        reachable = outcome.kind not in ("unreachable", "timeout")
        detail = outcome.detail.removeprefix("server/discover: ")
        return ServerInfo(
            reachable=reachable,
            detail=f"server/discover: {outcome.kind}: {detail}",
            failure=outcome.kind,
            revision_decided=discovery_unanswered(outcome) is None,
        )
    caps = outcome.get("capabilities")
    resources = caps.get("resources") if isinstance(caps, dict) else None
    res: dict[str, Any] = resources if isinstance(resources, dict) else {}
    meta = outcome.get("_meta")
    info = meta.get(META_SERVER_INFO) if isinstance(meta, dict) else None
    about: dict[str, Any] = info if isinstance(info, dict) else {}
    offered = outcome.get("supportedVersions")
    versions = tuple(v for v in offered if isinstance(v, str)) if isinstance(offered, list) else ()
    subscribe, list_changed = bool(res.get("subscribe")), bool(res.get("listChanged"))
    listen = subscribe or list_changed
    if resources is None or not isinstance(resources, dict):
        detail = "the server advertises no resources capability"
    else:
        detail = "" if listen else "the server advertises no resource subscriptions"
    failure = None
    if not isinstance(offered, list) or not isinstance(caps, dict):
        # Half a discovery answer (one of the two, or either malformed): said as a
        # failure, not taken for a 2026 server offering nothing. (``{}``, naming
        # neither, never gets here: `_is_2025_refusal` falls back to ``initialize``.)
        failure = "server_error"
        detail = "server/discover: malformed result (no supportedVersions or capabilities)"
    return ServerInfo(
        reachable=True,
        supported_versions=versions,
        protocol_version=speaking if speaking in versions or not versions else None,
        subscribe=subscribe,
        list_changed=list_changed,
        listen=listen,
        name=about.get("name"),
        version=about.get("version"),
        ttl_ms=outcome.get("ttlMs"),
        cache_scope=outcome.get("cacheScope"),
        detail=detail,
        failure=failure,
        raw=dict(outcome),
    )


def session_info(
    version: str,
    *,
    supported: tuple[str, ...] = (),
    subscribe: bool = False,
    list_changed: bool = False,
    name: str | None = None,
    server_version: str | None = None,
) -> ServerInfo:
    """What a session another client negotiated says about the server (`McpClientSource`:
    the official SDK's client did the handshake): ``version`` is the revision spoken;
    ``subscriptions/listen`` exists from 2026-07-28 on, and the SDK client listens for
    resource subscriptions only."""
    modern = version >= PROTOCOL_VERSION
    return ServerInfo(
        reachable=True,
        supported_versions=supported or (version,),
        protocol_version=version,
        subscribe=subscribe,
        list_changed=list_changed,
        listen=modern and subscribe,
        name=name,
        version=server_version,
        detail="" if modern else f"protocol {version} has no subscriptions/listen",
    )


def _is_2025_refusal(outcome: object, *, status: int | None = None) -> bool:
    """Whether a ``server/discover`` outcome is a refusal that is not a 2026 answer,
    so negotiation falls back to ``initialize`` (DESIGN §6).

    Whatever a server answers that only a 2026 server says, or that says nothing
    about the revision, is not a refusal: a result (but ``{}``, naming neither a
    revision nor a capability, is a 2025 server's answer to any method); ``-32022`` (another 2026
    version: renegotiate) and ``-32020`` (headers and body disagree);
    ``-32603`` / HTTP 5xx (trouble, not a refusal); HTTP 401/403/407/408/425/429
    (`_REVISION_BLIND_STATUS`: credentials, denial, timeouts and rate limits come
    whatever the revision). Every other JSON-RPC
    error (``-32600`` "Missing session ID", ``-32601``, ``-32602``, ``-32000``
    "Server not initialized" ...) and every other HTTP 4xx, with or without a
    body, is a server that does not take ``server/discover``: a 2025 one."""
    if status is not None and (status in _REVISION_BLIND_STATUS or status >= 500):
        return False
    if isinstance(outcome, ErrorResponse):
        return outcome.code not in _NOT_A_REFUSAL_CODES
    if isinstance(outcome, Response):
        # A result naming no revision and no capability (``{}``: some 2025 servers
        # answer any method they do not know so) is no 2026 answer either.
        result = outcome.result
        return not ("supportedVersions" in result or "capabilities" in result)
    return status is not None and 400 <= status < 500


def _answer_channel(message: Message, request_id: RequestId, *, any_id: bool) -> AnswerChannel:
    """`ClientProtocol.receive_answer`'s judgment, without the bookkeeping."""
    match message:
        case Response(id=rid) | ErrorResponse(id=rid):
            if (
                rid is None
                or same_id(rid, request_id)
                or (any_id and isinstance(message, ErrorResponse))
            ):
                return Answer(request_id, message)
            return Untrusted(
                UntrustedMessage(f"an answer for request {rid!r}, not {request_id!r}"),
                "unknown_response",
            )
        case Notification(method=method) if method in IGNORED_NOTIFICATIONS:
            return Ignored("not_about_subscriptions")
        case Notification(method=method, params=params):
            hint = _hint(method, params, subscription_id_of(params))
            if hint is not None and not isinstance(hint, UntrustedMessage):
                return Unclaimed(hint)
            return Untrusted(
                UntrustedMessage(f"unexpected message in an answer: {message}"), "unexpected"
            )
        case Request(method=method):
            return Untrusted(
                UntrustedMessage(f"the server sent a request ({method}); not allowed"),
                "server_request",
            )
        case Malformed(detail=detail):
            return Untrusted(UntrustedMessage(detail), "malformed")
    return Untrusted(UntrustedMessage(f"unrecognised message {message!r}"), "malformed")


def _legacy_claimant(subs: list[_Subscription], params: dict[str, Any]) -> _Subscription | None:
    """2025 hints carry no subscription id: the oldest open subscription that asked
    for the URI (or for list changes) claims it, else the oldest open one."""
    uri = params.get("uri")
    for sub in subs:
        if uri in sub.uris if isinstance(uri, str) else sub.list_changed:
            return sub
    return subs[0] if subs else None


def _unclaimed(
    method: str, params: dict[str, Any], sid: RequestId | None, *, on_stream: bool
) -> Received:
    """A message no open subscription claims: a change hint may only make content less
    fresh (invariant 9); anything else is untrusted."""
    if method == "notifications/subscriptions/acknowledged":
        text = (
            "acknowledgment without a subscription id"
            if sid is None
            else f"acknowledgment for subscription {sid!r}"
        )
        return Untrusted(UntrustedMessage(text, sid), "unknown_subscription")
    hint = _hint(method, params, sid)
    if hint is not None and not isinstance(hint, UntrustedMessage):
        return Unclaimed(hint)
    event = hint if hint is not None else _unexpected(method, params, sid)
    return Untrusted(event, "unexpected" if on_stream else "unknown_subscription")


def neither_revision(server: str, declined: str, exc: ProtocolError) -> str:
    """The message of ``exc`` (``initialize`` failed after ``declined``), naming both
    revisions tried."""
    return (
        f"{server}: MCP {PROTOCOL_VERSION} {declined} and MCP {LEGACY_VERSION} "
        f"initialize failed: {exc}"
    )


def _claimed(sub: _Subscription, method: str, params: dict[str, Any]) -> Received:
    sid = sub.subscription_id
    if method == "notifications/subscriptions/acknowledged":
        ack = _acknowledgment(params, sid)
        if isinstance(ack, UntrustedMessage):
            return ForSubscription(sid, ack)
        if sub.acknowledged:
            return ForSubscription(sid, UntrustedMessage("a second acknowledgment", sid))
        sub.acknowledged = True
        return ForSubscription(sid, ack)
    hint = _hint(method, params, sid, embedded=sub.embed_resources)
    if hint is None:
        return ForSubscription(sid, _unexpected(method, params, sid))
    return ForSubscription(sid, hint, before_ack=not sub.acknowledged)


def _params(sub: _Subscription) -> dict[str, Any]:
    """The ``subscriptions/listen`` params of ``sub`` (sent again as they were)."""
    return listen_params(sub.uris, sub.list_changed, embed_resources=sub.embed_resources)


def _listen_refused(
    sid: RequestId,
    error: ErrorResponse,
    where: str,
    renegotiate: Callable[[ErrorResponse], Renegotiate],
) -> ListenUnsupported | StreamLost | Renegotiate:
    """What an error answering a listen means; ``renegotiate`` raises
    `UnsupportedVersionError` when ``-32022`` names no version to listen with."""
    if error.code == METHOD_NOT_FOUND:
        return ListenUnsupported(f"the server has no subscriptions/listen ({error.message})")
    if error.code == UNSUPPORTED_PROTOCOL_VERSION:
        try:
            return renegotiate(error)
        except UnsupportedVersionError as exc:
            log.error("%s", exc)
            return StreamLost(sid, str(exc))
    if error.code == HEADER_MISMATCH:
        log.error("listen refused: %s", _header_mismatch(error).args[0])
    return StreamLost(
        sid, f"the server refused the subscription: {error.code} {error.message}{where}"
    )


def _acknowledgment(
    params: dict[str, Any], sid: RequestId
) -> ListenAcknowledged | UntrustedMessage:
    filt = params.get("notifications")
    if not isinstance(filt, dict):
        return UntrustedMessage("acknowledgment without a notifications filter", sid)
    uris = filt.get("resourceSubscriptions") or []
    if not isinstance(uris, list) or not all(isinstance(u, str) for u in uris):
        return UntrustedMessage("acknowledgment with a malformed resourceSubscriptions", sid)
    catalogs = frozenset(
        kind
        for kind, name in (
            ("tools", "toolsListChanged"),
            ("prompts", "promptsListChanged"),
            ("resource_templates", "resourcesListChanged"),  # templates change with it
        )
        if filt.get(name) is True
    )
    return ListenAcknowledged(
        sid, frozenset(uris), bool(filt.get("resourcesListChanged")), catalogs
    )


def _hint(
    method: str, params: dict[str, Any], sid: RequestId | None, *, embedded: bool = False
) -> ChangeHint | UntrustedMessage | None:
    """A change hint; with ``embedded`` (its listen asked for pushed bodies) a
    ``resources/updated`` keeps the body it carries (`pushed_contents`), else none."""
    if method == "notifications/resources/updated":
        uri = params.get("uri")
        if not isinstance(uri, str) or not uri:
            return UntrustedMessage("resources/updated without a uri", sid)
        if embedded and "contents" in params:
            return ResourceUpdated(uri, sid, pushed_contents(params))
        return ResourceUpdated(uri, sid)
    if method == "notifications/resources/list_changed":
        return ResourceListChanged(sid)
    if method == "notifications/tools/list_changed":
        return CatalogListChanged("tools", sid)
    if method == "notifications/prompts/list_changed":
        return CatalogListChanged("prompts", sid)
    return None


def _legacy_catalogs(asked: bool, session: LegacySession) -> frozenset[str]:
    """Catalogs a 2025 session's channel covers: those whose capability says
    ``listChanged`` (templates: ``resources.listChanged``)."""
    if not asked:
        return frozenset()
    templates = {"resource_templates"} if session.list_changed else set()
    return frozenset({*session.catalogs_changing, *templates})


def _header_mismatch(error: ErrorResponse) -> HeaderMismatchError:
    return HeaderMismatchError(
        f"the server says request headers and body disagree (-32020): {error.message}. "
        "A proxy may be rewriting MCP headers; otherwise please report it to freshcache."
    )


def _unexpected(method: str, params: dict[str, Any], sid: RequestId | None) -> UntrustedMessage:
    return UntrustedMessage(f"unexpected notification {method}", sid)


__all__ = [
    "cancellation",
    "Answer",
    "ClientProtocol",
    "ForSubscription",
    "Ignored",
    "Outgoing",
    "Received",
    "ListenAgain",
    "Renegotiate",
    "Revision",
    "Revision2025",
    "Revision2026",
    "Unclaimed",
    "Untrusted",
    "decode",
    "id_key",
    "same_id",
    "session_info",
]
