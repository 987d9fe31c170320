"""`HttpSource`: MCP 2026-07-28 over Streamable HTTP (DESIGN §5).

End-to-end tests talk real HTTP on 127.0.0.1 to `ReferenceHttpServer`, with a
scripted hook where a test needs a fault the reference protocol has no words for.
`httpx.MockTransport` is used only where bytes must be split at every boundary.
"""

from __future__ import annotations

import json
import socket
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest

from freshcache import (
    AWAITING_FRESH_SOURCE,
    BackoffSettings,
    ConfigurationError,
    DenialRules,
    FreshCache,
    HeaderMismatchError,
    HttpSource,
    ProtocolError,
    ReadReply,
    RequestFailed,
    UnsupportedVersionError,
)
from freshcache._core import (
    ListenAcknowledged,
    ListenStarted,
    ListenUnsupported,
    ListReply,
    ResourceListChanged,
    ResourceUpdated,
    StreamClosed,
    StreamEvent,
    StreamLost,
    UntrustedMessage,
)
from freshcache._protocol._wire import encode_header_value
from freshcache.acceptance import ReferenceServer
from freshcache.acceptance._http_server import RawHttp, RawSse, RecordedRequest, ReferenceHttpServer
from freshcache.acceptance._protocol import HangUp, Reply, Stall, error
from tests.polling import scaled, until

from .conftest import schema_validator

pytestmark = pytest.mark.anyio

U = "guide://shipping/approval"
OTHER = "guide://shipping/rates"
SID = "io.modelcontextprotocol/subscriptionId"

Answer = Callable[[RecordedRequest], Any]


# ---------------------------------------------------------------------- helpers


class Script:
    """A hook for `ReferenceHttpServer`: scripted answers per method, in order."""

    def __init__(self) -> None:
        self.queued: dict[str, deque[Answer]] = defaultdict(deque)

    def then(self, method: str, *answers: Answer) -> Script:
        self.queued[method].extend(answers)
        return self

    async def __call__(self, request: RecordedRequest) -> Any:
        message = request.message if isinstance(request.message, dict) else {}
        queue = self.queued.get(str(message.get("method")))
        return queue.popleft()(request) if queue else None


def rpc_error(code: int, message: str, status: int = 200, data: Any = None) -> Answer:
    return lambda r: Reply(error(r.message["id"], code, message, data), status)


def rpc_result(result: dict[str, Any], rid: Any = None) -> Answer:
    def build(r: RecordedRequest) -> Reply:
        return Reply(
            {"jsonrpc": "2.0", "id": r.message["id"] if rid is None else rid, "result": result}
        )

    return build


def raw(
    status: int, body: bytes = b"", content_type: str | None = "application/json", **headers: str
) -> Answer:
    return lambda r: RawHttp(status, body, content_type, tuple(headers.items()))


def frame(message: dict[str, Any]) -> bytes:
    return b"event: message\r\ndata: " + json.dumps(message).encode() + b"\r\n\r\n"


def sse(build: Callable[[Any], list[bytes]], end: str = "finish", **kwargs: Any) -> Answer:
    """An SSE answer whose chunks are built from the request id."""
    return lambda r: RawSse(tuple(build(r.message["id"])), end=end, **kwargs)  # type: ignore[arg-type]


def ack(sid: Any, uris: list[str], list_changed: bool = True) -> dict[str, Any]:
    filt: dict[str, Any] = {"resourceSubscriptions": uris}
    if list_changed:
        filt["resourcesListChanged"] = True
    return {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"_meta": {SID: sid}, "notifications": filt},
    }


def updated(sid: Any, uri: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": {"_meta": {SID: sid}, "uri": uri},
    }


