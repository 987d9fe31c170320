"""``-32022`` answering ``subscriptions/listen``: one rule, every wire (invariant 11).

The rule is `ClientProtocol.listen_error`'s: a ``-32022`` naming a version both sides
speak keeps the subscription open and sends the same listen again (same id, the new
version), once, and only before the acknowledgment; a second one, or one after the
acknowledgment (the server stopped listening: invariant 4), ends the stream with
`StreamLost`. It is checked sans-IO,
then over HTTP (the error as a plain JSON answer and on the listen's SSE stream) and
over stdio (the error on the pipe), with the same outcomes.
"""

from __future__ import annotations

import json
import sys
from contextlib import aclosing
from typing import Any

import anyio
import pytest

from freshcache import StdioSource
from freshcache._core import ListenAcknowledged, ListenStarted, StreamEvent, StreamLost
from freshcache._protocol._client import (
    ClientProtocol,
    ForSubscription,
    ListenAgain,
    decode,
    id_key,
)
from freshcache._protocol._wire import PROTOCOL_VERSION, ErrorResponse

from .conftest import FIXTURES
from .test_http_source import (
    Script,
    U,
    ack,
    collect,
    error,
    frame,
    reference,
    rpc_error,
    serving,
    sse,
)
from .test_stdio_source import FAST

SUPPORTED = {"supported": [PROTOCOL_VERSION], "requested": PROTOCOL_VERSION}
NONE_IN_COMMON = {"supported": ["2099-01-01"], "requested": PROTOCOL_VERSION}


def _refusal(sid: Any, data: dict[str, Any] = SUPPORTED) -> ErrorResponse:
    return ErrorResponse(sid, -32022, "Unsupported protocol version", data)


def test_a_listen_refused_for_its_version_is_sent_again_once_with_the_same_id() -> None:
    protocol = ClientProtocol("test-server")
    protocol.listen("listen-1", frozenset({U}), True)
    again = protocol.receive(_refusal("listen-1"))
    assert isinstance(again, ListenAgain) and again.subscription_id == "listen-1"
    assert again.outgoing.message["id"] == "listen-1"
    assert again.outgoing.message["params"]["notifications"] == {
        "resourceSubscriptions": [U],
        "resourcesListChanged": True,
        "toolsListChanged": True,
        "promptsListChanged": True,
    }
    assert protocol.is_open("listen-1")
    twice = protocol.receive(_refusal("listen-1"))
    assert isinstance(twice, ForSubscription) and twice.final
    assert isinstance(twice.event, StreamLost) and not protocol.is_open("listen-1")


def test_a_refusal_after_the_acknowledgment_ends_the_listen_as_lost() -> None:
    # Invariant 4: the server stopped listening after it acknowledged; re-sending the
    # listen silently would keep the URIs covered with nothing listening (and reject the
    # new acknowledgment as a second one). The stream is lost: re-listen, re-read.
    protocol = ClientProtocol("test-server")
    protocol.listen("listen-1", frozenset({U}), True)
    acked = protocol.receive(decode(json.dumps(ack("listen-1", [U])).encode()))
    assert isinstance(acked, ForSubscription) and isinstance(acked.event, ListenAcknowledged)
    got = protocol.receive(_refusal("listen-1"))
    assert isinstance(got, ForSubscription) and got.final
    assert isinstance(got.event, StreamLost) and not protocol.is_open("listen-1")


def test_a_refusal_for_a_listen_not_open_is_never_a_relisten() -> None:
    protocol = ClientProtocol("test-server")
    got = protocol.listen_error("nobody", _refusal("nobody"))
    assert isinstance(got, ForSubscription) and isinstance(got.event, StreamLost)


def test_a_listen_refused_with_no_version_in_common_is_lost_at_once() -> None:
    protocol = ClientProtocol("test-server")
    protocol.listen(7, frozenset({U}), False)
    got = protocol.receive(_refusal(7, NONE_IN_COMMON))
    assert isinstance(got, ForSubscription) and isinstance(got.event, StreamLost)
    assert "no version in common" in got.event.detail


def _outcome(events: list[StreamEvent]) -> list[type]:
    return [type(e) for e in events]


def _in_stream(rid: Any) -> list[bytes]:
    return [frame(error(rid, -32022, "Unsupported protocol version", SUPPORTED))]


