"""`StdioSource`: framing, demultiplexing, bad input, process life, cancellation.

The sans-IO parts (`LineBuffer`, `Demultiplexer`) are driven with recorded bytes split
at every boundary; the rest runs real subprocesses: the project's fault server
(``python -m freshcache.acceptance._stdio_server``) and the one-trick servers of
``tests/fixtures/stdio_scripts.py``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from freshcache import (
    BackoffSettings,
    ConfigurationError,
    FreshCache,
    StdioSource,
    UnsupportedVersionError,
)
from freshcache._core import (
    CatalogListChanged,
    ListenAcknowledged,
    ListenStarted,
    ListenUnsupported,
    ReadReply,
    RequestFailed,
    ResourceListChanged,
    ResourceUpdated,
    StreamClosed,
    StreamEvent,
    StreamLost,
    UntrustedMessage,
)
from freshcache._protocol._client import Answer, ForSubscription, Unclaimed
from freshcache._protocol._wire import ErrorResponse, Response
from freshcache._sources._stdio import (
    Demultiplexer,
    LineBuffer,
    OverlongLine,
)
from freshcache.acceptance._stdio_server import EXIT_DOWN, step_to_json
from freshcache.acceptance._stdio_world import ControlChannel
from freshcache.acceptance._steps import NextRead, ServerChange
from tests.polling import reads_done, until

from .conftest import FIXTURES, schema_validator

SELECTED = "guide://shipping/approval"
OTHER = "guide://shipping/rates"
U2 = "guide://shipping/holidays"
SCRIPTS = FIXTURES / "stdio_scripts.py"
FAST = BackoffSettings(base=0.02, cap=0.1, quick_death=0.0, max_per_hour=1_000_000)

# --------------------------------------------------------------------------- recorded bytes

SID_A, SID_B = "listen-A", 7  # a string and an integer subscription id on one channel


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n"


def _note(method: str, sid: Any, **params: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": method,
        "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": sid}, **params},
    }


def _ack(sid: Any, uris: list[str]) -> dict[str, Any]:
    return _note(
        "notifications/subscriptions/acknowledged",
        sid,
        notifications={"resourceSubscriptions": uris},
    )


# B's messages come before A's acknowledgment; responses are interleaved with both.
INTERLEAVED = b"".join(
    [
        _line(_ack(SID_B, [OTHER])),
        _line(_note("notifications/resources/updated", SID_B, uri=OTHER)),
        _line(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "result": {
                    "resultType": "complete",
                    "contents": [{"uri": SELECTED, "text": "v1 é ✓"}],
                },
            }
        ),
        _line(_note("notifications/resources/updated", SID_A, uri=SELECTED)),  # before A's ack
        _line(_ack(SID_A, [SELECTED])),
        b"\r\n",  # a blank line
        _line(_note("notifications/resources/list_changed", SID_A)),
        _line(
            {"jsonrpc": "2.0", "id": 2, "error": {"code": -32602, "message": "Resource not found"}}
        ),
        _line(_note("notifications/resources/updated", SID_B, uri=OTHER)),
        _line(
            {
                "jsonrpc": "2.0",
                "id": SID_B,
                "result": {
                    "resultType": "complete",
                    "_meta": {"io.modelcontextprotocol/subscriptionId": SID_B},
                },
            }
        ),
        _line(_note("notifications/resources/updated", SID_A, uri=SELECTED)),
    ]
)

# As the official SDK 2.3.0 server wrote them (notes/sdk/wire-transcripts.md, part 3).
SDK_TRANSCRIPT = b"".join(
    line.encode() + b"\n"
    for line in [
        '{"jsonrpc":"2.0","id":1,"result":{"cacheScope":"private","capabilities":{"resources":{"listChanged":true,"subscribe":true},"tools":{"listChanged":true}},"resultType":"complete","supportedVersions":["2026-07-28"],"ttlMs":0,"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"freshcache-fixture","version":"0.1.0"}}}}',
        '{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"listen-A"},"notifications":{"resourceSubscriptions":["guide://shipping/approval"]}}}',
        '{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":7},"notifications":{"resourcesListChanged":true}}}',
        '{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"listen-A"},"uri":"guide://shipping/approval"}}',
        '{"jsonrpc":"2.0","id":2,"result":{"content":[{"text":"ok","type":"text"}],"isError":false,"resultType":"complete"}}',
        '{"jsonrpc":"2.0","method":"notifications/resources/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":7}}}',
        '{"jsonrpc":"2.0","id":7,"result":{"_meta":{"io.modelcontextprotocol/subscriptionId":7,"io.modelcontextprotocol/serverInfo":{"name":"freshcache-fixture","version":"0.1.0"}},"resultType":"complete"}}',
    ]
)

RECORDINGS = {"interleaved-subscriptions": INTERLEAVED, "official-sdk-transcript": SDK_TRANSCRIPT}


def fresh_demux() -> Demultiplexer:
    demux = Demultiplexer(max_line_bytes=4096)
    demux.open_subscription(SID_A)
    demux.open_subscription(SID_B)
    demux.expect_response(1)
    demux.expect_response(2)
    return demux


def feed_in_pieces(data: bytes, cuts: list[int]) -> list[Any]:
    demux = fresh_demux()
    out: list[Any] = []
    start = 0
    for cut in [*cuts, len(data)]:
        out.extend(demux.feed(data[start:cut]))
        start = cut
    return out


# --------------------------------------------------------------------------- line framing


@pytest.mark.parametrize("name", sorted(RECORDINGS), ids=sorted(RECORDINGS))
def test_lines_are_the_same_whatever_byte_boundaries_split_the_input(name: str) -> None:
    data = RECORDINGS[name]
    whole = LineBuffer(4096).feed(data)
    assert len(whole) == data.count(b"\n")
    for cut in range(len(data) + 1):
        buffer = LineBuffer(4096)
        assert buffer.feed(data[:cut]) + buffer.feed(data[cut:]) == whole, f"split at byte {cut}"
    buffer = LineBuffer(4096)
    assert [line for i in range(len(data)) for line in buffer.feed(data[i : i + 1])] == whole


def test_an_over_long_line_is_skipped_without_being_kept_and_reported_once_with_its_size() -> None:
    data = b"x" * 5000 + b"\n" + b'{"ok":1}\n'
    for cut in range(0, len(data) + 1, 7):
        buffer = LineBuffer(1024)
        lines = buffer.feed(data[:cut]) + buffer.feed(data[cut:])
        assert lines == [OverlongLine(5000), b'{"ok":1}'], f"split at byte {cut}"
        assert buffer.pending == 0


def test_a_line_cut_by_the_end_of_input_is_handed_back_as_the_cut_remainder() -> None:
    buffer = LineBuffer(1024)
    assert buffer.feed(b'{"a":1}\n{"jsonrpc":"2.0","met') == [b'{"a":1}']
    assert buffer.feed_eof() == b'{"jsonrpc":"2.0","met'
    assert buffer.feed_eof() is None


# --------------------------------------------------------------------------- demultiplexing


@pytest.mark.parametrize("name", sorted(RECORDINGS), ids=sorted(RECORDINGS))
def test_routing_is_the_same_whatever_byte_boundaries_split_the_input(name: str) -> None:
    data = RECORDINGS[name]
    whole = feed_in_pieces(data, [])
    assert whole
    for cut in range(len(data) + 1):
        assert feed_in_pieces(data, [cut]) == whole, f"split at byte {cut}"
    assert feed_in_pieces(data, list(range(1, len(data)))) == whole


def test_interleaved_subscriptions_each_get_their_own_messages_in_order() -> None:
    deliveries = feed_in_pieces(INTERLEAVED, [])
    per_sub: dict[Any, list[StreamEvent]] = {}
    responses: dict[Any, Any] = {}
    for item in deliveries:
        if isinstance(item, ForSubscription):
            per_sub.setdefault(item.subscription_id, []).append(item.event)
        else:
            assert isinstance(item, Answer)
            responses[item.request_id] = item.message
    assert per_sub[SID_A] == [
        ResourceUpdated(SELECTED, SID_A),  # before its ack: passed on, the engine distrusts it
        ListenAcknowledged(SID_A, frozenset({SELECTED}), False),
        ResourceListChanged(SID_A),
        ResourceUpdated(SELECTED, SID_A),
    ]
    assert per_sub[SID_B] == [
        ListenAcknowledged(SID_B, frozenset({OTHER}), False),
        ResourceUpdated(OTHER, SID_B),
        ResourceUpdated(OTHER, SID_B),
        StreamClosed(SID_B),
    ]
    assert isinstance(responses[1], Response)
    assert responses[1].result["contents"][0]["text"] == "v1 é ✓"
    assert isinstance(responses[2], ErrorResponse)
    assert responses[2].code == -32602


def test_an_update_before_its_acknowledgment_is_counted_but_still_delivered() -> None:
    demux = fresh_demux()
    demux.feed(INTERLEAVED)
    assert demux.counters.before_ack == 1


@pytest.mark.parametrize(
    ("line", "counter", "untrusted"),
    [
        (b"{not json", "malformed", True),
        (b"\xff\xfe not utf-8", "malformed", True),
        (b"[1, 2, 3]", "malformed", True),
        (
            b'{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}',
            "server_requests",
            True,
        ),
        (b'{"jsonrpc":"2.0","id":99,"result":{}}', "unknown_responses", False),
        (
            b'{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"zzz"},"uri":"guide://x"}}',
            "unknown_subscriptions",
            False,
        ),
        (
            b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}',
            "unknown_subscriptions",
            True,
        ),
        (b"y" * 5000, "overlong", True),
    ],
    ids=[
        "not-json",
        "not-utf8",
        "not-an-object",
        "server-request",
        "unknown-response-id",
        "unknown-subscription-id",
        "server-cancels-a-plain-request",
        "over-long-line",
    ],
)
def test_lines_that_cannot_be_trusted_never_raise_and_are_counted(
    line: bytes, counter: str, untrusted: bool
) -> None:
    demux = fresh_demux()
    out = demux.feed(line + b"\n")
    assert getattr(demux.counters, counter) == 1
    routed = [d for d in out if isinstance(d, ForSubscription)]
    if untrusted:
        assert routed == [ForSubscription(SID_A, routed[0].event)]
        assert isinstance(routed[0].event, UntrustedMessage)
    else:
        assert all(not isinstance(d, Answer) for d in out)
    # The channel still works afterwards.
    assert demux.feed(b'{"jsonrpc":"2.0","id":1,"result":{}}\n') == [Answer(1, Response(1, {}))]


def test_a_change_hint_for_an_unknown_subscription_still_reaches_the_engine_to_invalidate() -> None:
    demux = fresh_demux()
    out = demux.feed(_line(_note("notifications/resources/updated", "zzz", uri=SELECTED)))
    assert out == [ForSubscription(SID_A, ResourceUpdated(SELECTED, "zzz"))]


def test_a_change_hint_no_open_subscription_can_carry_is_still_handed_on() -> None:
    demux = Demultiplexer(max_line_bytes=4096)
    out = demux.feed(
        _line(
            {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": U2}}
        )
        + _line(_note("notifications/resources/list_changed", "zzz"))
        + _line(_note("notifications/tools/list_changed", "zzz"))
    )
    assert out == [
        Unclaimed(ResourceUpdated(U2, None)),
        Unclaimed(ResourceListChanged("zzz")),
        Unclaimed(CatalogListChanged("tools", "zzz")),  # a catalog hint is a change hint too
    ]
    assert demux.counters.unknown_subscriptions == 3


def test_ids_are_compared_with_their_json_type() -> None:
    demux = fresh_demux()
    assert demux.feed(b'{"jsonrpc":"2.0","id":"1","result":{}}\n') == []
    assert demux.counters.unknown_responses == 1


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            b'{"jsonrpc":"2.0","id":"listen-A","result":{"resultType":"complete"}}',
            StreamClosed(SID_A),
        ),
        (
            b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"listen-A"}}',
            StreamClosed(SID_A),
        ),
        (
            b'{"jsonrpc":"2.0","id":"listen-A","error":{"code":-32601,"message":"Method not found"}}',
            ListenUnsupported("the server has no subscriptions/listen (Method not found)"),
        ),
        (
            b'{"jsonrpc":"2.0","id":"listen-A","error":{"code":-32603,"message":"boom"}}',
            StreamLost(SID_A, "the server refused the subscription: -32603 boom"),
        ),
    ],
    ids=["listen-result", "server-sent-cancelled", "listen-method-not-found", "listen-error"],
)
def test_what_ends_a_subscription_is_its_last_event(line: bytes, expected: StreamEvent) -> None:
    demux = fresh_demux()
    assert demux.feed(line + b"\n") == [ForSubscription(SID_A, expected, final=True)]
    assert SID_A not in demux.open_subscriptions
    assert demux.feed(_line(_note("notifications/resources/updated", SID_A, uri=SELECTED))) == [
        ForSubscription(
            SID_B, ResourceUpdated(SELECTED, SID_A)
        )  # now an unknown id: the catch-all hears it
    ]


def test_a_cut_last_line_is_counted_when_the_output_ends() -> None:
    demux = fresh_demux()
    demux.feed(b'{"jsonrpc":"2.0","method":"notif')
    assert demux.feed_eof() == len(b'{"jsonrpc":"2.0","method":"notif')
    assert demux.counters.cut_lines == 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=600), st.lists(st.integers(min_value=0, max_value=600), max_size=8))
def test_arbitrary_bytes_never_make_the_demultiplexer_raise(junk: bytes, cuts: list[int]) -> None:
    data = junk + INTERLEAVED
    demux = fresh_demux()
    start = 0
    for cut in sorted(c for c in cuts if c <= len(data)):
        demux.feed(data[start:cut])
        start = cut
    demux.feed(data[start:])
    demux.feed_eof()
    assert demux.counters.lines == data.count(b"\n")  # every line was looked at, none lost


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
            "method": st.sampled_from(["notifications/resources/updated", 3]),
            "params": _JSON,
            "id": st.none() | st.integers() | st.text(max_size=3),
            "result": _JSON,
            "error": _JSON,
        },
    )
)
def test_the_fast_path_for_notifications_decides_like_the_validating_parser(
    obj: dict[str, Any],
) -> None:
    from freshcache._protocol._client import _fast_notification
    from freshcache._protocol._wire import parse_message

    fast = _fast_notification(obj)
    assert fast is None or fast == parse_message(obj)


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("python -m server",), {}, "argument list"),
        (([],), {}, "non-empty list"),
        ((["python", ""],), {}, "non-empty list"),
        ((["python"],), {"timeout": 0}, "timeout"),
        ((["python"],), {"max_line_bytes": 10}, "max_line_bytes"),
        ((["python"],), {"max_backlog": 0}, "max_backlog"),
    ],
    ids=[
        "command-as-string",
        "empty-command",
        "empty-argument",
        "zero-timeout",
        "tiny-line-limit",
        "no-backlog",
    ],
)
def test_bad_arguments_are_named(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        StdioSource(*args, **kwargs)


def test_the_identity_is_the_command_line() -> None:
    assert StdioSource(["python", "-m", "my server"]).identity == "stdio:python -m 'my server'"


# --------------------------------------------------------------------------- over real processes

SERVER = [sys.executable, "-m", "freshcache.acceptance._stdio_server"]


Control = Callable[..., Awaitable[dict[str, Any] | None]]


@asynccontextmanager
async def fault_server(tmp_path: Path, **kwargs: Any) -> AsyncIterator[tuple[StdioSource, Control]]:
    """The fault server under a `StdioSource`, and a way to send it control commands."""
    state, control_file = tmp_path / "state.json", tmp_path / "control.json"
    options: dict[str, Any] = {"timeout": 5.0, "restart": FAST, "shutdown_timeout": 2.0, **kwargs}
    source = StdioSource(
        [*SERVER, "--state", str(state), "--control-file", str(control_file)], **options
    )
    channel = ControlChannel(control_file)

    async def control(op: str, **fields: Any) -> dict[str, Any] | None:
        # A restarted process announces its control port a moment after it starts.
        with anyio.fail_after(10):
            while (reply := await channel.command(source.pid, {"op": op, **fields})) is None:
                await anyio.sleep(0.01)
        return reply

    try:
        with anyio.fail_after(30):  # the first answer waits for the interpreter to start
            while not (info := await source.start()).reachable:
                assert "no answer" in info.detail, info.detail
        yield source, control
    finally:
        await channel.aclose()
        await source.aclose()


async def received(
    control: Control, enough: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    """Every message the fault server received, once ``enough`` of them have arrived (the
    pipe and the control port are different channels: no order between them)."""
    with anyio.fail_after(10):
        while True:
            state = await control("requests")
            assert state is not None
            if enough(state["requests"]):
                return list(state["requests"])
            await anyio.sleep(0.01)


def cancels(messages: list[dict[str, Any]]) -> list[Any]:
    return [m["params"]["requestId"] for m in messages if m["method"] == "notifications/cancelled"]


def script(mode: str, **kwargs: Any) -> StdioSource:
    options: dict[str, Any] = {"timeout": 5.0, "restart": FAST, **kwargs}
    return StdioSource([sys.executable, str(SCRIPTS), mode], **options)


async def next_event(events: AsyncIterator[StreamEvent]) -> StreamEvent:
    with anyio.fail_after(10):
        return await events.__anext__()


@pytest.mark.wire
@pytest.mark.anyio
async def test_every_request_and_notification_the_source_sends_matches_the_schema(
    tmp_path: Path, mcp_schema: dict[str, Any]
) -> None:
    async with fault_server(tmp_path) as (source, control):
        assert isinstance(await source.read_resource(SELECTED, None), ReadReply)
        assert (await source.list_resources(None, None)).resources  # type: ignore[union-attr]
        await source.list_resources("0:1", None)
        await control("step", step=step_to_json(NextRead(OTHER, "timeout")))
        assert isinstance(
            await source.send_request("resources/read", {"uri": OTHER}, timeout=0.2), RequestFailed
        )
        async with aclosing(source.listen(frozenset({SELECTED}), True)) as events:
            assert isinstance(await next_event(events), ListenStarted)
            assert isinstance(await next_event(events), ListenAcknowledged)
        # Two cancellations: the timed-out read and the closed listen.
        requests = await received(control, lambda got: len(cancels(got)) == 2)
    by_method = {
        "server/discover": "DiscoverRequest",
        "resources/read": "ReadResourceRequest",
        "resources/list": "ListResourcesRequest",
        "subscriptions/listen": "SubscriptionsListenRequest",
        "notifications/cancelled": "CancelledNotification",
    }
    seen: dict[str, int] = {}
    for message in requests:
        definition = by_method[message["method"]]
        errors = [e.message for e in schema_validator(mcp_schema, definition).iter_errors(message)]
        assert not errors, f"{message}: {errors}"
        assert not [
            e.message
            for e in schema_validator(
                mcp_schema, "ClientRequest" if "id" in message else "ClientNotification"
            ).iter_errors(message)
        ]
        seen[message["method"]] = seen.get(message["method"], 0) + 1
    assert set(seen) == set(by_method), seen
    assert seen["notifications/cancelled"] == 2


@pytest.mark.wire
@pytest.mark.anyio
async def test_closing_a_subscription_sends_notifications_cancelled_naming_the_listen_id(
    tmp_path: Path,
) -> None:
    async with fault_server(tmp_path) as (source, control):
        async with aclosing(source.listen(frozenset({SELECTED}), False)) as events:
            started = await next_event(events)
            assert isinstance(started, ListenStarted)
            assert isinstance(await next_event(events), ListenAcknowledged)
            assert (await control("state"))["subscribers"] == 1  # type: ignore[index]
        requests = await received(control, lambda got: bool(cancels(got)))
        assert cancels(requests) == [started.subscription_id]
        state = await control("state")
        assert state is not None
        assert state["subscribers"] == 0
        assert source.stats().open_subscriptions == 0


@pytest.mark.wire
@pytest.mark.anyio
async def test_a_call_cut_off_while_its_bytes_drain_may_have_run(tmp_path: Path) -> None:
    # A sequential server busy on one call does not read stdin; a large call fills the
    # pipe and its write waits for the server. The source's own deadline cuts the
    # write off, yet the bytes written are delivered and the server runs the call: it
    # is `may_have_run` (never "not sent", which would invite a second send).
    source = script("busy-tools", timeout=1.0, cwd=tmp_path)
    async with FreshCache(source, read_timeout=10.0) as cache, anyio.create_task_group() as tg:
        tg.start_soon(cache.call_tool, "slow", {})
        await until(lambda: (tmp_path / "busy").exists())
        call = await cache.call_tool("pay", {"amount": 500, "memo": "x" * 400_000}, timeout=10)
        await until(lambda: "pay" in _ran(tmp_path))
        assert call.state == "may_have_run", call
        assert _ran(tmp_path) == ["slow", "pay"]


def _ran(tmp_path: Path) -> list[str]:
    log = tmp_path / "ran.log"
    return log.read_text().split() if log.exists() else []


@pytest.mark.wire
@pytest.mark.anyio
async def test_a_request_that_times_out_is_cancelled_and_its_late_answer_ignored(
    tmp_path: Path,
) -> None:
    async with fault_server(tmp_path, timeout=0.3) as (source, control):
        await control("step", step=step_to_json(NextRead(SELECTED, "timeout")))
        failed = await source.read_resource(SELECTED, None)
        assert isinstance(failed, RequestFailed)
        assert failed.kind == "timeout"

        def read_cancelled(got: list[dict[str, Any]]) -> bool:
            reads = [r["id"] for r in got if r["method"] == "resources/read"]
            return bool(reads) and reads[-1] in cancels(got)

        requests = await received(control, read_cancelled)
        read_id = [r["id"] for r in requests if r["method"] == "resources/read"][-1]
        assert cancels(requests)[-1] == read_id
        late_before = source.counters.unknown_responses  # late answers to start()'s probes too
        await control(
            "write_raw",
            line=json.dumps({"jsonrpc": "2.0", "id": read_id, "result": {"contents": []}}),
        )
        assert isinstance(await source.read_resource(SELECTED, None), ReadReply)
        assert source.counters.unknown_responses == late_before + 1
        assert source.stats().in_flight == 0


@pytest.mark.wire
@pytest.mark.anyio
async def test_subscriptions_are_demultiplexed_when_another_ones_messages_come_before_an_ack(
    tmp_path: Path,
) -> None:
    async with (
        fault_server(tmp_path) as (source, control),
        aclosing(source.listen(frozenset({OTHER}), False)) as first,
    ):
        assert isinstance(await next_event(first), ListenStarted)
        assert isinstance(await next_event(first), ListenAcknowledged)
        await control("interleave", uri=OTHER, count=3)
        async with aclosing(source.listen(frozenset({SELECTED}), True)) as second:
            started = await next_event(second)
            assert isinstance(started, ListenStarted)
            ack = await next_event(second)
            assert ack == ListenAcknowledged(
                started.subscription_id,
                frozenset({SELECTED}),
                True,
                frozenset({"tools", "prompts", "resource_templates"}),
            )
            firsts = [await next_event(first) for _ in range(3)]
            assert all(isinstance(e, ResourceUpdated) and e.uri == OTHER for e in firsts)
            await control("step", step=step_to_json(ServerChange("close_stream")))
            assert await next_event(second) == StreamClosed(started.subscription_id)
        assert isinstance(await next_event(first), StreamClosed)


@pytest.mark.wire
@pytest.mark.anyio
async def test_a_flood_of_notifications_arrives_complete_and_in_order(tmp_path: Path) -> None:
    async with (
        fault_server(tmp_path) as (source, control),
        aclosing(source.listen(frozenset({SELECTED}), False)) as events,
    ):
        started = await next_event(events)
        assert isinstance(await next_event(events), ListenAcknowledged)
        await control("flood", uri=SELECTED, count=5000)
        got = [await next_event(events) for _ in range(5000)]
        assert got == [ResourceUpdated(SELECTED, started.subscription_id)] * 5000
        assert source.counters.overflows == 0


@pytest.mark.wire
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("op", "fields", "counter"),
    [
        ("write_raw", {"line": "{garbage"}, "malformed"),
        ("write_raw", {"line": "z" * 5000}, "overlong"),
        ("write_request", {"method": "sampling/createMessage"}, "server_requests"),
    ],
    ids=["garbage-line", "over-long-line", "request-from-the-server"],
)
async def test_bad_lines_never_crash_and_reach_the_subscription_as_untrusted(
    tmp_path: Path, op: str, fields: dict[str, Any], counter: str
) -> None:
    async with (
        fault_server(tmp_path, max_line_bytes=4096) as (source, control),
        aclosing(source.listen(frozenset({SELECTED}), False)) as events,
    ):
        assert isinstance(await next_event(events), ListenStarted)
        assert isinstance(await next_event(events), ListenAcknowledged)
        await control(op, **fields)
        assert isinstance(await next_event(events), UntrustedMessage)
        assert getattr(source.counters, counter) == 1
        reply = await source.read_resource(SELECTED, None)
        assert isinstance(reply, ReadReply)
        assert reply.contents[0].text == f"{SELECTED} @ v1"


@pytest.mark.wire
@pytest.mark.anyio
async def test_a_process_that_dies_mid_line_fails_what_was_in_flight_and_is_restarted(
    tmp_path: Path,
) -> None:
    async with fault_server(tmp_path) as (source, control):
        await control("step", step=step_to_json(ServerChange("hold_reads")))
        async with aclosing(source.listen(frozenset({SELECTED}), False)) as events:
            started = await next_event(events)
            assert isinstance(await next_event(events), ListenAcknowledged)
            pid = source.pid
            async with anyio.create_task_group() as tg:
                outcome: list[Any] = []

                async def read() -> None:
                    outcome.append(await source.read_resource(SELECTED, None))

                tg.start_soon(read)
                await until(lambda: source.stats().in_flight == 1)
                await control("die")
            lost = await next_event(events)
            assert isinstance(lost, StreamLost)
            assert lost.subscription_id == started.subscription_id
            assert "cut off" in lost.detail
            assert isinstance(outcome[0], RequestFailed)
            assert outcome[0].kind == "unreachable"
            assert source.counters.cut_lines == 1
        await until(lambda: source.pid not in (None, pid))
        await control("step", step=step_to_json(ServerChange("release_reads")))
        assert isinstance(await source.read_resource(SELECTED, None), ReadReply)
        assert source.counters.unexpected_exits == 1


@pytest.mark.wire
@pytest.mark.anyio
async def test_after_a_restart_the_cache_listens_again_and_rereads_every_selected_uri(
    tmp_path: Path,
) -> None:
    async with fault_server(tmp_path) as (source, control):
        cache_backoff = BackoffSettings(base=0.005, cap=0.02, quick_death=0.0)
        async with FreshCache(source, select=[SELECTED], backoff=cache_backoff) as cache:
            await until(lambda: cache.stream_status == "live" and reads_done(cache))
            assert (await cache.read(SELECTED)).state == "fresh"
            reads_before = (await control("state"))["reads"]  # type: ignore[index]
            pid = source.pid
            await control("step", step=step_to_json(ServerChange("drop_stream")))
            await until(
                lambda: source.pid not in (None, pid) and cache.engine.counters.acknowledgments == 2
            )
            await until(lambda: reads_done(cache))
            state = await control("state")
            assert state is not None
            assert state["reads"] == reads_before + 1  # the re-read after the new acknowledgment
            assert cache.engine.counters.stream_losses == 1
            assert cache.status(SELECTED).state == "fresh"
            assert cache.stream_status == "live"


@pytest.mark.wire
@pytest.mark.anyio
async def test_reads_while_the_server_cannot_start_say_unreachable_with_the_reason() -> None:
    source = script("exit-now")
    try:
        info = await source.start()
        assert not info.reachable
        reply = await source.read_resource(SELECTED, None)
        assert isinstance(reply, RequestFailed)
        assert reply.kind == "unreachable"
        assert "exited with code 2" in reply.detail
        assert "refusing to start" in reply.detail  # its last words on stderr
    finally:
        await source.aclose()


@pytest.mark.wire
@pytest.mark.anyio
async def test_a_process_that_never_answered_is_unreachable_not_timed_out() -> None:
    # A server that is down is a command whose processes exit before they answer: a
    # request sent to one still starting must not be taken for a slow answer.
    source = script("mute", timeout=0.3)
    try:
        info = await source.start()
        assert not info.reachable
        assert "no answer" in info.detail
        reply = await source.read_resource(SELECTED, None)
        assert isinstance(reply, RequestFailed)
        assert reply.kind == "unreachable"
        assert "has not answered anything since it started" in reply.detail
        assert source.pid is not None  # it runs: reached is more than started
    finally:
        await source.aclose()


@pytest.mark.anyio
async def test_a_missing_executable_is_reported_at_once_with_a_clear_message() -> None:
    source = StdioSource(["/nonexistent/freshcache-server"], timeout=30.0)
    try:
        started = time.monotonic()
        info = await source.start()
        assert time.monotonic() - started < 5.0
        assert not info.reachable
        assert "'/nonexistent/freshcache-server' was not found" in info.detail
        assert "PATH" in info.detail
    finally:
        await source.aclose()


@pytest.mark.wire
@pytest.mark.anyio
async def test_a_hint_written_before_a_response_rides_on_the_reply_when_no_stream_is_open(
    tmp_path: Path,
) -> None:
    async with fault_server(tmp_path) as (source, control):
        await control("step", step=step_to_json(NextRead(OTHER, "hint_no_id")))
        await control("step", step=step_to_json(NextRead(SELECTED, "hint_unknown_id")))
        other = await source.read_resource(OTHER, None)
        selected = await source.read_resource(SELECTED, None)
        plain = await source.read_resource(OTHER, None)
    assert isinstance(other, ReadReply) and other.hints == (ResourceUpdated(OTHER, None),)
    assert isinstance(selected, ReadReply)
    assert selected.hints == (ResourceUpdated(SELECTED, "not-a-subscription"),)
    assert isinstance(plain, ReadReply) and plain.hints == ()


@pytest.mark.wire
@pytest.mark.anyio
async def test_with_a_stream_open_a_hint_reaches_the_engine_exactly_once(tmp_path: Path) -> None:
    async with (
        fault_server(tmp_path) as (source, control),
        aclosing(source.listen(frozenset({SELECTED}), False)) as events,
    ):
        started = await next_event(events)
        assert isinstance(await next_event(events), ListenAcknowledged)
        await control("step", step=step_to_json(NextRead(OTHER, "hint")))
        reply = await source.read_resource(OTHER, None)
        # A marker behind the hint on the channel: every event before it is in.
        await control("flood", uri=U2, count=1)
        seen: list[StreamEvent] = []
        while (event := await next_event(events)) != ResourceUpdated(U2, started.subscription_id):
            seen.append(event)
    assert isinstance(reply, ReadReply)
    hint = ResourceUpdated(OTHER, started.subscription_id)  # type: ignore[union-attr]
    assert reply.hints.count(hint) + seen.count(hint) == 1, (reply.hints, seen)


@pytest.mark.wire
@pytest.mark.anyio
async def test_request_state_rounds_and_version_renegotiation_work_as_over_http(
    tmp_path: Path,
) -> None:
    async with fault_server(tmp_path) as (source, control):
        await control("step", step=step_to_json(NextRead(OTHER, "input_rounds")))
        rounds = await source.read_resource(OTHER, None)
        await control("step", step=step_to_json(NextRead(OTHER, "version_refused")))
        renegotiated = await source.read_resource(OTHER, None)
        requests = await received(control, lambda got: len(got) >= 5)
    assert isinstance(rounds, ReadReply) and rounds.multi_round_trip
    assert isinstance(renegotiated, ReadReply) and not renegotiated.multi_round_trip
    reads = [m["params"] for m in requests if m.get("method") == "resources/read"]
    assert [p.get("requestState") for p in reads] == [None, "round-1", None, None]
    assert source.protocol_version == "2026-07-28"


@pytest.mark.wire
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("fault", "field"),
    [("no_contents", "contents"), ("ttl_string", "ttlMs"), ("ttl_bool", "ttlMs")],
    ids=["no-contents", "ttl-a-string", "ttl-a-boolean"],
)
async def test_a_result_that_breaks_the_schema_is_a_server_error_over_stdio(
    tmp_path: Path, fault: str, field: str
) -> None:
    async with fault_server(tmp_path) as (source, control):
        await control("step", step=step_to_json(NextRead(OTHER, fault)))  # type: ignore[arg-type]
        reply = await source.read_resource(OTHER, None)
    assert isinstance(reply, RequestFailed) and reply.kind == "server_error"
    assert f"malformed read result: {field}:" in reply.detail


@pytest.mark.wire
@pytest.mark.anyio
async def test_a_server_without_our_protocol_version_is_a_configuration_error() -> None:
    source = script("old-version")
    try:
        with pytest.raises(UnsupportedVersionError, match="2026-07-28") as raised:
            await source.start()
        assert raised.value.supported == ("2025-11-25",)
    finally:
        await source.aclose()


@pytest.mark.wire
@pytest.mark.anyio
async def test_a_server_that_keeps_dying_young_spends_the_restart_budget() -> None:
    budget = BackoffSettings(
        base=0.01, cap=0.02, quick_death=30.0, max_quick_deaths=2, cooldown=3600.0
    )
    source = script("answer-then-exit", restart=budget)  # each process answers once, then exits
    try:
        assert (await source.start()).reachable
        await until(lambda: source.counters.unexpected_exits == 1 and source.pid is not None)
        assert isinstance(await source.read_resource(SELECTED, None), ReadReply)
        await until(lambda: source.counters.unexpected_exits == 2)
        reply = await source.read_resource(SELECTED, None)
        assert isinstance(reply, RequestFailed)
        assert reply.kind == "unreachable"
        assert "restart budget spent" in reply.detail
        assert source.counters.starts == 2
    finally:
        await source.aclose()


@pytest.mark.wire
@pytest.mark.anyio
@pytest.mark.parametrize(
    "inherit", [True, False], ids=["default-passes-the-whole-environment", "env-replaces-it"]
)
async def test_the_environment_and_working_directory_reach_the_server(
    inherit: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FRESHCACHE_STDIO_MARK", "from-the-caller")
    env = None if inherit else {"PATH": os.environ.get("PATH", ""), "ONLY_THIS": "yes"}
    source = script("env", env=env, cwd=tmp_path)
    try:
        mark = await source.read_resource("env://FRESHCACHE_STDIO_MARK", None)
        only = await source.read_resource("env://ONLY_THIS", None)
        cwd = await source.read_resource("cwd://", None)
        assert isinstance(mark, ReadReply)
        assert isinstance(only, ReadReply)
        assert isinstance(cwd, ReadReply)
        assert mark.contents[0].text == ("from-the-caller" if inherit else "<unset>")
        assert only.contents[0].text == ("<unset>" if inherit else "yes")
        here = await anyio.Path(cwd.contents[0].text or "").resolve()
        assert here == await anyio.Path(tmp_path).resolve()
    finally:
        await source.aclose()


@pytest.mark.wire
@pytest.mark.anyio
async def test_stderr_goes_to_logging_and_is_never_read_as_protocol(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="freshcache.stdio")
    source = script("noisy-stderr")
    try:
        reply = await source.read_resource(SELECTED, None)
        assert isinstance(reply, ReadReply)
        await until(lambda: any("noisy-stderr: ready" in r.getMessage() for r in caplog.records))
        assert any(
            '"not":"protocol"' in r.getMessage()
            for r in caplog.records
            if r.name == "freshcache.stdio"
        )
        assert source.counters.unknown_responses == 0
        assert source.counters.messages == 1
    finally:
        await source.aclose()


@pytest.mark.wire
@pytest.mark.anyio
async def test_shutdown_closes_stdin_and_the_server_leaves_on_its_own(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="freshcache.stdio")
    async with fault_server(tmp_path, shutdown_timeout=5.0) as (source, _):
        pid = source.pid
        started = time.monotonic()
    assert time.monotonic() - started < 4.0
    assert pid is not None
    assert not _alive(pid)
    assert not [r for r in caplog.records if "did not exit" in r.getMessage()]


@pytest.mark.wire
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("mode", "signals"),
    [("ignore-eof", ["SIGTERM"]), ("ignore-term", ["SIGTERM", "SIGKILL"])],
    ids=["sigterm-when-stdin-closing-is-ignored", "sigkill-when-sigterm-is-ignored-too"],
)
async def test_shutdown_escalates_to_signals_within_its_timeouts(
    mode: str, signals: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="freshcache.stdio")
    source = script(mode, shutdown_timeout=0.3)
    assert (await source.start()).reachable
    pid = source.pid
    started = time.monotonic()
    await source.aclose()
    assert time.monotonic() - started < 0.3 * (len(signals) + 1) + 1.0
    assert pid is not None
    assert not _alive(pid)
    sent = [
        s
        for s in ("SIGTERM", "SIGKILL")
        if any(f"sent {s}" in r.getMessage() for r in caplog.records)
    ]
    assert sent == signals
    assert source.counters.unexpected_exits == 0


@pytest.mark.wire
@pytest.mark.anyio
async def test_a_server_that_is_down_exits_at_once_until_it_comes_back(tmp_path: Path) -> None:
    async with fault_server(tmp_path) as (source, control):
        pid = source.pid
        await control("step", step=step_to_json(ServerChange("down")))
        await until(lambda: source.pid != pid)
        await until(lambda: source.counters.starts >= 3)  # restarts that exit at once
        reply = await source.read_resource(SELECTED, None)
        assert isinstance(reply, RequestFailed)
        assert reply.kind == "unreachable"
        assert f"exited with code {EXIT_DOWN}" in reply.detail
        state = json.loads((tmp_path / "state.json").read_text())
        (tmp_path / "state.json").write_text(json.dumps({**state, "down": False}))
        await until(lambda: source.pid is not None)
        assert isinstance(await source.read_resource(SELECTED, None), ReadReply)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