def complete(sid: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": sid, "result": {"resultType": "complete", "_meta": {SID: sid}}}


TEMPLATES = frozenset({"resource_templates"})
"""What an ack granting ``resourcesListChanged`` alone covers of the catalogs."""
ALL_CATALOGS = frozenset({"tools", "prompts", "resource_templates"})
"""What the reference server's ack covers (it grants every list change asked for)."""


def reference() -> ReferenceServer:
    server = ReferenceServer()
    server.set(U, "v1")
    server.set(OTHER, "rates v1")
    return server


@asynccontextmanager
async def serving(
    server: ReferenceServer | None = None, **options: Any
) -> AsyncIterator[tuple[ReferenceHttpServer, Callable[..., HttpSource]]]:
    """The reference server on loopback, and a maker of sources that reach it."""
    async with (
        ReferenceHttpServer(server if server is not None else reference(), **options) as http,
        httpx.AsyncClient(trust_env=False) as client,
    ):

        def make(**kwargs: Any) -> HttpSource:
            kwargs.setdefault("timeout", scaled(5.0))  # a loaded machine's stalls: not
            kwargs.setdefault("idle_timeout", scaled(2.0))  # what these tests time
            return HttpSource(http.url, client=client, **kwargs)

        yield http, make


@asynccontextmanager
async def nowhere(**kwargs: Any) -> AsyncIterator[HttpSource]:
    """A source for a loopback port nobody listens on."""
    async with httpx.AsyncClient(trust_env=False) as client:
        yield HttpSource(
            f"http://127.0.0.1:{closed_port()}/mcp", client=client, timeout=2.0, **kwargs
        )


async def collect(
    source: HttpSource, uris: frozenset[str] = frozenset({U}), limit: float = 5.0
) -> list[StreamEvent]:
    """Every event of one listen stream, until it ends (bounded)."""
    events: list[StreamEvent] = []
    with anyio.fail_after(limit):
        async with aclosing(source.listen(uris, True)) as stream:
            async for event in stream:
                events.append(event)
    return events


@asynccontextmanager
async def listening(
    source: HttpSource, uris: frozenset[str] = frozenset({U})
) -> AsyncIterator[list[StreamEvent]]:
    """One listen stream read in the background: the events so far. Leaving the block
    closes the stream if it has not ended by itself."""
    events: list[StreamEvent] = []
    async with anyio.create_task_group() as tg:

        async def consume() -> None:
            async with aclosing(source.listen(uris, True)) as stream:
                async for event in stream:
                    events.append(event)

        tg.start_soon(consume)
        yield events
        tg.cancel_scope.cancel()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------------- requests


@pytest.mark.wire
async def test_every_request_carries_the_mcp_headers_and_meta_and_validates_against_the_schema(
    mcp_schema,
):
    server = reference()
    async with serving(server) as (http, make):
        source = make()
        async with FreshCache(source, select=[U], read_timeout=5.0) as cache:
            assert (await cache.read(U)).text == "v1"
            assert (await cache.list_resources()).state == "fresh"
            await until(lambda: cache.stream_status == "live")
    schemas = {
        "server/discover": "DiscoverRequest",
        "resources/read": "ReadResourceRequest",
        "resources/list": "ListResourcesRequest",
        "subscriptions/listen": "SubscriptionsListenRequest",
    }
    seen = set()
    for request in http.requests:
        message = request.message
        method = message["method"]
        seen.add(method)
        schema_validator(mcp_schema, schemas[method]).validate(message)
        meta = message["params"]["_meta"]
        assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
        assert meta["io.modelcontextprotocol/clientInfo"] == {
            "name": "freshcache",
            "version": "0.1.0",
        }
        assert meta["io.modelcontextprotocol/clientCapabilities"] == {}
        headers = request.headers
        assert "application/json" in headers["accept"] and "text/event-stream" in headers["accept"]
        assert headers["content-type"] == "application/json"
        assert headers["mcp-protocol-version"] == "2026-07-28"
        assert headers["mcp-method"] == method
        if method == "resources/read":
            assert headers["mcp-name"] == message["params"]["uri"]
        else:
            assert "mcp-name" not in headers
        assert "mcp-session-id" not in headers and "last-event-id" not in headers
    assert seen == set(schemas)


@pytest.mark.wire
@pytest.mark.parametrize(
    ("value", "header"),
    [
        ("Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="),
        (" padded ", "=?base64?IHBhZGRlZCA=?="),
        ("line1\nline2", "=?base64?bGluZTEKbGluZTI=?="),
        ("=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="),
        ("file:///projects/myapp/config.json", "file:///projects/myapp/config.json"),
    ],
    ids=["non-ascii", "edge-whitespace", "control-character", "sentinel-lookalike", "plain-ascii"],
)
async def test_mcp_name_uses_the_base64_sentinel_exactly_as_the_spec_examples(value, header):
    assert encode_header_value(value) == header
    server = reference()
    server.set(value, "odd but readable")
    async with serving(server) as (http, make):
        source = make()
        reply = await source.read_resource(value, None)
    assert isinstance(reply, ReadReply), reply  # the server decoded the header and it matched
    assert http.requests[-1].headers["mcp-name"] == header


@pytest.mark.wire
async def test_each_principal_reads_with_its_own_credentials():
    async with serving(reference()) as (http, make):
        source = make(
            headers={"X-Team": "ops"}, auth=lambda p: {"Authorization": f"Bearer {p}"} if p else {}
        )
        await source.read_resource(U, "alice")
        await source.read_resource(U, None)
    alice, default = http.requests[-2].headers, http.requests[-1].headers
    assert alice["authorization"] == "Bearer alice" and alice["x-team"] == "ops"
    assert "authorization" not in default and default["x-team"] == "ops"


@pytest.mark.wire
@pytest.mark.parametrize("mode", ["json", "sse", "auto"], ids=["json-body", "sse-stream", "auto"])
async def test_a_read_answered_as_json_or_as_an_sse_stream_gives_the_same_reply(mode):
    server = reference()
    async with serving(server, reply_mode=mode) as (_http, make):
        source = make()
        reply = await source.read_resource(U, None)
        page = await source.list_resources(None, None)
    assert isinstance(reply, ReadReply)
    assert (
        reply.contents[0].text == "v1" and reply.ttl_ms == 60_000 and reply.cache_scope == "private"
    )
    assert reply.from_server
    assert [r.uri for r in page.resources] == [U, OTHER]  # type: ignore[union-attr]


@pytest.mark.wire
async def test_a_slow_answer_kept_alive_by_comments_does_not_time_out():
    server = reference()
    server.hold_reads()
    async with serving(server, reply_mode="auto", keepalive_interval=0.05) as (_http, make):
        source = make(idle_timeout=0.3)
        async with anyio.create_task_group() as tg:
            replies: list[Any] = []

            async def read() -> None:
                replies.append(await source.read_resource(U, None))

            tg.start_soon(read)
            # Held well past the idle timeout, alive only thanks to keep-alive comments.
            await until(lambda: source.stats.keepalives >= 10)
            server.release_reads()
    assert isinstance(replies[0], ReadReply) and replies[0].contents[0].text == "v1"


class AnsweringAfterTurns(ReferenceServer):
    """Answers each read after ``turns`` event-loop turns: with ``commit_after=0`` the
    answer is ready while the server is committing the answer to SSE."""

    turns = 0

    async def read(self, uri: str, principal: str | None = None) -> ReadReply | RequestFailed:
        for _ in range(self.turns):
            await anyio.lowlevel.checkpoint()
        return await super().read(uri, principal)


@pytest.mark.wire
async def test_an_answer_ready_while_the_server_commits_to_sse_still_arrives_whole():
    # Seen on a loaded machine: a held read, released just as the reference server
    # began its SSE answer, landed as "unreachable" (the cancelled commit had told
    # h11 the headers were sent, but never wrote them: the client read garbage).
    server = AnsweringAfterTurns()
    server.set(U, "v1")
    async with serving(server, reply_mode="auto", commit_after=0.0) as (_http, make):
        source = make()
        for turns in range(12):
            server.turns = turns
            reply = await source.read_resource(U, None)
            assert isinstance(reply, ReadReply), (turns, reply)
            assert reply.contents[0].text == "v1"


# ---------------------------------------------------------------------- errors to states


def _sse_answer_then_cut(rid: Any) -> list[bytes]:
    return [b": keep-alive\r\n\r\n", b'event: message\r\ndata: {"jsonrpc":']


ERROR_TABLE: list[tuple[str, Answer, str]] = [
    (
        "http-403-insufficient-scope",
        lambda r: RawHttp(
            403, b"", None, (("www-authenticate", 'Bearer error="insufficient_scope"'),)
        ),
        "denied",
    ),
    ("http-403-with-jsonrpc-body", rpc_error(-32003, "Forbidden", 403), "denied"),
    ("http-401-twice", raw(401, b"", None), "denied"),
    ("jsonrpc-forbidden-message", rpc_error(-32003, "Forbidden"), "denied"),
    ("jsonrpc-access-denied-message", rpc_error(-32000, "Access denied for this user"), "denied"),
    ("not-found-32602", rpc_error(-32602, "Resource not found", 400, {"uri": U}), "not_found"),
    ("legacy-not-found-32002", rpc_error(-32002, "Resource not found"), "not_found"),
    ("internal-error-32603", rpc_error(-32603, "Internal error"), "server_error"),
    ("other-jsonrpc-error", rpc_error(-32050, "Database is rebuilding"), "server_error"),
    ("http-500-plain", raw(500, b"oops", "text/plain"), "server_error"),
    ("http-502-html", raw(502, b"<html>bad gateway</html>", "text/html"), "server_error"),
    ("http-429", raw(429, b"", None), "server_error"),
    (
        "http-307-redirect",
        raw(307, b"", None, location="http://127.0.0.1:1/elsewhere"),
        "server_error",
    ),
    ("invalid-json-body", raw(200, b"{not json"), "server_error"),
    ("json-array-body", raw(200, b"[1, 2]"), "server_error"),
    ("answer-for-another-id", rpc_result({"contents": []}, rid=99999), "server_error"),
    ("unknown-result-type", rpc_result({"resultType": "pending"}), "server_error"),
    ("body-over-the-limit", raw(200, b'{"pad":"' + b"x" * 5000 + b'"}'), "server_error"),
    ("hang-up", lambda r: HangUp(), "unreachable"),
    ("sse-answer-cut-twice", sse(_sse_answer_then_cut, end="abort"), "unreachable"),
    ("stall", lambda r: Stall(), "timeout"),
]


@pytest.mark.wire
@pytest.mark.parametrize(
    ("answer", "kind"), [(a, k) for _, a, k in ERROR_TABLE], ids=[i for i, _, _ in ERROR_TABLE]
)
async def test_server_answers_map_to_the_design_states(answer, kind):
    script = Script().then("resources/read", answer, answer)
    async with serving(reference(), hook=script) as (_http, make):
        source = make(
            auth=lambda p: {"Authorization": "Bearer token"}, idle_timeout=0.3, max_frame_bytes=4096
        )
        reply = await source.read_resource(U, None)
    assert isinstance(reply, RequestFailed), reply
    assert reply.kind == kind, reply
    assert reply.detail


@pytest.mark.wire
async def test_a_401_asks_for_credentials_again_before_it_counts_as_denied():
    calls: list[Any] = []

    def auth(principal: Any) -> dict[str, str]:
        calls.append(principal)
        return {"Authorization": f"Bearer token-{len(calls)}"}

    script = Script().then("resources/read", raw(401, b"", None))
    async with serving(reference(), hook=script) as (http, make):
        source = make(auth=auth)
        reply = await source.read_resource(U, "alice")
    assert isinstance(reply, ReadReply)  # the refreshed credentials worked
    assert calls == ["alice", "alice"]
    assert [r.headers["authorization"] for r in http.requests] == [
        "Bearer token-1",
        "Bearer token-2",
    ]


@pytest.mark.wire
async def test_denial_codes_are_configurable():
    script = Script().then("resources/read", rpc_error(-32099, "nope"), rpc_error(-32099, "nope"))
    async with serving(reference(), hook=script) as (_http, make):
        default = await make().read_resource(U, None)
        strict = await make(denial=DenialRules(codes=frozenset({-32099}))).read_resource(U, None)
    assert isinstance(default, RequestFailed) and default.kind == "server_error"
    assert isinstance(strict, RequestFailed) and strict.kind == "denied" and strict.code == -32099


@pytest.mark.wire
async def test_connection_refused_is_unreachable():
    async with nowhere() as source:
        reply = await source.read_resource(U, None)
    assert isinstance(reply, RequestFailed) and reply.kind == "unreachable"


@pytest.mark.wire
@pytest.mark.parametrize(
    ("answer", "error_type", "words"),
    [
        (rpc_error(-32020, "Mcp-Name header does not match", 400), HeaderMismatchError, "-32020"),
        (
            rpc_error(-32601, "Method not found", 404),
            ProtocolError,
            "does not implement resources/read",
        ),
        (raw(404, b"Not Found", "text/plain"), ProtocolError, "check the endpoint path"),
    ],
    ids=["header-mismatch", "method-not-found", "plain-404"],
)
async def test_configuration_errors_are_raised_with_what_to_fix(answer, error_type, words):
    script = Script().then("resources/read", answer)
    async with serving(reference(), hook=script) as (_http, make):
        with pytest.raises(error_type, match=words):
            await make().read_resource(U, None)


@pytest.mark.wire
async def test_an_intermediarys_copy_does_not_count_as_a_server_read():
    server = reference()
    server.fail_next(U, "local_copy")
    async with serving(server) as (_http, make):
        source = make()
        copy = await source.read_resource(U, None)
        real = await source.read_resource(U, None)
    assert isinstance(copy, ReadReply) and not copy.from_server
    assert isinstance(real, ReadReply) and real.from_server


@pytest.mark.wire
async def test_a_broken_sse_answer_is_reissued_once_with_a_new_request_id():
    cut = sse(_sse_answer_then_cut, end="abort")
    script = Script().then("resources/read", cut)
    async with serving(reference(), hook=script) as (http, make):
        reply = await make().read_resource(U, None)
    assert isinstance(reply, ReadReply) and reply.contents[0].text == "v1"
    first, second = (r.message["id"] for r in http.requests)
    assert first != second


@pytest.mark.wire
async def test_input_required_with_only_request_state_is_retried_and_never_cached():
    script = Script().then(
        "resources/read", rpc_result({"resultType": "input_required", "requestState": "opaque-1"})
    )
    async with serving(reference(), hook=script) as (http, make):
        reply = await make().read_resource(U, None)
    assert isinstance(reply, ReadReply) and reply.multi_round_trip
    retry = http.requests[-1].message
    assert (
        retry["params"]["requestState"] == "opaque-1"
        and retry["id"] != http.requests[0].message["id"]
    )


@pytest.mark.wire
async def test_input_required_that_asks_for_input_is_a_server_error():
    asks = {
        "resultType": "input_required",
        "inputRequests": {"q1": {"method": "elicitation/create", "params": {}}},
    }
    script = Script().then("resources/read", rpc_result(asks))
    async with serving(reference(), hook=script) as (_http, make):
        reply = await make().read_resource(U, None)
    assert (
        isinstance(reply, RequestFailed) and reply.kind == "server_error" and "q1" in reply.detail
    )


@pytest.mark.wire
async def test_an_sse_answer_skips_progress_and_stray_messages_before_the_result():
    def frames(rid: Any) -> list[bytes]:
        return [
            frame(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {"progressToken": 1, "progress": 1},
                }
            ),
            frame({"jsonrpc": "2.0", "id": "someone-else", "result": {}}),
            b"event: message\r\ndata: {broken\r\n\r\n",
            frame(
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "result": {
                        "resultType": "complete",
                        "contents": [{"uri": U, "text": "via sse"}],
                    },
                }
            ),
        ]

    script = Script().then("resources/read", sse(frames))
    async with serving(reference(), hook=script) as (_http, make):
        source = make()
        reply = await source.read_resource(U, None)
    assert isinstance(reply, ReadReply) and reply.contents[0].text == "via sse"
    assert source.stats.untrusted == 2


