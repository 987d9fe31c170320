"""The sans-IO client protocol object (`freshcache._protocol._client`), driven with recorded
messages: no sockets, no processes, no event loop. Both transports drive this one
object, so what is shown here holds on HTTP and on stdio alike."""

from __future__ import annotations

import json
from typing import Any

import pytest

from freshcache import UnsupportedVersionError
from freshcache._core import (
    ListenAcknowledged,
    ListenUnsupported,
    ReadReply,
    RequestFailed,
    ResourceListChanged,
    ResourceUpdated,
    StreamClosed,
    StreamLost,
    UntrustedMessage,
)
from freshcache._errors import HeaderMismatchError, ProtocolError
from freshcache._protocol._client import (
    Answer,
    ClientProtocol,
    ForSubscription,
    Ignored,
    Renegotiate,
    Unclaimed,
    Untrusted,
    same_id,
)
from freshcache._protocol._wire import PROTOCOL_VERSION, ErrorResponse, Response, parse_message

U = "guide://shipping/approval"
OTHER = "guide://returns"
SID = "io.modelcontextprotocol/subscriptionId"


def recorded(line: str) -> Any:
    """One message as a server wrote it."""
    return parse_message(json.loads(line))


def ack(sid: Any, uris: list[str]) -> Any:
    return parse_message(
        {
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {"_meta": {SID: sid}, "notifications": {"resourceSubscriptions": uris}},
        }
    )


