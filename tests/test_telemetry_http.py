"""OpenTelemetry over real HTTP: seed rows 1, 4, 5 and 8 leave exactly these traces.

Each row is played by `HttpWorld` (HttpSource over a loopback socket to the reference
server) with in-memory tracer and meter providers; the test then reads the finished
spans and the metrics, and checks that ``traceparent`` reached the server in
``params._meta``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from freshcache.acceptance import HttpWorld, is_fleet_row, load_cases, play
from tests.telemetry_support import Recorder

TABLES = Path(__file__).resolve().parents[1] / "acceptance_tables"
CASES = {c.id: c for c in load_cases([TABLES]) if not is_fleet_row(c)}
SELECTED = "guide://shipping/approval"

pytestmark = [pytest.mark.anyio, pytest.mark.wire]

METRIC_NAMES = {
    "freshcache.reads",
    "freshcache.invalidations",
    "freshcache.server_reads",
    "freshcache.relistens",
    "freshcache.invalidation_to_fresh",
    "freshcache.store.entries",
    "freshcache.store.bytes",
    "mcp.client.operation.duration",
}


@pytest.fixture
def recorder():
    rec = Recorder.make()
    yield rec
    rec.shutdown()


async def played(case_id: str, recorder: Recorder) -> HttpWorld:
    world = HttpWorld(cache_options=recorder.kwargs())
    report = await play(CASES[case_id], world)
    assert report.passed, report.failures
    return world


def request_attributes(span, world: HttpWorld) -> dict:
    attrs = dict(span.attributes)
    assert attrs.pop("jsonrpc.request.id").isdigit()
    return attrs


def traceparents(world: HttpWorld, method: str) -> list[str]:
    out = []
    for message in world.http.protocol.requests:
        if message.get("method") == method:
            out.append(message["params"]["_meta"].get("traceparent"))
    return out


def assert_traceparent_reached_the_server(span, world: HttpWorld, method: str) -> None:
    ctx = span.context
    expected = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-"
    assert any(tp and tp.startswith(expected) for tp in traceparents(world, method)), (
        expected,
        traceparents(world, method),
    )


async def test_seed_1_invalidation_event_and_reread_span_under_the_listen_span(recorder):
    world = await played("seed-1", recorder)
    listens = recorder.spans("subscriptions/listen")
    live = [s for s in listens if any(e.name == "freshcache.invalidated" for e in s.events)]
    assert len(live) == 1
    listen = live[0]
    assert request_attributes(listen, world) == {
        "mcp.method.name": "subscriptions/listen",
        "mcp.protocol.version": "2026-07-28",
        "network.transport": "tcp",
        "network.protocol.name": "http",
        "server.address": "127.0.0.1",
        "server.port": world.http.port,
        "freshcache.listen.attempt": listen.attributes["freshcache.listen.attempt"],
        "freshcache.listen.uris": (SELECTED,),
    }
    acked, event = [e for e in listen.events if e.name == "freshcache.invalidated"]
    assert acked.attributes["freshcache.cause"] == "acknowledged"  # invariant 4
    assert dict(event.attributes) == {
        "mcp.resource.uri": SELECTED,
        "freshcache.cause": "resources/updated",
        "freshcache.trusted": True,
        "freshcache.subscription_id": listen.attributes["jsonrpc.request.id"],
    }
    assert [e.name for e in listen.events][:1] == ["freshcache.acknowledged"]
    rereads = [
        s
        for s in recorder.spans("resources/read")
        if s.parent and s.parent.span_id == listen.context.span_id
    ]
    assert rereads, "the re-read the notification caused is a child of the listen span"
    assert request_attributes(rereads[-1], world)["mcp.resource.uri"] == SELECTED
    assert_traceparent_reached_the_server(listen, world, "subscriptions/listen")
    assert_traceparent_reached_the_server(rereads[-1], world, "resources/read")
    metrics = recorder.metrics()
    assert set(metrics) <= METRIC_NAMES | set()
    assert ({"freshcache.cause": "resources/updated", "freshcache.trusted": True}, 1) in metrics[
        "freshcache.invalidations"
    ]


async def test_seed_4_timeout_on_the_read_span_and_the_request_span(recorder):
    world = await played("seed-4", recorder)
    read = recorder.spans("freshcache.read")[-1]
    assert dict(read.attributes) == {
        "mcp.resource.uri": SELECTED,
        "freshcache.state": "awaiting_fresh_source",
        "freshcache.reason": "timeout",
        "freshcache.server_read": True,
    }
    request = [
        s
        for s in recorder.spans("resources/read")
        if s.parent and s.parent.span_id == read.context.span_id
    ]
    assert len(request) == 1
    assert request[0].attributes["error.type"] == "timeout"
    assert not request[0].status.is_ok
    assert_traceparent_reached_the_server(request[0], world, "resources/read")
    durations = recorder.metrics()["mcp.client.operation.duration"]
    assert any(
        attrs == {"mcp.method.name": "resources/read", "error.type": "timeout"}
        for attrs, _ in durations
    )


async def test_seed_5_denial_on_the_read_span_and_the_request_span(recorder):
    world = await played("seed-5", recorder)
    read = recorder.spans("freshcache.read")[-1]
    assert dict(read.attributes) == {
        "mcp.resource.uri": SELECTED,
        "freshcache.state": "denied",
        "freshcache.reason": "denied",
        "freshcache.server_read": True,
    }
    (request,) = [
        s
        for s in recorder.spans("resources/read")
        if s.parent and s.parent.span_id == read.context.span_id
    ]
    assert request.attributes["error.type"] == "denied"
    assert request.attributes["rpc.response.status_code"] == "403"
    assert_traceparent_reached_the_server(request, world, "resources/read")
    reads = recorder.metrics()["freshcache.reads"]
    assert (
        {
            "freshcache.state": "denied",
            "freshcache.reason": "denied",
            "freshcache.server_read": True,
        },
        1,
    ) in reads


async def test_seed_8_stream_loss_relisten_and_reread_after_reconnect(recorder):
    world = await played("seed-8", recorder)
    listens = sorted(recorder.spans("subscriptions/listen"), key=lambda s: s.start_time)
    lost = [s for s in listens if any(e.name == "freshcache.stream_lost" for e in s.events)]
    assert lost
    invalidated = [e for e in lost[0].events if e.name == "freshcache.invalidated"]
    causes = [dict(e.attributes)["freshcache.cause"] for e in invalidated]
    assert causes == ["acknowledged", "stream_lost"]
    after = [
        s
        for s in listens
        if s.start_time > lost[0].end_time
        and any(e.name == "freshcache.acknowledged" for e in s.events)
    ]
    assert after, "a later listen span was acknowledged"
    relisten = after[0]
    assert (
        relisten.attributes["freshcache.listen.attempt"]
        > lost[0].attributes["freshcache.listen.attempt"]
    )
    rereads = [
        s
        for s in recorder.spans("resources/read")
        if s.parent and s.parent.span_id == relisten.context.span_id
    ]
    assert rereads, "the re-read after the reconnect is a child of the new listen span"
    assert "error.type" not in rereads[-1].attributes
    assert_traceparent_reached_the_server(rereads[-1], world, "resources/read")
    final = recorder.spans("freshcache.read")
    assert all(s.attributes.get("freshcache.state") != "stale" for s in final)
    metrics = recorder.metrics()
    assert any(a["freshcache.outcome"] == "lost" for a, _ in metrics["freshcache.relistens"])
    assert any(
        a == {"freshcache.cause": "acknowledged"} for a, _ in metrics["freshcache.server_reads"]
    )
    assert any(
        a == {"freshcache.cause": "stream_lost", "freshcache.trusted": True}
        for a, _ in metrics["freshcache.invalidations"]
    )
    assert {
        "freshcache.store.entries",
        "freshcache.store.bytes",
        "mcp.client.operation.duration",
    } <= set(metrics)