# ---------------------------------------------------------------------- versions


@pytest.mark.wire
async def test_unsupported_version_listing_one_we_speak_is_retried():
    data = {"supported": ["2099-01-01", "2026-07-28"], "requested": "2026-07-28"}
    script = Script().then(
        "resources/read", rpc_error(-32022, "Unsupported protocol version", 400, data)
    )
    async with serving(reference(), hook=script) as (http, make):
        source = make()
        reply = await source.read_resource(U, None)
    assert isinstance(reply, ReadReply)
    assert len(http.requests) == 2 and source.stats.retries == 1
    assert source.protocol_version == "2026-07-28"


@pytest.mark.wire
@pytest.mark.parametrize(
    "method", ["server/discover", "resources/read"], ids=["at-start", "on-a-read"]
)
async def test_no_version_in_common_names_the_versions_of_both_sides(method):
    data = {"supported": ["2099-01-01", "2100-06-30"], "requested": "2026-07-28"}
    script = Script().then(method, rpc_error(-32022, "Unsupported protocol version", 400, data))
    async with serving(reference(), hook=script) as (_http, make):
        source = make()
        call = source.start() if method == "server/discover" else source.read_resource(U, None)
        with pytest.raises(UnsupportedVersionError) as caught:
            await call
    message = str(caught.value)
    assert "2099-01-01" in message and "2100-06-30" in message and "2026-07-28" in message
    assert caught.value.supported == ("2099-01-01", "2100-06-30")


