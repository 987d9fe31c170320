"""MCP over Streamable HTTP, sans-IO: what an HTTP exchange means (DESIGN §5, §6).

As h11 keeps HTTP framing in an object that performs no I/O, `HttpBinding` keeps the
rules of MCP's HTTP binding apart from the code that moves bytes (`freshcache._sources._http`,
`freshcache._sources._http_legacy`). The transport hands it what came back (a status, a few
headers, a body or the SSE frames of an answer) and carries out the value it returns;
the binding asks the source's `freshcache._protocol._client.ClientProtocol` what a message
means. Spec pages: basic/transports/streamable-http (2026-07-28 and 2025-11-25).

What it decides:

- which media type an answer is (`answer_kind`) and how a body that is not JSON-RPC
  is named in a detail (`body_note`); that an answer carrying ``Age`` is an
  intermediary's copy (RFC 9111 §5.1);
- which message of a JSON body or an SSE answer is the answer to the request sent
  (`HttpBinding.plain_answer`, `HttpBinding.sse_message`: the protocol's
  `ClientProtocol.receive_answer`), and what else such an answer may carry;
- HTTP status and answer to outcome (`HttpBinding.judge`, the table in
  `freshcache._sources._http`): 401 asks for credentials once, 403 is denied, a broken SSE
  answer is re-issued once when the method is idempotent (`freshcache._protocol._reissue`)
  and is otherwise a lost answer, 404 without JSON-RPC is the wrong endpoint, 3xx a
  redirect not followed;
- what a listen answered by something other than an SSE stream means
  (`HttpBinding.listen_answer`);
- 2026-07-28 tool calls (`freshcache._protocol._tool_headers`): which tools of a
  ``tools/list`` page are left out for invalid ``x-mcp-header`` annotations
  (`HttpBinding.catalog_page`), the ``Mcp-Param-*`` headers of a ``tools/call``
  (`HttpBinding.call_headers`), that a call of an excluded tool is never sent
  (`HttpBinding.refused_call`), and that ``-32020`` on a ``tools/call`` refuses its
  headers (`HttpBinding.judge`: ``not_found``, the catalog may be old), not the setup;
- 2025-11-25: the GET stream's headers (`HttpBinding.legacy_stream_headers`) and what
  its answer means (`get_stream_refused`), that a 404 to a request on a session ends
  that session once per request (`HttpBinding.session_gone`), and that a server which
  gives no ``Mcp-Session-Id`` gets no trust in its notifications
  (`HttpBinding.started`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .._core import (
    CatalogKind,
    ChangeHint,
    ListenUnsupported,
    ListReply,
    Partition,
    Remediation,
    RequestFailed,
    StreamClosed,
    StreamEvent,
    StreamLost,
)
from .._errors import ProtocolError
from .._sources._source import ServerInfo
from ._client import (
    Answer,
    ClientProtocol,
    ListenAgain,
    Renegotiate,
    RequestId,
    Unclaimed,
    Untrusted,
    decode,
    neither_revision,
    same_id,
)
from ._reissue import lost_answer, may_reissue
from ._tool_headers import ToolHeaders, excluded_detail, param_mismatch
from ._tools import ToolRefused
from ._wire import (
    HEADER_MISMATCH,
    SESSION_HEADER,
    ErrorResponse,
    Malformed,
    Message,
    Response,
    catalog_reply,
    denial_envelope,
)

AnswerKind = Literal["sse", "json", "other"]
Ending = Literal["lost", "closed", "unsupported"]
"""How a 2025 GET stream ended: lost, closed by the server, or never offered (405)."""

_SNIPPET = 200

STATELESS = (
    "the server gave no Mcp-Session-Id: without a session nothing ties its notifications "
    "to this client, so no subscription is trusted (selected resources are read before "
    "each use)"
)


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """What one POST brought back, before it is judged."""

    status: int
    message: Message | None
    """The JSON-RPC answer to our request, a `Malformed`, or ``None`` (no JSON-RPC body)."""
    detail: str = ""
    from_cache: bool = False
    broken: bool = False
    """An SSE answer stream that ended before the answer (spec: re-issue the request)."""
    session_id: str | None = None
    """The ``Mcp-Session-Id`` the answer carried (2025-11-25 ``initialize``)."""


@dataclass(frozen=True, slots=True)
class Retry:
    """Send the request again (a new id), for ``reason``."""

    reason: str


@dataclass(slots=True)
class Attempt:
    """What one request's attempts have used up (each retry is allowed once)."""

    reauthorized: bool = False
    renegotiated: bool = False
    reissued: bool = False
    new_session: bool = False
    history: list[str] = field(default_factory=list)