def updated(sid: Any, uri: str = U) -> Any:
    params: dict[str, Any] = {"uri": uri}
    if sid is not None:
        params["_meta"] = {SID: sid}
    return parse_message(
        {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": params}
    )


def listening(sid: Any = "listen-1") -> ClientProtocol:
    protocol = ClientProtocol("test-server")
    outgoing = protocol.listen(sid, frozenset({U}), False)
    assert outgoing.message["method"] == "subscriptions/listen"
    assert outgoing.message["params"]["notifications"] == {"resourceSubscriptions": [U]}
    return protocol


# --------------------------------------------------------------------------- outgoing


def test_a_request_carries_the_meta_and_the_headers_a_transport_needs_as_data() -> None:
    protocol = ClientProtocol("test-server")
    outgoing = protocol.request(7, "resources/read", {"uri": "guide://é"})
    meta = outgoing.message["params"]["_meta"]
    assert outgoing.message["id"] == 7
    assert meta["io.modelcontextprotocol/protocolVersion"] == PROTOCOL_VERSION
    assert outgoing.headers["Mcp-Method"] == "resources/read"
    assert outgoing.headers["Mcp-Name"].startswith("=?base64?")
    assert outgoing.headers["MCP-Protocol-Version"] == PROTOCOL_VERSION
    assert protocol.in_flight == 1
    assert protocol.receive(recorded('{"jsonrpc":"2.0","id":7,"result":{}}')) == Answer(
        7, Response(7, {})
    )
    assert protocol.in_flight == 0


# --------------------------------------------------------------------------- ids


def test_ids_compare_with_their_json_type() -> None:
    assert same_id(1, 1) and same_id("1", "1")
    assert not same_id("1", 1) and not same_id(1, "1")
    assert not same_id(True, 1)
    assert not same_id(None, 1)


def test_an_answer_whose_id_differs_only_in_json_type_is_not_ours() -> None:
    protocol = ClientProtocol("test-server")
    protocol.request(1, "resources/read", {"uri": U})
    assert protocol.receive(recorded('{"jsonrpc":"2.0","id":"1","result":{}}')) == Ignored(
        "unknown_response"
    )
    assert protocol.in_flight == 1


def test_a_subscription_id_that_differs_only_in_json_type_is_not_trusted() -> None:
    protocol = listening(1)
    got = protocol.receive(ack("1", [U]))
    assert got == Untrusted(
        UntrustedMessage("acknowledgment for subscription '1'", "1"), "unknown_subscription"
    )
    assert protocol.receive(ack(1, [U])) == ForSubscription(
        1, ListenAcknowledged(1, frozenset({U}), False)
    )
    # Kept with its own id, which names no open subscription: the engine only invalidates.
    assert protocol.receive(updated("1")) == Unclaimed(ResourceUpdated(U, "1"))


# --------------------------------------------------------------------------- ack first


def test_acknowledgment_first_then_updates_are_the_subscriptions_own() -> None:
    protocol = listening()
    assert protocol.receive(ack("listen-1", [U])) == ForSubscription(
        "listen-1", ListenAcknowledged("listen-1", frozenset({U}), False)
    )
    assert protocol.receive(updated("listen-1")) == ForSubscription(
        "listen-1", ResourceUpdated(U, "listen-1")
    )


def test_a_hint_before_the_acknowledgment_is_passed_on_marked_so_it_only_invalidates() -> None:
    protocol = listening()
    assert protocol.receive(updated("listen-1")) == ForSubscription(
        "listen-1", ResourceUpdated(U, "listen-1"), before_ack=True
    )
    protocol.receive(ack("listen-1", [U]))
    assert protocol.receive(updated("listen-1")).before_ack is False  # type: ignore[union-attr]


def test_a_second_acknowledgment_is_untrusted() -> None:
    protocol = listening()
    protocol.receive(ack("listen-1", [U]))
    assert protocol.receive(ack("listen-1", [U, OTHER])) == ForSubscription(
        "listen-1", UntrustedMessage("a second acknowledgment", "listen-1")
    )


# --------------------------------------------------------------------------- trust


@pytest.mark.parametrize("sid", ["zzz", None], ids=["unknown-id", "no-id"])
def test_a_hint_no_subscription_claims_keeps_its_id_and_may_only_invalidate(sid: Any) -> None:
    protocol = listening()
    assert protocol.receive(updated(sid, OTHER)) == Unclaimed(ResourceUpdated(OTHER, sid))


def test_on_a_stream_channel_only_that_streams_subscription_may_claim() -> None:
    protocol = ClientProtocol("test-server")
    protocol.listen(1, frozenset({U}), False)
    protocol.listen(2, frozenset({OTHER}), False)
    # On stream 1, a hint naming subscription 2 did not come from 2: it goes on without
    # an id, so the engine cannot take it for 2's.
    assert protocol.receive(updated(2), stream=1) == Unclaimed(ResourceUpdated(U, None))
    # On the shared channel (stdio) the id routes it.
    assert protocol.receive(updated(2)) == ForSubscription(
        2, ResourceUpdated(U, 2), before_ack=True
    )


@pytest.mark.parametrize(
    ("line", "why", "detail"),
    [
        ('{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage"}', "server_request", "the server sent a request (sampling/createMessage); not allowed"),
        ('[1, 2]', "malformed", "not a JSON object: list"),
        ('{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9}}', "unknown_subscription", "notifications/cancelled for unknown request 9"),
    ],
    ids=["server-request", "not-an-object", "cancelled-for-an-unknown-request"],
)  # fmt: skip
def test_messages_no_one_can_trust_never_raise(line: str, why: str, detail: str) -> None:
    protocol = listening()
    assert protocol.receive(recorded(line)) == Untrusted(UntrustedMessage(detail), why)  # type: ignore[arg-type]


def test_a_stray_response_is_a_late_answer_on_a_shared_channel_and_untrusted_on_a_stream() -> None:
    protocol = listening(5)
    stray = recorded('{"jsonrpc":"2.0","id":12345,"result":{}}')
    assert protocol.receive(stray) == Ignored("unknown_response")
    assert protocol.receive(stray, stream=5) == Untrusted(
        UntrustedMessage("response for unknown request id 12345"), "unknown_response"
    )


def test_progress_and_logging_change_nothing() -> None:
    protocol = listening()
    line = '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}'
    assert protocol.receive(recorded(line)) == Ignored("not_about_subscriptions")


# --------------------------------------------------------------------------- endings


@pytest.mark.parametrize(
    "line",
    [
        '{"jsonrpc":"2.0","id":"listen-1","result":{"resultType":"complete"}}',
        '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"listen-1"}}',
    ],
    ids=["complete-result", "server-cancelled"],
)
def test_a_graceful_close_ends_the_subscription(line: str) -> None:
    protocol = listening()
    assert protocol.receive(recorded(line)) == ForSubscription(
        "listen-1", StreamClosed("listen-1"), final=True
    )
    assert not protocol.is_open("listen-1")
    # Afterwards its id is unknown: what names it can only invalidate.
    assert protocol.receive(updated("listen-1")) == Unclaimed(ResourceUpdated(U, "listen-1"))


def test_an_abrupt_end_loses_every_open_subscription() -> None:
    protocol = listening()
    protocol.listen("listen-2", frozenset({OTHER}), False)
    protocol.request(3, "resources/read", {"uri": U})
    assert protocol.channel_ended("the process exited") == [
        ForSubscription("listen-1", StreamLost("listen-1", "the process exited"), final=True),
        ForSubscription("listen-2", StreamLost("listen-2", "the process exited"), final=True),
    ]
    assert protocol.open_subscriptions == [] and protocol.in_flight == 0


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (-32601, ListenUnsupported("the server has no subscriptions/listen (Method not found)")),
        (-32603, StreamLost("listen-1", "the server refused the subscription: -32603 Method not found")),
    ],
    ids=["method-not-found", "another-error"],
)  # fmt: skip
def test_an_error_answering_the_listen_ends_it(code: int, expected: Any) -> None:
    protocol = listening()
    line = f'{{"jsonrpc":"2.0","id":"listen-1","error":{{"code":{code},"message":"Method not found"}}}}'
    assert protocol.receive(recorded(line)) == ForSubscription("listen-1", expected, final=True)