@pytest.mark.wire
async def test_discovery_reports_capabilities_and_versions():
    server = reference()
    async with serving(server) as (_http, make):
        info = await make().start()
        server.listen_supported = False
        bare = await make().start()
    assert info.reachable and info.listen and info.subscribe and info.list_changed
    assert info.supported_versions == ("2026-07-28",) and info.name == "freshcache-reference"
    assert bare.reachable and bare.listen is False


@pytest.mark.wire
@pytest.mark.parametrize(
    "result",
    [{"capabilities": {}}, {"supportedVersions": ["2026-07-28"], "capabilities": 1}],
    ids=["no-versions", "capabilities-not-an-object"],
)
async def test_a_discover_result_without_versions_or_capabilities_is_a_failure(result):
    """HTTP 200 with a JSON-RPC result lacking a revision list or a capabilities object
    is no usable discovery answer: an explicit ``server_error`` (what `freshcache
    doctor` reports), not a server offering nothing."""
    script = Script().then("server/discover", rpc_result(result))
    async with serving(reference(), hook=script) as (_http, make):
        info = await make().start()
    assert (info.reachable, info.failure) == (True, "server_error")
    assert "malformed result" in info.detail and info.listen is False


@pytest.mark.wire
async def test_a_discover_answered_with_an_empty_result_falls_back_to_initialize():
    """``{}`` names no revision and no capability: a 2025-11-25 server answering every
    method it does not know so (the official conformance suite's servers do), not a
    2026 server offering nothing. Negotiation falls back to ``initialize``."""
    script = Script().then("server/discover", rpc_result({}))
    async with serving(reference(), revision="2025-11-25", hook=script) as (http, make):
        source = make()
        info = await source.start()
    assert info.reachable and info.failure is None, info
    assert source.protocol_version == "2025-11-25"
    assert any(
        isinstance(r.message, dict) and r.message.get("method") == "initialize"
        for r in http.requests
    )


@pytest.mark.wire
async def test_discovery_of_a_server_that_is_down_reports_it_and_does_not_raise():
    async with nowhere() as source:
        info = await source.start()
    assert not info.reachable and "unreachable" in info.detail


# ---------------------------------------------------------------------- listening


@pytest.mark.wire
async def test_a_listen_stream_yields_started_ack_updates_and_the_graceful_close():
    server = reference()
    async with serving(server) as (_http, make):
        source = make()
        events: list[StreamEvent] = []
        with anyio.fail_after(5):
            async with aclosing(source.listen(frozenset({U}), True)) as stream:
                async for event in stream:
                    events.append(event)
                    if isinstance(event, ListenAcknowledged):
                        server.set(U, "v2", notify=True)
                        server.notify_list_changed()
                        server.close_streams()
    sid = events[0].subscription_id  # type: ignore[union-attr]
    assert isinstance(sid, int)
    assert events == [
        ListenStarted(sid, frozenset({U}), True),
        ListenAcknowledged(sid, frozenset({U}), True, ALL_CATALOGS),
        ResourceUpdated(U, sid),
        ResourceListChanged(sid),
        StreamClosed(sid),
    ]
    assert source.streams == {}


