"""The sans-IO client protocol on MCP 2025-11-25 (`freshcache._protocol._client`,
`freshcache._protocol._legacy`): negotiation, the session, virtual subscriptions. Recorded
messages in, decisions out; no sockets, no processes, no event loop. Messages are the
shapes the official Python SDK 1.x server writes (recorded by hand from SDK 1.30)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from freshcache import ProtocolError, UnsupportedVersionError
from freshcache._core import (
    ListenAcknowledged,
    RequestFailed,
    ResourceListChanged,
    ResourceUpdated,
    StreamClosed,
    StreamLost,
)
from freshcache._protocol._client import ClientProtocol, ForSubscription, Revision2025, Revision2026
from freshcache._protocol._wire import ErrorResponse, Response, parse_message

U = "guide://shipping/approval"
OTHER = "guide://returns"

SDK1_MISSING_SESSION = (
    '{"jsonrpc":"2.0","id":"server-error","error":{"code":-32600,'
    '"message":"Bad Request: Missing session ID"}}'
)
SDK1_STATELESS_DISCOVER = (
    '{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Invalid request parameters",'
    '"data":""}}'
)
SDK1_INITIALIZE = (
    '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":'
    '{"experimental":{},"resources":{"subscribe":true,"listChanged":true},"tools":'
    '{"listChanged":false}},"serverInfo":{"name":"probe","version":"1.30.0"}}}'
)

EVERYTHING_NOT_INITIALIZED = (
    '{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Server not initialized"},'
    '"id":null}'
)
"""What ``@modelcontextprotocol/server-everything`` (TypeScript SDK 1.x) answers a
``server/discover`` without a session over Streamable HTTP (HTTP 400)."""


TEMPLATES = frozenset({"resource_templates"})
"""What a session whose capabilities say ``resources.listChanged`` (and no tools or
prompts ``listChanged``) covers of the catalogs."""


def recorded(line: str) -> Any:
    return parse_message(json.loads(line))


def initialized(protocol: ClientProtocol, result_line: str = SDK1_INITIALIZE) -> Any:
    protocol.initialize()
    answer = recorded(result_line)
    assert isinstance(answer, Response)
    return protocol.initialized(answer.result)


def notification(method: str, **params: Any) -> Any:
    return parse_message({"jsonrpc": "2.0", "method": method, "params": params})


@pytest.mark.parametrize(
    ("line", "status", "declined"),
    [
        (SDK1_MISSING_SESSION, 400, True),
        (SDK1_STATELESS_DISCOVER, 200, True),
        (
            '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}',
            200,
            True,
        ),
        ('{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"boom"}}', 500, False),
        (
            '{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"Unsupported",'
            '"data":{"supported":["2026-07-28"]}}}',
            400,
            False,
        ),
        (EVERYTHING_NOT_INITIALIZED, 400, True),
        (EVERYTHING_NOT_INITIALIZED, None, True),
        ('{"jsonrpc":"2.0","id":1,"error":{"code":-32020,"message":"Mismatch"}}', 400, False),
        ('{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"boom"}}', None, False),
        ('{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"]}}', 200, False),
        (None, 404, True),
        (None, 405, True),
        (None, 400, True),
        (None, 406, True),
        (None, 401, False),
        (None, 403, False),
        (None, 429, False),
        (None, 407, False),
        (None, 408, False),
        (None, 425, False),
        (None, 503, False),
        (None, 200, False),
    ],
    ids=[
        "sdk1-missing-session",
        "sdk1-stateless-invalid-params",
        "method-not-found",
        "internal-error-is-not-a-revision-answer",
        "unsupported-version-renegotiates-instead",
        "server-everything-not-initialized-http-400",
        "server-everything-not-initialized-stdio",
        "header-mismatch-is-a-2026-answer",
        "internal-error-on-stdio-is-trouble",
        "a-result-is-a-2026-answer",
        "http-404-without-body",
        "http-405-without-body",
        "http-400-without-body",
        "http-406-without-body",
        "http-401-asks-for-credentials-whatever-the-revision",
        "http-403-is-a-denial-whatever-the-revision",
        "http-429-is-a-rate-limit-whatever-the-revision",
        "http-407-asks-for-proxy-credentials-whatever-the-revision",
        "http-408-is-a-timeout-whatever-the-revision",
        "http-425-is-too-early-whatever-the-revision",
        "http-503-is-an-outage",
        "http-200-without-body-is-not-a-refusal",
    ],
)
def test_which_discover_answers_mean_not_this_revision(line, status, declined):
    protocol = ClientProtocol("http://server")
    outcome = recorded(line) if line is not None else None
    assert protocol.discover_declined(outcome, status=status) is declined


@pytest.mark.parametrize(
    "outcome",
    [
        RequestFailed("denied", "server/discover: HTTP 401", 401),
        RequestFailed("server_error", "server/discover: HTTP 503 without a JSON-RPC answer"),
        RequestFailed("unreachable", "server/discover: ConnectError"),
    ],
    ids=["denied", "outage", "unreachable"],
)
def test_a_failed_discover_names_no_revision_as_spoken(outcome):
    info = ClientProtocol("http://server").server_info(outcome)
    assert info.protocol_version is None


def test_initialize_offers_2025_11_25_and_switches_the_revision():
    protocol = ClientProtocol("http://server")
    assert isinstance(protocol.revision, Revision2026)
    params = protocol.initialize()
    assert isinstance(protocol.revision, Revision2025)
    assert params["protocolVersion"] == "2025-11-25"
    assert params["clientInfo"] == {"name": "freshcache", "version": "0.1.0"}
    request = protocol.request(2, "resources/read", {"uri": U}, track=False)
    # No 2026 _meta identity on every request: initialize carried it once.
    assert "io.modelcontextprotocol/protocolVersion" not in json.dumps(request.message)
    assert "Mcp-Method" not in request.headers and "Mcp-Session-Id" not in request.headers


def test_the_initialize_answer_fills_server_info_and_headers_carry_the_session():
    protocol = ClientProtocol("http://server")
    info = initialized(protocol)
    assert (info.reachable, info.protocol_version) == (True, "2025-11-25")
    assert (info.subscribe, info.list_changed, info.listen) == (True, True, True)
    assert (info.name, info.version) == ("probe", "1.30.0")
    assert protocol.version == "2025-11-25"
    session = protocol.legacy
    assert session is not None
    session.session_id = "65ee595c"
    headers = protocol.request(3, "resources/read", {"uri": U}).headers
    assert headers["MCP-Protocol-Version"] == "2025-11-25"
    assert headers["Mcp-Session-Id"] == "65ee595c"


@pytest.mark.parametrize("version", ["2025-06-18", "2025-03-26"], ids=["2025-06-18", "2025-03-26"])
def test_an_older_2025_version_in_the_answer_is_accepted_and_used(version):
    protocol = ClientProtocol("http://server")
    info = initialized(protocol, SDK1_INITIALIZE.replace("2025-11-25", version))
    assert info.protocol_version == version == protocol.version
    assert (
        protocol.request(1, "resources/read", {"uri": U}).headers["MCP-Protocol-Version"] == version
    )


def test_a_version_freshcache_does_not_speak_is_an_error_naming_both_revisions():
    protocol = ClientProtocol("http://server")
    with pytest.raises(UnsupportedVersionError) as caught:
        initialized(protocol, SDK1_INITIALIZE.replace("2025-11-25", "2024-11-05"))
    message = str(caught.value)
    assert "2026-07-28" in message and "2025-11-25" in message and "2024-11-05" in message
    assert "server/discover" in message and "initialize" in message


def test_without_resources_subscribe_nothing_is_subscribed_and_nothing_covered():
    protocol = ClientProtocol("stdio:server")
    info = initialized(protocol, SDK1_INITIALIZE.replace('"subscribe":true', '"subscribe":false'))
    assert info.subscribe is False and "read before each use" in info.detail
    assert protocol.legacy_listen("s1", frozenset({U}), True) == []
    assert protocol.acknowledge("s1") == ListenAcknowledged("s1", frozenset(), True, TEMPLATES)


def test_a_virtual_subscription_covers_only_what_subscribed():
    protocol = ClientProtocol("stdio:server")
    initialized(protocol)
    assert protocol.legacy_listen("s1", frozenset({U, OTHER}), True) == [OTHER, U]
    protocol.subscribed(U, True)
    protocol.subscribed(OTHER, False)  # refused: stays uncovered (read before use)
    assert protocol.acknowledge("s1") == ListenAcknowledged("s1", frozenset({U}), True, TEMPLATES)


def test_a_replacement_subscribes_only_new_uris_and_closing_the_old_unsubscribes_the_rest():
    protocol = ClientProtocol("stdio:server")
    initialized(protocol)
    protocol.legacy_listen("s1", frozenset({U, OTHER}), True)
    protocol.subscribed(U, True)
    protocol.subscribed(OTHER, True)
    protocol.acknowledge("s1")
    third = "guide://third"
    assert protocol.legacy_listen("s2", frozenset({U, third}), True) == [third]
    protocol.subscribed(third, True)
    assert protocol.acknowledge("s2") == ListenAcknowledged(
        "s2", frozenset({U, third}), True, TEMPLATES
    )
    assert protocol.legacy_close("s1") == [OTHER]
    assert protocol.legacy_close("s2") == sorted([third, U])


def test_hints_without_subscription_id_go_to_the_subscription_that_asked_for_the_uri():
    protocol = ClientProtocol("stdio:server")
    initialized(protocol)
    protocol.legacy_listen("s1", frozenset({U}), False)
    protocol.legacy_listen("s2", frozenset({OTHER}), True)
    protocol.subscribed(U, True)
    protocol.subscribed(OTHER, True)
    early = protocol.receive(notification("notifications/resources/updated", uri=U))
    assert early == ForSubscription("s1", ResourceUpdated(U, "s1"), before_ack=True)
    protocol.acknowledge("s1")
    protocol.acknowledge("s2")
    assert protocol.receive(
        notification("notifications/resources/updated", uri=OTHER)
    ) == ForSubscription("s2", ResourceUpdated(OTHER, "s2"))
    assert protocol.receive(
        notification("notifications/resources/list_changed")
    ) == ForSubscription("s2", ResourceListChanged("s2"))


def test_a_lost_channel_ends_every_subscription_and_forgets_what_was_subscribed():
    protocol = ClientProtocol("stdio:server")
    initialized(protocol)
    protocol.legacy_listen("s1", frozenset({U}), False)
    protocol.subscribed(U, True)
    protocol.acknowledge("s1")
    ended = protocol.channel_ended("the process exited")
    assert ended == [ForSubscription("s1", StreamLost("s1", "the process exited"), final=True)]
    # The next channel subscribes again: nothing counts as covered from before (inv. 4).
    assert protocol.legacy_listen("s2", frozenset({U}), False) == [U]
    assert protocol.acknowledge("s2") == ListenAcknowledged("s2", frozenset(), False)


def test_a_2025_read_result_is_hintless_whatever_it_carries():
    protocol = ClientProtocol("stdio:server")
    initialized(protocol)
    rounds = protocol.read_rounds(U)
    reply = rounds.take({"contents": [{"uri": U, "text": "v1"}], "ttlMs": 60000})
    assert reply is not None and not isinstance(reply, ErrorResponse)
    assert getattr(reply, "hintless", None) is True
    assert getattr(reply, "ttl_ms", "absent") is None  # 2025 has no ttlMs to honour


def test_a_channel_the_server_ended_on_purpose_closes_2025_subscriptions_gracefully():
    protocol = ClientProtocol("stdio:server")
    initialized(protocol)
    protocol.legacy_listen("s1", frozenset({U}), False)
    assert protocol.channel_ended("exited with code 0", graceful=True) == [
        ForSubscription("s1", StreamClosed("s1"), final=True)
    ]


def test_on_2026_every_channel_end_is_a_loss_however_it_ended():
    protocol = ClientProtocol("stdio:server")
    protocol.listen("listen-1", frozenset({U}), False)
    ended = protocol.channel_ended("exited with code 0", graceful=True)
    assert ended == [
        ForSubscription("listen-1", StreamLost("listen-1", "exited with code 0"), final=True)
    ]


def test_an_initialize_answer_is_judged_once_for_every_transport():
    protocol = ClientProtocol("stdio:server")
    protocol.initialize()
    refused = ErrorResponse(1, -32600, "Bad Request: Server not initialized")
    failed = protocol.initialize_answer(refused)
    assert isinstance(failed, RequestFailed) and failed.kind == "server_error"
    with pytest.raises(ProtocolError, match="2026-07-28 server/discover was declined") as caught:
        protocol.initialize_answer(ErrorResponse(1, -32601, "Method not found"))
    assert "2025-11-25 initialize failed" in str(caught.value)
    answer = recorded(SDK1_INITIALIZE)
    info = protocol.initialize_answer(answer)
    assert not isinstance(info, RequestFailed) and info.protocol_version == "2025-11-25"