Hint = ChangeHint
SseTaken = HttpAnswer | Hint | None
"""One SSE frame of an answer: the answer, a change hint, or nothing to act on."""


def answer_kind(content_type: str | None) -> AnswerKind:
    """Which kind of answer a ``Content-Type`` announces."""
    value = (content_type or "").split(";")[0].strip().lower()
    if value == "text/event-stream":
        return "sse"
    if value == "application/json" or value.endswith("+json"):
        return "json"
    return "other"


def from_intermediary(headers: Mapping[str, str]) -> bool:
    """An answer that carries ``Age`` is a cache's copy, not the origin's (RFC 9111 §5.1)."""
    return "age" in headers


def body_note(content_type: str | None, raw: bytes | bytearray) -> str:
    """A one-line note on a body that is not JSON-RPC, for a detail: a web page is named,
    not quoted; other text gives its first words, whitespace folded."""
    kind = (content_type or "no content type").split(";")[0].strip()
    if kind == "text/html" or raw[:200].lstrip().lower().startswith((b"<!doctype", b"<html")):
        return f"({kind}: a web page, not MCP)"
    text = " ".join(bytes(raw[:_SNIPPET]).decode("utf-8", "replace").split())
    if len(text) > 80:
        text = text[:77] + "..."
    return f"({kind}) {text}".strip()


def get_stream_refused(status: int, content_type: str | None) -> tuple[str, Ending] | None:
    """2025-11-25: why the answer to the session's GET is not a notification stream
    (405: the server offers none), or ``None`` when it is one."""
    if status == 405:
        return "the server offers no GET stream for notifications (HTTP 405)", "unsupported"
    kind = (content_type or "").split(";")[0].strip().lower()
    if status != 200 or kind != "text/event-stream":
        return f"the GET stream was answered HTTP {status} ({kind})", "lost"
    return None