def _before_ack(rid: Any) -> list[bytes]:
    return [frame(updated(rid, U)), frame(ack(rid, [U])), frame(complete(rid))]


def _wrong_type_id(rid: Any) -> list[bytes]:
    return [
        frame(ack(str(rid), [U])),
        frame(ack(rid, [U])),
        frame(updated(str(rid), U)),
        frame(complete(rid)),
    ]


def _foreign_id(rid: Any) -> list[bytes]:
    return [frame(ack(rid, [U])), frame(updated("not-a-subscription", OTHER)), frame(complete(rid))]


def _garbage(rid: Any) -> list[bytes]:
    return [
        frame(ack(rid, [U])),
        b"event: message\r\ndata: {not json\r\n\r\n",
        b"data: [1,2]\n\n",
        frame(updated(rid, U)),
        frame(complete(rid)),
    ]


def _second_ack(rid: Any) -> list[bytes]:
    return [frame(ack(rid, [U])), frame(ack(rid, [U, OTHER])), frame(complete(rid))]


def _cancelled(rid: Any) -> list[bytes]:
    return [
        frame(ack(rid, [U])),
        frame(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}}
        ),
    ]


def _cancelled_other(rid: Any) -> list[bytes]:
    return [
        frame(ack(rid, [U])),
        frame(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": str(rid)},
            }
        ),
        frame(complete(rid)),
    ]


def _ends_without_result(rid: Any) -> list[bytes]:
    return [frame(ack(rid, [U]))]


def _cut_mid_frame(rid: Any) -> list[bytes]:
    return [frame(ack(rid, [U])), b'event: message\r\ndata: {"jsonrpc":"2.0","meth']


def _oversized(rid: Any) -> list[bytes]:
    return [frame(ack(rid, [U])), frame(updated(rid, "guide://" + "x" * 5000))]


def _requests_and_unknown_methods(rid: Any) -> list[bytes]:
    return [
        frame(ack(rid, [U])),
        frame({"jsonrpc": "2.0", "id": 77, "method": "sampling/createMessage", "params": {}}),
        frame(
            {
                "jsonrpc": "2.0",
                "method": "notifications/frobnicated",
                "params": {"_meta": {SID: rid}},
            }
        ),
        frame({"jsonrpc": "2.0", "id": 12345, "result": {}}),
        frame(complete(rid)),
    ]


def _listen_error(rid: Any) -> list[bytes]:
    return [frame(error(rid, -32603, "Subscription limit reached"))]


LISTEN_TABLE: list[tuple[str, Answer, Callable[[Any], list[StreamEvent]]]] = [
    (
        "notification-before-ack-still-invalidates",
        sse(_before_ack),
        lambda s: [
            ResourceUpdated(U, s),
            ListenAcknowledged(s, frozenset({U}), True, TEMPLATES),
            StreamClosed(s),
        ],
    ),
    (
        "wrong-json-type-of-subscription-id",
        sse(_wrong_type_id),
        lambda s: [
            UntrustedMessage(f"acknowledgment for subscription {str(s)!r}", str(s)),
            ListenAcknowledged(s, frozenset({U}), True, TEMPLATES),
            # Kept with its own id, which names no open subscription: it only invalidates.
            ResourceUpdated(U, str(s)),
            StreamClosed(s),
        ],
    ),
    (
        "unknown-subscription-id",
        sse(_foreign_id),
        lambda s: [
            ListenAcknowledged(s, frozenset({U}), True, TEMPLATES),
            ResourceUpdated(OTHER, "not-a-subscription"),  # unknown to the engine
            StreamClosed(s),
        ],
    ),
    (
        "garbage-frames",
        sse(_garbage),
        lambda s: [
            ListenAcknowledged(s, frozenset({U}), True, TEMPLATES),
            UntrustedMessage(
                "invalid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
            ),
            UntrustedMessage("not a JSON object: list"),
            ResourceUpdated(U, s),
            StreamClosed(s),
        ],
    ),
    (
        "server-requests-unknown-methods-and-stray-responses",
        sse(_requests_and_unknown_methods),
        lambda s: [
            ListenAcknowledged(s, frozenset({U}), True, TEMPLATES),
            UntrustedMessage("the server sent a request (sampling/createMessage); not allowed"),
            UntrustedMessage("unexpected notification notifications/frobnicated", s),
            UntrustedMessage("response for unknown request id 12345"),
            StreamClosed(s),
        ],
    ),
    (
        "a-second-acknowledgment",
        sse(_second_ack),
        lambda s: [
            ListenAcknowledged(s, frozenset({U}), True, TEMPLATES),
            UntrustedMessage("a second acknowledgment", s),
            StreamClosed(s),
        ],
    ),
    (
        "server-cancelled-the-listen",
        sse(_cancelled, end="hold"),
        lambda s: [ListenAcknowledged(s, frozenset({U}), True, TEMPLATES), StreamClosed(s)],
    ),
    (
        "cancelled-for-another-request",
        sse(_cancelled_other),
        lambda s: [
            ListenAcknowledged(s, frozenset({U}), True, TEMPLATES),
            UntrustedMessage(f"notifications/cancelled for unknown request {str(s)!r}"),
            StreamClosed(s),
        ],
    ),
    (
        "stream-ends-without-result",
        sse(_ends_without_result),
        lambda s: [
            ListenAcknowledged(s, frozenset({U}), True, TEMPLATES),
            StreamLost(s, "the listen stream ended without the listen result"),
        ],
    ),
    (
        "cut-mid-frame",
        sse(_cut_mid_frame, end="abort"),
        lambda s: [
            ListenAcknowledged(s, frozenset({U}), True, TEMPLATES),
            StreamLost(
                s,
                "RemoteProtocolError: peer closed connection without sending complete message body (incomplete chunked read)",
            ),
        ],
    ),
    (
        "frame-over-the-limit",
        sse(_oversized, end="hold"),
        lambda s: [
            ListenAcknowledged(s, frozenset({U}), True, TEMPLATES),
            StreamLost(s, "a frame grew past max_frame_bytes=4096 bytes"),
        ],
    ),
    (
        "listen-refused-with-an-error",
        sse(_listen_error),
        lambda s: [
            # On the stream, as on stdio: the protocol's words, no HTTP status.
            StreamLost(s, "the server refused the subscription: -32603 Subscription limit reached")
        ],
    ),
    (
        "listen-method-not-found",
        rpc_error(-32601, "Method not found", 404),
        lambda s: [ListenUnsupported("the server has no subscriptions/listen (Method not found)")],
    ),
    (
        "listen-plain-404",
        raw(404, b"", None),
        lambda s: [ListenUnsupported("the server answered HTTP 404 to subscriptions/listen")],
    ),
    (
        "listen-answered-complete-as-json",
        rpc_result({"resultType": "complete"}),
        lambda s: [StreamClosed(s)],
    ),
    (
        "listen-http-403",
        raw(403, b"", None),
        lambda s: [StreamLost(s, "the listen request was answered HTTP 403 (no content type)")],
    ),
    (
        "listen-hang-up",
        lambda r: HangUp(),
        lambda s: [
            StreamLost(s, "RemoteProtocolError: Server disconnected without sending a response.")
        ],
    ),
]