def test_a_listen_result_that_is_not_complete_is_untrusted_and_does_not_end_it() -> None:
    protocol = listening()
    line = '{"jsonrpc":"2.0","id":"listen-1","result":{"resultType":"input_required"}}'
    got = protocol.receive(recorded(line))
    assert isinstance(got, ForSubscription) and not got.final
    assert isinstance(got.event, UntrustedMessage)
    assert protocol.is_open("listen-1")


# --------------------------------------------------------------------------- outcomes


def test_minus_32022_renegotiates_once_then_gives_up() -> None:
    protocol = ClientProtocol("test-server")
    refusal = ErrorResponse(
        1, -32022, "unsupported", {"supported": [PROTOCOL_VERSION], "requested": "2099-01-01"}
    )
    assert protocol.answer("resources/read", refusal) == Renegotiate(
        PROTOCOL_VERSION, f"-32022: retrying resources/read with {PROTOCOL_VERSION}"
    )
    assert protocol.version == PROTOCOL_VERSION
    with pytest.raises(UnsupportedVersionError, match="although it lists it"):
        protocol.answer("resources/read", refusal, retried=True)
    none_in_common = ErrorResponse(1, -32022, "unsupported", {"supported": ["2024-11-05"]})
    with pytest.raises(UnsupportedVersionError, match="no version in common"):
        protocol.answer("resources/read", none_in_common)


def test_a_listen_refused_with_minus_32022_and_no_common_version_is_a_loss() -> None:
    protocol = listening()
    line = '{"jsonrpc":"2.0","id":"listen-1","error":{"code":-32022,"message":"no","data":{"supported":["2024-11-05"]}}}'
    got = protocol.receive(recorded(line))
    assert isinstance(got, ForSubscription) and got.final
    assert isinstance(got.event, StreamLost) and "no version in common" in got.event.detail


@pytest.mark.parametrize(
    ("error", "raised"),
    [(ErrorResponse(1, -32020, "mismatch"), HeaderMismatchError), (ErrorResponse(1, -32601, "nope"), ProtocolError)],
    ids=["header-mismatch", "method-not-found"],
)  # fmt: skip
def test_configuration_problems_are_raised(error: ErrorResponse, raised: type[Exception]) -> None:
    with pytest.raises(raised):
        ClientProtocol("test-server").answer("resources/read", error)


