"""``-32022`` answering ``subscriptions/listen``: one rule, every wire (invariant 11).

The rule is `ClientProtocol.listen_error`'s: a ``-32022`` naming a version both sides
speak keeps the subscription open and sends the same listen again (same id, the new
version), once; a second one ends the stream with `StreamLost`. It is checked sans-IO,
then over HTTP (the error as a plain JSON answer and on the listen's SSE stream) and
over stdio (the error on the pipe), with the same outcomes.
"""

from __future__ import annotations

import sys
from contextlib import aclosing
from typing import Any

import anyio
import pytest

from freshcache import StdioSource
from freshcache._core import ListenAcknowledged, ListenStarted, StreamEvent, StreamLost
from freshcache._protocol._client import ClientProtocol, ForSubscription, Relisten
from freshcache._protocol._wire import PROTOCOL_VERSION, ErrorResponse

from .conftest import FIXTURES
from .test_http_source import Script, U, collect, error, frame, reference, rpc_error, serving, sse
from .test_stdio_source import FAST

SUPPORTED = {"supported": [PROTOCOL_VERSION], "requested": PROTOCOL_VERSION}
NONE_IN_COMMON = {"supported": ["2099-01-01"], "requested": PROTOCOL_VERSION}


def _refusal(sid: Any, data: dict[str, Any] = SUPPORTED) -> ErrorResponse:
    return ErrorResponse(sid, -32022, "Unsupported protocol version", data)


def test_a_listen_refused_for_its_version_is_sent_again_once_with_the_same_id() -> None:
    protocol = ClientProtocol("test-server")
    protocol.listen("listen-1", frozenset({U}), True)
    again = protocol.receive(_refusal("listen-1"))
    assert isinstance(again, Relisten) and again.subscription_id == "listen-1"
    assert again.outgoing.message["id"] == "listen-1"
    assert again.outgoing.message["params"]["notifications"] == {
        "resourceSubscriptions": [U],
        "resourcesListChanged": True,
    }
    assert protocol.is_open("listen-1")
    twice = protocol.receive(_refusal("listen-1"))
    assert isinstance(twice, ForSubscription) and twice.final
    assert isinstance(twice.event, StreamLost) and not protocol.is_open("listen-1")


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