@pytest.mark.wire
@pytest.mark.parametrize(
    ("answer", "expected"),
    [(a, e) for _, a, e in LISTEN_TABLE],
    ids=[i for i, _, _ in LISTEN_TABLE],
)
async def test_listen_streams_end_and_distrust_exactly_as_the_spec_says(answer, expected):
    script = Script().then("subscriptions/listen", answer)
    async with serving(reference(), hook=script) as (_http, make):
        source = make(max_frame_bytes=4096)
        events = await collect(source)
    started = events[0]
    assert isinstance(started, ListenStarted)
    assert events[1:] == expected(started.subscription_id)


@pytest.mark.wire
async def test_a_silent_listen_stream_is_lost_after_the_idle_timeout():
    script = Script().then(
        "subscriptions/listen", sse(lambda rid: [frame(ack(rid, [U]))], end="hold", keepalive=False)
    )
    async with serving(reference(), hook=script) as (_http, make):
        source = make(idle_timeout=0.3)
        events = await collect(source, limit=5.0)
    assert isinstance(events[-1], StreamLost) and "not even a keep-alive" in events[-1].detail
    assert source.stats.idle_timeouts == 1


@pytest.mark.wire
async def test_keep_alive_comments_keep_a_quiet_listen_stream_open():
    script = Script().then(
        "subscriptions/listen", sse(lambda rid: [frame(ack(rid, [U]))], end="hold")
    )
    async with serving(reference(), hook=script, keepalive_interval=0.05) as (_http, make):
        source = make(idle_timeout=0.3)
        with anyio.fail_after(5):
            async with listening(source) as events:
                await until(lambda: len(events) == 2)
                sid = events[0].subscription_id  # type: ignore[union-attr]
                # Four times the idle timeout carried by keep-alives alone: still open.
                await until(lambda: source.streams[sid].keepalives >= 25)
    assert [type(e) for e in events] == [ListenStarted, ListenAcknowledged]
    assert source.stats.idle_timeouts == 0


@pytest.mark.wire
async def test_a_stream_silent_after_keep_alives_is_lost_long_before_the_idle_timeout():
    async with serving(reference(), keepalive_interval=0.1) as (http, make):
        source = make(idle_timeout=30.0, silence_floor=0.3)
        with anyio.fail_after(10):  # a third of the idle timeout, at the most
            async with listening(source) as events:
                await until(lambda: len(events) == 2)
                sid = events[0].subscription_id  # type: ignore[union-attr]
                await until(lambda: source.streams[sid].keepalives >= 3)
                http.fall_silent()
                await until(lambda: len(events) == 3, timeout=5.0)
    assert [type(e) for e in events] == [ListenStarted, ListenAcknowledged, StreamLost]
    assert "fell silent" in events[-1].detail and "3 missed" in events[-1].detail  # type: ignore[union-attr]
    assert source.stats.silent_losses == 1 and source.stats.idle_timeouts == 0


@pytest.mark.wire
async def test_a_stream_that_keeps_its_keep_alive_rhythm_is_not_called_silent():
    async with serving(reference(), keepalive_interval=0.05) as (_http, make):
        source = make(idle_timeout=30.0, silence_floor=0.2)
        with anyio.fail_after(10):
            async with listening(source) as events:
                await until(lambda: len(events) == 2)
                sid = events[0].subscription_id  # type: ignore[union-attr]
                # Ten times the floor carried by keep-alives alone: still open.
                await until(lambda: source.streams[sid].keepalives >= 40)
    assert [type(e) for e in events] == [ListenStarted, ListenAcknowledged]
    assert source.stats.silent_losses == 0


def _hinted(*hints: dict[str, Any], result: dict[str, Any] | None = None) -> Answer:
    """An SSE answer: change hints, then the result (a read of U unless given)."""
    body = result or {"resultType": "complete", "contents": [{"uri": U, "text": "old"}]}

    def build(rid: Any) -> list[bytes]:
        return [*(frame(h) for h in hints), frame({"jsonrpc": "2.0", "id": rid, "result": body})]

    return sse(build)


def _anonymous(uri: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}}


@pytest.mark.wire
@pytest.mark.parametrize(
    ("hint", "expected"),
    [
        (updated(7, U), ResourceUpdated(U, 7)),
        (updated("nobody-asked", U), ResourceUpdated(U, "nobody-asked")),
        (_anonymous(U), ResourceUpdated(U, None)),
        (_anonymous(OTHER), ResourceUpdated(OTHER, None)),
        (
            {"jsonrpc": "2.0", "method": "notifications/resources/list_changed", "params": {}},
            ResourceListChanged(None),
        ),
    ],
    ids=["with-an-id", "with-an-unknown-id", "without-an-id", "for-another-uri", "list-changed"],
)
async def test_a_change_hint_on_a_read_answer_rides_on_the_reply(hint, expected):
    script = Script().then("resources/read", _hinted(hint))
    async with serving(reference(), hook=script) as (_http, make):
        source = make()
        reply = await source.read_resource(U, None)
    assert isinstance(reply, ReadReply) and reply.contents[0].text == "old"
    assert reply.hints == (expected,)
    assert source.stats.untrusted == 0


