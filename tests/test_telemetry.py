"""OpenTelemetry: span names, attributes, events and metric names (in memory)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from opentelemetry.trace import SpanKind

from freshcache import BackoffSettings, FreshCache
from freshcache.acceptance import InMemorySource, ReferenceServer
from tests.polling import reads_done, until
from tests.telemetry_support import Recorder

U = "guide://shipping/approval"
FAST = BackoffSettings(base=0.005, cap=0.02, quick_death=0.0)

pytestmark = pytest.mark.anyio


@pytest.fixture
def recorder():
    rec = Recorder.make()
    yield rec
    rec.shutdown()


@pytest.fixture
async def live_cache(recorder) -> AsyncIterator[tuple[FreshCache, ReferenceServer]]:
    server = ReferenceServer()
    server.set(U, "v1")
    async with FreshCache(
        InMemorySource(server), select=[U], backoff=FAST, read_timeout=0.5, **recorder.kwargs()
    ) as cache:
        await until(
            lambda: (
                cache.stream_status == "live"
                and reads_done(cache)
                and cache.status(U).state == "fresh"
            )
        )
        recorder.spans_exporter.clear()
        yield cache, server


async def test_a_plain_fresh_hit_makes_no_span_but_is_counted(recorder, live_cache):
    cache, _ = live_cache
    for _ in range(3):
        assert (await cache.read(U)).state == "fresh"
    assert recorder.spans() == []
    reads = recorder.metrics()["freshcache.reads"]
    assert (
        {"freshcache.state": "fresh", "freshcache.reason": "", "freshcache.server_read": False},
        3,
    ) in reads


async def test_a_read_that_reaches_the_server_has_a_read_span_and_a_client_request_span(recorder):
    server = ReferenceServer()
    server.set(U, "v1")
    async with FreshCache(InMemorySource(server), listen=False, **recorder.kwargs()) as cache:
        result = await cache.read(U)
    (read,) = recorder.spans("freshcache.read")
    (request,) = recorder.spans("resources/read")
    assert request.kind == SpanKind.CLIENT
    assert request.parent is not None
    assert request.parent.span_id == read.context.span_id
    assert dict(request.attributes) == {
        "mcp.method.name": "resources/read",
        "mcp.resource.uri": U,
        "mcp.protocol.version": "2026-07-28",
    }
    assert read.attributes["freshcache.state"] == "fresh"
    assert read.attributes["freshcache.version"] == result.version
    assert read.attributes["freshcache.server_read"] is True
    assert "freshcache.reason" not in read.attributes
    durations = recorder.metrics()["mcp.client.operation.duration"]
    assert ({"mcp.method.name": "resources/read"}, 1) in durations


async def test_seed_1_the_notification_is_an_event_on_the_listen_span_and_the_reread_its_child(
    recorder, live_cache
):
    cache, server = live_cache
    server.hold_reads()
    notified_at = time.time_ns()  # a startup read may still be exported: count after this

    def rereads() -> list[Any]:
        return [s for s in recorder.spans("resources/read") if s.start_time >= notified_at]

    server.notify_updated(U)
    await until(lambda: cache.status(U).reason == "invalidated" and server.reads_in_flight == 1)
    server.release_reads()
    await until(lambda: cache.status(U).state == "fresh")
    await until(lambda: bool(rereads()))
    (reread,) = rereads()  # before the stream ends: its re-listen's ack re-reads again
    metrics = recorder.metrics()
    server.close_streams()  # the listen span is still open: end it to export it
    await until(lambda: any(s.name == "subscriptions/listen" for s in recorder.spans()))
    listen = recorder.spans("subscriptions/listen")[0]
    assert reread.parent is not None
    assert reread.parent.span_id == listen.context.span_id
    invalidated = [e for e in listen.events if e.name == "freshcache.invalidated"]
    # The acknowledgment invalidated what it newly covered (invariant 4), then the hint.
    causes = [e.attributes["freshcache.cause"] for e in invalidated]
    assert causes == ["acknowledged", "resources/updated"]
    assert dict(invalidated[1].attributes) == {
        "mcp.resource.uri": U,
        "freshcache.cause": "resources/updated",
        "freshcache.trusted": True,
        "freshcache.subscription_id": str(listen.attributes["jsonrpc.request.id"]),
    }
    assert ({"freshcache.cause": "resources/updated", "freshcache.trusted": True}, 1) in metrics[
        "freshcache.invalidations"
    ]
    assert ({"freshcache.cause": "resources/updated"}, 1) in metrics["freshcache.server_reads"]
    # One from the acknowledgment (invariant 4), one from the notification.
    assert metrics["freshcache.invalidation_to_fresh"][0][1] == 2


async def test_seed_4_a_timeout_is_visible_on_both_spans(recorder, live_cache):
    cache, server = live_cache
    server.fail_always(U, "timeout")
    server.notify_updated(U)
    await until(lambda: cache.status(U).reason == "timeout")
    result = await cache.read(U)
    assert result.reason == "timeout"
    read = recorder.spans("freshcache.read")[-1]
    assert (read.attributes["freshcache.state"], read.attributes["freshcache.reason"]) == (
        "awaiting_fresh_source",
        "timeout",
    )
    failed = [
        s for s in recorder.spans("resources/read") if s.attributes.get("error.type") == "timeout"
    ]
    assert failed
    assert not failed[0].status.is_ok


async def test_seed_5_a_denial_is_visible_on_both_spans(recorder, live_cache):
    cache, server = live_cache
    server.denied_principals[U] = {None}
    server.notify_updated(U)
    await until(lambda: cache.status(U).state == "denied")
    assert (await cache.read(U)).state == "denied"
    read = recorder.spans("freshcache.read")[-1]
    assert read.attributes["freshcache.state"] == "denied"
    assert all(s.attributes["error.type"] == "denied" for s in recorder.spans("resources/read"))


async def test_seed_8_loss_relisten_and_reread_are_all_visible(recorder, live_cache):
    cache, server = live_cache
    server.down = True
    server.drop_streams()
    server.set(U, "v2")
    await until(lambda: cache.status(U).reason == "stream_lost")
    server.down = False
    await until(lambda: cache.status(U).text == "v2")
    server.close_streams()

    def acknowledged_later() -> bool:
        listens = recorder.spans("subscriptions/listen")
        return len(listens) >= 2 and any(
            e.name == "freshcache.acknowledged" for e in listens[-1].events
        )

    await until(acknowledged_later)
    listens = recorder.spans("subscriptions/listen")
    first = listens[0]
    names = [e.name for e in first.events]
    assert names[-3:] == [
        "freshcache.stream_lost",
        "freshcache.invalidated",
        "freshcache.stream_end",
    ]
    assert first.events[-2].attributes["freshcache.cause"] == "stream_lost"
    acknowledged = [
        s for s in listens if any(e.name == "freshcache.acknowledged" for e in s.events)
    ]
    assert (
        acknowledged[-1].attributes["freshcache.listen.attempt"]
        > first.attributes["freshcache.listen.attempt"]
    )
    rereads = [
        s
        for s in recorder.spans("resources/read")
        if s.parent and s.parent.span_id == acknowledged[-1].context.span_id
    ]
    assert rereads
    metrics = recorder.metrics()
    assert any(
        attrs == {"freshcache.cause": "stream_lost", "freshcache.trusted": True}
        for attrs, _ in metrics["freshcache.invalidations"]
    )
    assert any(
        attrs == {"freshcache.cause": "acknowledged"}
        for attrs, _ in metrics["freshcache.server_reads"]
    )
    assert any(
        attrs["freshcache.outcome"] == "lost" for attrs, _ in metrics["freshcache.relistens"]
    )


async def test_hits_are_traced_only_when_asked(recorder):
    server = ReferenceServer()
    server.set(U, "v1")
    async with FreshCache(
        InMemorySource(server), listen=False, trace_hits=True, **recorder.kwargs()
    ) as cache:
        await cache.read(U)
        recorder.spans_exporter.clear()
        hit = await cache.read(U)
    (span,) = recorder.spans("freshcache.read")
    assert span.attributes["freshcache.state"] == "fresh"
    assert span.attributes["freshcache.version"] == hit.version
    assert span.attributes["freshcache.server_read"] is False
    assert span.attributes["freshcache.hits"] == 1


async def test_traced_hits_share_a_span_per_version_and_each_hit_is_counted_at_its_version(
    recorder,
):
    """Issue 38: a span per hit cost 80-130x the hit. The hits of one URI at one version
    share a span; every hit is counted on the span of the version it handed out."""
    server = ReferenceServer()
    server.set(U, "v1")
    async with FreshCache(
        InMemorySource(server), select=[U], backoff=FAST, trace_hits=True, **recorder.kwargs()
    ) as cache:
        await until(lambda: cache.stream_status == "live" and cache.status(U).text == "v1")
        handed: list[str | None] = [(await cache.read(U)).version for _ in range(3)]
        server.set(U, "v2")
        server.notify_updated(U)
        await until(lambda: cache.status(U).text == "v2" and cache.pending_reads == 0)
        handed += [(await cache.read(U)).version for _ in range(2)]
        assert cache.telemetry.counts.hits == 5  # all five were plain fresh hits
    spans = [s for s in recorder.spans("freshcache.read") if "freshcache.hits" in s.attributes]
    recorded = [
        (s.attributes["freshcache.version"], s.attributes["freshcache.hits"]) for s in spans
    ]
    v1, v2 = handed[0], handed[-1]
    assert v1 != v2
    assert recorded == [(v1, 3), (v2, 2)]
    assert all(s.attributes["mcp.resource.uri"] == U for s in spans)
    assert all(s.attributes["freshcache.server_read"] is False for s in spans)
    assert all(s.start_time <= s.end_time for s in spans)


async def test_a_traced_hit_is_a_child_of_the_span_it_happened_in(recorder):
    server = ReferenceServer()
    server.set(U, "v1")
    tracer = recorder.tracer_provider.get_tracer("test")
    async with FreshCache(
        InMemorySource(server), listen=False, trace_hits=True, **recorder.kwargs()
    ) as cache:
        await cache.read(U)
        with tracer.start_as_current_span("agent step") as step:
            await cache.read(U)
            await cache.read(U)
        await cache.read(U)
    hits = [s for s in recorder.spans("freshcache.read") if "freshcache.hits" in s.attributes]
    by_parent = {
        s.parent.span_id if s.parent else None: s.attributes["freshcache.hits"] for s in hits
    }
    assert by_parent == {step.get_span_context().span_id: 2, None: 1}


async def test_traced_hits_are_recorded_within_the_interval_while_the_cache_is_open(recorder):
    server = ReferenceServer()
    server.set(U, "v1")
    async with FreshCache(
        InMemorySource(server), listen=False, trace_hits=True, **recorder.kwargs()
    ) as cache:
        await cache.read(U)
        hit = await cache.read(U)
        await until(lambda: recorder.spans("freshcache.read")[-1].attributes.get("freshcache.hits"))
        (span,) = [
            s for s in recorder.spans("freshcache.read") if "freshcache.hits" in s.attributes
        ]
        assert span.attributes["freshcache.version"] == hit.version


async def test_traced_hits_waiting_for_their_spans_are_bounded(recorder, monkeypatch):
    from freshcache._middleware import _telemetry

    monkeypatch.setattr(_telemetry, "MAX_PENDING_HITS", 2)
    monkeypatch.setattr(_telemetry, "HIT_SPAN_INTERVAL", 3600.0)
    server = ReferenceServer()
    uris = [f"doc://bounded/{i}" for i in range(3)]
    for uri in uris:
        server.set(uri, uri)
    async with FreshCache(
        InMemorySource(server), listen=False, trace_hits=True, **recorder.kwargs()
    ) as cache:
        for uri in uris:
            await cache.read(uri)
        recorder.spans_exporter.clear()
        for uri in uris:
            await cache.read(uri)  # the third pair makes the first two spans at once
        made = [s.attributes["mcp.resource.uri"] for s in recorder.spans("freshcache.read")]
        assert made == uris[:2]
    made = [s.attributes["mcp.resource.uri"] for s in recorder.spans("freshcache.read")]
    assert made == uris


async def test_store_gauges_report_entries_and_bytes(recorder):
    server = ReferenceServer()
    server.set(U, "v1")
    async with FreshCache(InMemorySource(server), listen=False, **recorder.kwargs()) as cache:
        await cache.read(U)
        metrics = recorder.metrics()
    assert metrics["freshcache.store.entries"] == [({}, 1)]
    assert metrics["freshcache.store.bytes"][0][1] == cache.store.bytes_held > 0


async def test_without_an_sdk_everything_is_a_silent_no_op():
    server = ReferenceServer()
    server.set(U, "v1")
    async with FreshCache(InMemorySource(server), select=[U], backoff=FAST) as cache:
        assert cache.telemetry.metering is False  # hits are not even counted
        await until(lambda: cache.status(U).state == "fresh")
        before = cache.engine.counters.invalidations
        server.set(U, "v2")
        server.notify_updated(U)
        await until(lambda: cache.engine.counters.invalidations == before + 1)
        result = await cache.read(U)
        assert (result.state, result.text) == ("fresh", "v2")
        # Spans exist for the code's sake but record nothing, and nothing is metered.
        with cache.telemetry.read_span(U) as span:
            assert not span.is_recording()
        assert cache.telemetry.counts.hits == 0