@pytest.mark.parametrize(
    ("code", "kind"), [(-32602, "not_found"), (-32002, "not_found"), (-32603, "server_error")]
)
def test_errors_become_failures(code: int, kind: str) -> None:
    outcome = ClientProtocol("test-server").answer("resources/read", ErrorResponse(1, code, "x"))
    assert isinstance(outcome, RequestFailed) and outcome.kind == kind


def test_request_state_rounds_end_in_a_reply_that_is_never_cached() -> None:
    rounds = ClientProtocol("test-server").read_rounds(U)
    assert rounds.take({"resultType": "input_required", "requestState": "s1"}) is None
    assert rounds.params == {"uri": U, "requestState": "s1"}
    reply = rounds.take({"contents": [{"uri": U, "text": "v1"}], "ttlMs": 60000})
    assert isinstance(reply, ReadReply) and reply.multi_round_trip


@pytest.mark.parametrize(
    "result",
    [{"resultType": "complete"}, {"contents": [{"uri": U, "text": "v1"}], "ttlMs": "60000"}],
    ids=["no-contents", "ttl-as-a-string"],
)
def test_a_broken_result_is_a_server_error_naming_the_field(result: dict[str, Any]) -> None:
    reply = ClientProtocol("test-server").read_rounds(U).take(result)
    assert isinstance(reply, RequestFailed) and reply.kind == "server_error"
    assert "malformed read result" in reply.detail


# --------------------------------------------------------------------------- discover


def test_server_info_is_mapped_once_from_the_discover_result() -> None:
    info = ClientProtocol("test-server").server_info(
        {
            "supportedVersions": [PROTOCOL_VERSION],
            "capabilities": {"resources": {"subscribe": True}},
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "ref", "version": "1"}},
            "ttlMs": 1000,
        }
    )
    assert info.reachable and info.listen and info.subscribe and not info.list_changed
    assert (info.name, info.version, info.ttl_ms) == ("ref", "1", 1000)
    assert info.protocol_version == PROTOCOL_VERSION
    bare = ClientProtocol("test-server").server_info(
        {"supportedVersions": [PROTOCOL_VERSION], "capabilities": {}}
    )
    assert bare.listen is False and "no resources capability" in bare.detail
    assert bare.failure is None
    down = ClientProtocol("test-server").server_info(RequestFailed("unreachable", "refused"))
    assert not down.reachable
    old = ClientProtocol("test-server").server_info(ErrorResponse(1, -32601, "Method not found"))
    assert old.reachable and "server/discover failed" in old.detail


def test_a_list_changed_naming_a_closed_subscription_keeps_its_id_and_only_invalidates() -> None:
    # Unused-subscription hints on the shared channel keep coming through once closed.
    protocol = listening()
    protocol.close_subscription("listen-1")
    assert protocol.receive(
        parse_message(
            {
                "jsonrpc": "2.0",
                "method": "notifications/resources/list_changed",
                "params": {"_meta": {SID: "listen-1"}},
            }
        )
    ) == Unclaimed(ResourceListChanged("listen-1"))


def test_a_server_request_is_untrusted_the_same_on_every_channel() -> None:
    """One parser, one judgment: a request written by the server (not allowed on
    2026-07-28) is untrusted on stdio's shared channel, on a listen stream and on a
    request's own answer alike."""
    from freshcache._protocol._client import Untrusted, decode

    line = '{"jsonrpc":"2.0","id":"srv-1","method":"sampling/createMessage","params":{}}'
    protocol = listening()
    judged = [
        protocol.receive(decode(line)),
        protocol.receive(decode(line), stream="listen-1"),
        protocol.receive_answer(decode(line), 5),
    ]
    assert all(isinstance(got, Untrusted) and got.why == "server_request" for got in judged)