@pytest.mark.wire
async def test_change_hints_ride_on_list_pages_failures_and_every_round_of_a_read():
    page = {"resultType": "complete", "resources": [{"uri": U}]}
    rounds = {"resultType": "input_required", "requestState": "s1"}
    listed = {"jsonrpc": "2.0", "method": "notifications/resources/list_changed", "params": {}}
    script = (
        Script()
        .then("resources/list", _hinted(listed, result=page))
        .then("resources/read", _hinted(_anonymous(U), result=rounds), _hinted(_anonymous(OTHER)))
    )
    async with serving(reference(), hook=script) as (_http, make):
        source = make()
        page_reply = await source.list_resources(None, None)
        read = await source.read_resource(U, None)
        script.then("resources/read", sse(lambda rid: [frame(_anonymous(U))], end="abort"))
        script.then("resources/read", sse(lambda rid: [frame(_anonymous(OTHER))], end="abort"))
        broken = await source.read_resource(U, None)
    assert isinstance(page_reply, ListReply) and page_reply.hints == (ResourceListChanged(None),)
    assert isinstance(read, ReadReply) and read.multi_round_trip
    assert read.hints == (ResourceUpdated(U, None), ResourceUpdated(OTHER, None))
    assert isinstance(broken, RequestFailed) and broken.kind == "unreachable"
    assert broken.hints == (ResourceUpdated(U, None), ResourceUpdated(OTHER, None))


@pytest.mark.wire
async def test_a_read_result_that_breaks_the_schema_is_a_server_error_over_http():
    script = Script().then(
        "resources/read",
        rpc_result({"resultType": "complete", "ttlMs": 1000}),
        rpc_result({"resultType": "complete", "contents": [], "ttlMs": "60000"}),
    )
    async with serving(reference(), hook=script) as (_http, make):
        source = make()
        missing = await source.read_resource(U, None)
        stringly = await source.read_resource(U, None)
    assert isinstance(missing, RequestFailed) and "contents" in missing.detail
    assert isinstance(stringly, RequestFailed) and "ttlMs" in stringly.detail


@pytest.mark.wire
async def test_an_update_without_a_subscription_id_on_a_listen_stream_still_invalidates():
    script = Script().then(
        "subscriptions/listen",
        sse(lambda rid: [frame(ack(rid, [U])), frame(_anonymous(U)), frame(complete(rid))]),
    )
    async with serving(reference(), hook=script) as (_http, make):
        source = make()
        events = await collect(source)
    sid = events[0].subscription_id  # type: ignore[union-attr]
    assert events[2:] == [ResourceUpdated(U, None), StreamClosed(sid)]


@pytest.mark.wire
async def test_closing_the_listen_iterator_closes_the_http_stream():
    server = reference()
    async with serving(server) as (http, make):
        source = make()
        with anyio.fail_after(5):
            async with aclosing(source.listen(frozenset({U}), True)) as stream:
                async for event in stream:
                    if isinstance(event, ListenAcknowledged):
                        break
            assert server.subscribers  # still registered until the server sees the close
            await until(lambda: not server.subscribers and http.open_connections == 0)
    assert source.streams == {}


# ---------------------------------------------------------------------- the cache over HTTP


@pytest.mark.wire
async def test_a_selection_change_opens_the_new_stream_before_closing_the_old_one_on_the_wire():
    server = reference()
    open_when_asked: list[set[Any]] = []

    async def watch(request: RecordedRequest) -> None:
        if (
            isinstance(request.message, dict)
            and request.message.get("method") == "subscriptions/listen"
        ):
            open_when_asked.append(set(server.subscribers))

    async with (
        serving(server, hook=watch) as (_http, make),
        FreshCache(make(), select=[U], read_timeout=2.0) as cache,
    ):
        await until(lambda: cache.stream_status == "live" and len(server.subscribers) == 1)
        (first,) = server.subscribers
        cache.select([U, OTHER])
        await until(lambda: first not in server.subscribers and len(server.subscribers) == 1)
        (second,) = server.subscribers
        assert server.subscribers[second].resource_uris == {U, OTHER}
        assert cache.engine.covered == {U, OTHER}
    assert open_when_asked == [
        set(),
        {first},
    ]  # the old stream was still open when the new one was asked for


@pytest.mark.wire
async def test_a_cache_entered_while_the_server_is_down_neither_hangs_nor_raises():
    with anyio.fail_after(5):
        async with (
            nowhere() as source,
            FreshCache(source, select=[U], read_timeout=2.0, ack_timeout=1.0) as cache,
        ):
            result = await cache.read(U)
            assert result.state == AWAITING_FRESH_SOURCE and result.reason == "unreachable"
            assert cache.status(U).state == AWAITING_FRESH_SOURCE
            other = await cache.read(OTHER, timeout=1.0)
            assert other.reason == "unreachable"
    assert cache.server_info is not None and not cache.server_info.reachable


@pytest.mark.wire
async def test_a_cache_over_http_comes_back_fresh_after_the_server_returns():
    server = reference()
    async with serving(server) as (http, make):
        source = make()
        fast = BackoffSettings(base=0.01, cap=0.05, quick_death=0.0)
        async with FreshCache(source, select=[U], read_timeout=2.0, backoff=fast) as cache:
            assert (await cache.read(U)).text == "v1"
            # Fresh again only by the read the acknowledgment caused (invariant 4).
            await until(lambda: cache.stream_status == "live" and cache.status(U).state == "fresh")
            server.down = True
            server.drop_streams()
            await http.go_down()
            await until(lambda: cache.status(U).state == AWAITING_FRESH_SOURCE)
            assert cache.status(U).reason == "stream_lost"
            assert (await cache.read(U)).reason == "unreachable"
            server.set(U, "v2")
            server.down = False
            await http.come_up()
            await until(lambda: cache.stream_status == "live" and cache.status(U).text == "v2")
            assert (await cache.read(U)).text == "v2"