@pytest.mark.wire
@pytest.mark.anyio
@pytest.mark.parametrize(
    "refusal",
    [rpc_error(-32022, "Unsupported protocol version", 400, SUPPORTED), sse(_in_stream)],
    ids=["plain-json-400", "on-the-sse-stream"],
)
async def test_over_http_the_listen_is_sent_again_and_acknowledged(refusal: Any) -> None:
    script = Script().then("subscriptions/listen", refusal)
    async with serving(reference(), hook=script) as (http, make):
        source = make()
        events = await _until_ack(source)
    listens = [r for r in http.requests if _method(r) == "subscriptions/listen"]
    assert _outcome(events) == [ListenStarted, ListenAcknowledged]
    assert len(listens) == 2 and listens[0].message["id"] == listens[1].message["id"]


@pytest.mark.wire
@pytest.mark.anyio
async def test_over_http_a_second_refusal_ends_the_listen_as_lost() -> None:
    refusal = rpc_error(-32022, "Unsupported protocol version", 400, SUPPORTED)
    script = Script().then("subscriptions/listen", refusal, refusal)
    async with serving(reference(), hook=script) as (_http, make):
        events = await collect(make())
    assert _outcome(events) == [ListenStarted, StreamLost]


def _acked_then_refused(rid: Any) -> list[bytes]:
    return [frame(ack(rid, [U])), *_in_stream(rid)]


@pytest.mark.wire
@pytest.mark.anyio
async def test_over_http_a_refusal_after_the_acknowledgment_ends_the_listen_as_lost() -> None:
    script = Script().then("subscriptions/listen", sse(_acked_then_refused))
    async with serving(reference(), hook=script) as (http, make):
        events = await _until_end(make())
    listens = [r for r in http.requests if _method(r) == "subscriptions/listen"]
    assert _outcome(events) == [ListenStarted, ListenAcknowledged, StreamLost]
    assert len(listens) == 1


async def _until_end(source: Any) -> list[StreamEvent]:
    events: list[StreamEvent] = []
    with anyio.fail_after(10):
        async with aclosing(source.listen(frozenset({U}), True)) as stream:
            async for event in stream:
                events.append(event)
                if isinstance(event, StreamLost):
                    break
    return events


def _method(request: Any) -> object:
    return request.message.get("method") if isinstance(request.message, dict) else None


async def _until_ack(source: Any) -> list[StreamEvent]:
    events: list[StreamEvent] = []
    with anyio.fail_after(10):
        async with aclosing(source.listen(frozenset({U}), True)) as stream:
            async for event in stream:
                events.append(event)
                if not isinstance(event, ListenStarted):
                    break
    return events


def _script(mode: str) -> StdioSource:
    command = [sys.executable, str(FIXTURES / "stdio_scripts.py"), mode]
    return StdioSource(command, timeout=5.0, restart=FAST)


@pytest.mark.wire
@pytest.mark.anyio
async def test_over_stdio_the_listen_is_sent_again_and_acknowledged() -> None:
    source = _script("listen-version")
    try:
        await source.start()
        events = await _until_ack(source)
    finally:
        await source.aclose()
    assert _outcome(events) == [ListenStarted, ListenAcknowledged]


@pytest.mark.wire
@pytest.mark.anyio
async def test_over_stdio_a_second_refusal_ends_the_listen_as_lost() -> None:
    source = _script("listen-version-always")
    try:
        await source.start()
        events = await _until_ack(source)
    finally:
        await source.aclose()
    assert _outcome(events) == [ListenStarted, StreamLost]


@pytest.mark.wire
@pytest.mark.anyio
async def test_over_stdio_a_refusal_after_the_acknowledgment_ends_the_listen_as_lost() -> None:
    source = _script("listen-version-after-ack")
    try:
        await source.start()
        events = await _until_end(source)
    finally:
        await source.aclose()
    assert _outcome(events) == [ListenStarted, ListenAcknowledged, StreamLost]


class _NoProcess:
    pid = 0


def test_over_stdio_a_relisten_that_cannot_be_sent_ends_the_listen_as_lost() -> None:
    # The re-sent listen needs the connection's task group; without one it would be
    # dropped in silence while the subscription stays open. It is a loss instead.
    from freshcache._sources._background import Inbox
    from freshcache._sources._stdio import _Connection

    source = _script("listen-version")
    conn = _Connection(
        _NoProcess(),  # type: ignore[arg-type]
        source.max_line_bytes,
        source.counters,
        source.protocol,
    )
    conn.healthy = True
    inbox = Inbox[Any](8)
    conn.inboxes[id_key("listen-1")] = inbox
    source.protocol.listen("listen-1", frozenset({U}), True)
    got = source.protocol.receive(_refusal("listen-1"))
    assert isinstance(got, ListenAgain) and conn.tg is None
    source._process._deliver(conn, [got])
    assert [type(e) for e in inbox.items] == [StreamLost] and inbox.closed
    assert not source.protocol.is_open("listen-1")