class HttpBinding:
    """The MCP rules of HTTP exchanges for one source, sans-IO (module docstring).

    ``note_untrusted`` is told of every message that cannot be trusted (the transport
    counts and logs it); the binding does no I/O.
    """

    def __init__(self, protocol: ClientProtocol, note_untrusted: Callable[[str], None]) -> None:
        self.protocol = protocol
        self._note_untrusted = note_untrusted
        self.tool_headers = ToolHeaders()
        """The ``x-mcp-header`` annotations learned from this source's ``tools/list``."""

    # ------------------------------------------------------------------ tools (2026)

    def catalog_page(
        self, kind: CatalogKind, result: Mapping[str, Any], principal: Partition
    ) -> ListReply | RequestFailed:
        """One catalog page (`catalog_reply`); on 2026-07-28 a ``tools/list`` page
        without the tools whose ``x-mcp-header`` annotations are invalid, named with the
        reason in `ListReply.excluded`."""
        legacy = self.protocol.legacy is not None
        tools = result.get("tools")
        excluded: tuple[tuple[str, str], ...] = ()
        if (
            kind == "tools"
            and not legacy
            and isinstance(tools, list)
            and all(isinstance(tool, dict) for tool in tools)
        ):
            kept, excluded = self.tool_headers.learn(principal, tools)
            if excluded:
                result = {**result, "tools": kept}
        page = catalog_reply(kind, result, hintless=legacy)
        if excluded and isinstance(page, ListReply):
            return replace(page, excluded=excluded)
        return page

    def call_headers(
        self, method: str, params: Mapping[str, Any], principal: Partition
    ) -> dict[str, str]:
        """The ``Mcp-Param-*`` headers of a 2026-07-28 ``tools/call``."""
        if method != "tools/call" or self.protocol.legacy is not None:
            return {}
        return self.tool_headers.for_call(principal, params)

    def prepare_tool_call(
        self, params: Mapping[str, Any], principal: Partition, tool: Mapping[str, Any] | None
    ) -> ToolRefused | None:
        """Before a ``tools/call``: refuse a tool left out of ``principal``'s catalog
        (why), else learn the definition the caller saw (``tool``), so its
        ``Mcp-Param-*`` headers follow it."""
        refused = self.refused_call("tools/call", params, principal)
        if refused is not None:
            return ToolRefused(refused.detail)
        if tool is not None:
            self.tool_headers.learn(principal, (tool,))
        return None

    def refused_call(
        self, method: str, params: Mapping[str, Any], principal: Partition
    ) -> RequestFailed | None:
        """A ``tools/call`` of a tool left out of the catalog is never sent: why."""
        if method != "tools/call" or self.protocol.legacy is not None:
            return None
        name = params.get("name")
        if not isinstance(name, str):
            return None
        reason = self.tool_headers.excluded(principal, name)
        return None if reason is None else RequestFailed("not_found", excluded_detail(name, reason))

    # ------------------------------------------------------------------ answers

    def plain_answer(
        self,
        status: int,
        kind: AnswerKind,
        body: bytes,
        request_id: RequestId,
        *,
        content_type: str | None = None,
        from_cache: bool = False,
        session_id: str | None = None,
    ) -> HttpAnswer:
        """A whole (JSON) body as the answer to ``request_id``."""
        if kind != "json" or not body:
            return HttpAnswer(status, None, body_note(content_type, body))
        message: Message | None
        # An error with an HTTP error status is the one answer to this POST, whatever
        # id the server could give it (SDK 1.x: "server-error" for "Missing session ID").
        match self.protocol.receive_answer(decode(body), request_id, any_id=status >= 400):
            case Answer(message=answer):
                message = answer
            case Untrusted(event=event):
                message = Malformed(event.detail)
            case _:
                message = None  # a notification alone is no JSON-RPC answer
        return HttpAnswer(status, message, from_cache=from_cache, session_id=session_id)

    def oversized(self, status: int, limit: int, *, frame: bool) -> HttpAnswer:
        """An answer body or SSE frame over the size limit: unusable."""
        what = "an SSE frame" if frame else "answer body"
        return HttpAnswer(status, Malformed(f"{what} over max_frame_bytes={limit}"))

    def sse_message(
        self, data: str, request_id: RequestId, status: int, *, from_cache: bool
    ) -> SseTaken:
        """One SSE frame of the answer to ``request_id``: the answer, a change hint on
        the way (invariant 9: it counts whatever subscription id it names, and may
        only make content less fresh), or ``None`` (progress, logging, untrusted)."""
        match self.protocol.receive_answer(decode(data), request_id):
            case Answer(message=answer):
                return HttpAnswer(status, answer, from_cache=from_cache)
            case Unclaimed(event=hint):
                return hint
            case Untrusted(event=event):
                self._note_untrusted(event.detail)
        return None

    def broken(self, status: int, detail: str) -> HttpAnswer:
        """The SSE answer ended or broke before the answer (spec: re-issue the request)."""
        return HttpAnswer(status, None, detail, broken=True)

    def judge(
        self, answer: HttpAnswer, method: str, attempt: Attempt, *, can_reauthorize: bool
    ) -> dict[str, Any] | RequestFailed | Retry:
        """What one answer means: a result, a failure, or a reason to send it again."""
        status, message = answer.status, answer.message
        if status == 401:
            if not attempt.reauthorized and can_reauthorize:
                attempt.reauthorized = True
                return Retry("HTTP 401: asked for credentials again")
            text = f"HTTP 401: {_error_text(message, answer.detail)}"
            return RequestFailed("denied", text, 401, remediation=_envelope(message))
        if status == 403:
            text = f"HTTP 403: {_error_text(message, answer.detail)}"
            return RequestFailed("denied", text, 403, remediation=_envelope(message))
        match message:
            case ErrorResponse(code=code) if code == HEADER_MISMATCH and method == "tools/call":
                # its Mcp-Param-* headers refused before the tool ran: not a misconfiguration
                return RequestFailed("not_found", param_mismatch(message.message), code)
            case Response() | ErrorResponse():
                judged = self.protocol.answer(method, message, retried=attempt.renegotiated)
                if isinstance(judged, Renegotiate):
                    attempt.renegotiated = True
                    return Retry(judged.reason)
                return judged
            case Malformed(detail=detail):
                self._note_untrusted(detail)
                failed = RequestFailed(
                    "server_error", f"{method}: unusable answer: {detail}", status
                )
                return lost_answer(method, failed)  # the server did answer something
            case _:
                pass
        if answer.broken and not attempt.reissued and may_reissue(method):
            # Spec: a broken stream loses the request; an idempotent one is re-issued
            # with a new id (`freshcache._protocol._reissue`: never a tools/call).
            attempt.reissued = True
            return Retry("the SSE answer broke off")
        if answer.broken:
            return lost_answer(
                method, RequestFailed("unreachable", f"{method}: {answer.detail}", status)
            )
        if status == 404:
            raise ProtocolError(
                f"nothing answers MCP at {self.protocol.server} (HTTP 404 without a JSON-RPC "
                "body); check the endpoint path"
            )
        if 300 <= status < 400:
            return RequestFailed(
                "server_error",
                f"{method}: redirected (HTTP {status}); use the final URL {answer.detail}",
            )
        failed = RequestFailed(
            "server_error", f"{method}: HTTP {status} without a JSON-RPC answer {answer.detail}"
        )
        return lost_answer(method, failed) if status >= 500 else failed

    def listen_streams(self, status: int, content_type: str | None) -> bool:
        """Whether the answer to a listen is its stream (HTTP 200, ``text/event-stream``);
        anything else is a whole answer for `listen_answer`."""
        return status == 200 and answer_kind(content_type) == "sse"

    def listen_answer(self, answer: HttpAnswer, listen_id: RequestId) -> StreamEvent | ListenAgain:
        """A listen answered by something other than an SSE stream: 404 without
        JSON-RPC is `ListenUnsupported`, an error is the protocol's to read
        (`ClientProtocol.listen_error`), a ``complete`` result a graceful close,
        anything else a loss."""
        message = answer.message
        if answer.status == 404 and not isinstance(message, ErrorResponse):
            self.protocol.close_subscription(listen_id)
            return ListenUnsupported("the server answered HTTP 404 to subscriptions/listen")
        if isinstance(message, ErrorResponse):
            refused = self.protocol.listen_error(
                listen_id, message, where=f" (HTTP {answer.status})"
            )
            return refused if isinstance(refused, ListenAgain) else refused.event
        self.protocol.close_subscription(listen_id)
        if (
            isinstance(message, Response)
            and same_id(message.id, listen_id)
            and message.result.get("resultType", "complete") == "complete"
        ):
            return StreamClosed(listen_id)
        return StreamLost(
            listen_id, f"the listen request was answered HTTP {answer.status} {answer.detail}"
        )

    # ------------------------------------------------------------------ 2025-11-25

    def legacy_stream_headers(self) -> dict[str, str]:
        """The headers of the session's GET notification stream."""
        session = self.protocol.legacy
        assert session is not None
        return {
            "Accept": "text/event-stream",
            "MCP-Protocol-Version": session.version,
            SESSION_HEADER: session.session_id or "",
        }

    def end_session_headers(self, session_id: str) -> dict[str, str]:
        """The headers of the DELETE that ends a 2025 session."""
        return {SESSION_HEADER: session_id}

    def session_gone(self, method: str, answer: HttpAnswer, attempt: Attempt) -> bool:
        """A 404 to a 2025 request on a session: the session is gone; send the request
        again on a new one, once per request. The server refused it unread (2025-11-25
        streamable-http: a session it ended answers 404), so even a ``tools/call`` did
        not run: this is no re-issue (`freshcache._protocol._reissue`)."""
        if (
            method == "initialize"
            or self.protocol.legacy is None
            or answer.status != 404
            or attempt.new_session
        ):
            return False
        attempt.new_session = True
        attempt.history.append("HTTP 404: the session ended")
        return True

    def trusted_channel(self) -> bool:
        """Whether 2025 notifications can be trusted at all: only on a session (a
        server that gives no ``Mcp-Session-Id`` cannot tie them to this client)."""
        session = self.protocol.legacy
        return session is None or session.session_id is not None

    def started(
        self, declined: HttpAnswer, outcome: ServerInfo | RequestFailed | None
    ) -> ServerInfo:
        """The `ServerInfo` of a 2025 start after ``server/discover`` was ``declined``."""
        if isinstance(outcome, ServerInfo):
            if not self.trusted_channel():
                return replace(outcome, listen=False, detail=STATELESS)
            return outcome
        assert outcome is not None
        return ServerInfo(
            reachable=outcome.kind not in ("unreachable", "timeout"),
            detail=f"server/discover declined ({_what(declined)}); initialize: "
            f"{outcome.kind}: {outcome.detail}",
        )

    def neither_revision(self, declined: HttpAnswer, exc: ProtocolError) -> str:
        """The message of ``exc`` (``initialize`` failed), naming both revisions tried."""
        return neither_revision(
            self.protocol.server, f"server/discover was declined ({_what(declined)})", exc
        )


def _what(answer: HttpAnswer) -> str:
    message = answer.message
    code = getattr(message, "code", None)
    text = getattr(message, "message", None) or answer.detail
    return f"HTTP {answer.status}" + (f", {code} {text}" if code is not None else f" {text}")


def _envelope(message: Message | None) -> Remediation | None:
    """The authorization denial envelope a 401/403 body carried, if any."""
    return denial_envelope(message.data) if isinstance(message, ErrorResponse) else None


def _error_text(message: Message | None, detail: str) -> str:
    if isinstance(message, ErrorResponse):
        return f"{message.message} ({message.code})"
    return detail or "no detail"


__all__ = [
    "STATELESS",
    "Attempt",
    "HttpAnswer",
    "HttpBinding",
    "Retry",
    "answer_kind",
    "body_note",
    "from_intermediary",
    "get_stream_refused",
]