# ---------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"url": "ftp://127.0.0.1/mcp"}, "http:// or https://"),
        ({"url": 8000}, "must be a string"),
        ({"headers": {"Mcp-Method": "x"}}, "may not set 'Mcp-Method'"),
        ({"timeout": 0}, "timeout must be a number of seconds > 0, got 0"),
        ({"idle_timeout": float("nan")}, "idle_timeout"),
        ({"max_frame_bytes": 10}, "max_frame_bytes must be an int >= 256, got 10"),
        ({"auth": "Bearer x"}, "auth must be a callable"),
        ({"client": object()}, "httpx.AsyncClient"),
        ({"keepalive_misses": 0}, "keepalive_misses must be an int >= 1, got 0"),
        ({"keepalive_misses": True}, "keepalive_misses must be an int >= 1, got True"),
        ({"silence_floor": -1}, "silence_floor must be a number of seconds > 0, got -1"),
    ],
    ids=[
        "wrong-scheme",
        "not-a-string",
        "reserved-header",
        "zero-timeout",
        "nan-idle",
        "tiny-frames",
        "auth-not-callable",
        "wrong-client",
        "no-misses",
        "misses-a-boolean",
        "negative-floor",
    ],
)
def test_bad_arguments_are_named_in_the_error(kwargs, words):
    url = kwargs.pop("url", "http://127.0.0.1:8000/mcp")
    with pytest.raises(ConfigurationError, match=words.replace("(", r"\(").replace(")", r"\)")):
        HttpSource(url, **kwargs)


def test_the_identity_is_the_url_without_credentials():
    assert (
        HttpSource("http://user:secret@127.0.0.1:8000/mcp").identity == "http://127.0.0.1:8000/mcp"
    )


# ---------------------------------------------------------------------- bytes split anywhere


def _listen_transcript(rid: int) -> bytes:
    """One listen stream exercising every framing rule: BOM, comments, CRLF, LF, lone
    CR, multi-line data, a progress notification, then the graceful close."""
    ack_json = json.dumps(ack(rid, [U, OTHER]))
    half = ack_json.index('"params"')
    return b"".join(
        [
            b"\xef\xbb\xbf:\r\n\r\n",
            b"event: message\r\ndata: "
            + ack_json[:half].encode()
            + b"\r\ndata: "
            + ack_json[half:].encode()
            + b"\r\n\r\n",
            b": ping\n\n",
            b"data:" + json.dumps(updated(rid, U)).encode() + b"\n\n",
            b"event: message\rdata: "
            + json.dumps(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {"progressToken": 1, "progress": 0.5},
                }
            ).encode()
            + b"\r\r",
            b"id: 7\r\ndata: "
            + json.dumps(updated(rid, "guide://shipping/\u00e9t\u00e9")).encode()
            + b"\r\n\r\n",
            frame(complete(rid)),
        ]
    )


class _Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


def _mock_source(
    split: Callable[[bytes], list[bytes]], transcript: Callable[[int], bytes]
) -> HttpSource:
    def handler(request: httpx.Request) -> httpx.Response:
        rid = json.loads(request.content)["id"]
        return httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            stream=_Chunks(split(transcript(rid))),
        )

    return HttpSource(
        "http://127.0.0.1:9/mcp", client=httpx.AsyncClient(transport=httpx.MockTransport(handler))
    )


async def test_listen_frames_split_at_every_byte_boundary_give_the_same_events():
    length = len(_listen_transcript(1))
    for cut in range(length + 1):
        source = _mock_source(lambda data, cut=cut: [data[:cut], data[cut:]], _listen_transcript)
        events = await collect(source, frozenset({U, OTHER}))
        sid = events[0].subscription_id  # type: ignore[union-attr]
        assert events[1:] == [
            ListenAcknowledged(sid, frozenset({U, OTHER}), True, TEMPLATES),
            ResourceUpdated(U, sid),
            ResourceUpdated("guide://shipping/\u00e9t\u00e9", sid),
            StreamClosed(sid),
        ], f"split at byte {cut}"
        assert source.stats.keepalives == 2


async def test_listen_frames_one_byte_at_a_time_give_the_same_events():
    source = _mock_source(
        lambda data: [data[i : i + 1] for i in range(len(data))], _listen_transcript
    )
    events = await collect(source, frozenset({U, OTHER}))
    assert [type(e) for e in events] == [
        ListenStarted,
        ListenAcknowledged,
        ResourceUpdated,
        ResourceUpdated,
        StreamClosed,
    ]


def _hinted_read_transcript(rid: int) -> bytes:
    return frame(_anonymous("guide://shipping/\u00e9t\u00e9")) + _read_transcript(rid)


async def test_a_hint_on_an_sse_read_answer_split_at_every_byte_boundary_is_kept():
    length = len(_hinted_read_transcript(1))
    for cut in range(length + 1):
        source = _mock_source(
            lambda data, cut=cut: [data[:cut], data[cut:]], _hinted_read_transcript
        )
        reply = await source.read_resource(U, None)
        assert isinstance(reply, ReadReply), f"split at byte {cut}: {reply}"
        assert reply.hints == (ResourceUpdated("guide://shipping/\u00e9t\u00e9", None),), cut


def _read_transcript(rid: int) -> bytes:
    result = {
        "jsonrpc": "2.0",
        "id": rid,
        "result": {
            "resultType": "complete",
            "ttlMs": 1000,
            "contents": [{"uri": U, "text": "line one\nline two \u2713"}],
        },
    }
    return (
        b": keep-alive\r\n\r\n"
        + frame(
            {
                "jsonrpc": "2.0",
                "method": "notifications/message",
                "params": {"level": "info", "data": "x"},
            }
        )
        + frame(result)
    )


async def test_an_sse_read_answer_split_at_every_byte_boundary_gives_the_same_reply():
    length = len(_read_transcript(1))
    for cut in range(length + 1):
        source = _mock_source(lambda data, cut=cut: [data[:cut], data[cut:]], _read_transcript)
        reply = await source.read_resource(U, None)
        assert isinstance(reply, ReadReply), f"split at byte {cut}: {reply}"
        assert reply.contents[0].text == "line one\nline two \u2713" and reply.ttl_ms == 1000
