"""Issue 22: the promise has one home. Regression tests, one per defect, on real parts
(HTTP on 127.0.0.1, the reference servers' fault hooks) where the defect lives on a wire.
"""

from __future__ import annotations

import sys
from contextlib import aclosing
from pathlib import Path

import anyio
import httpx
import pytest

from freshcache import Context, FreshCache, HttpSource, StdioSource, UnsupportedVersionError
from freshcache._core import ListenAcknowledged, ResourceUpdated, StreamEvent, StreamLost
from freshcache._core._backoff import BackoffSettings
from freshcache._core._subscribe_order import SUBSCRIBE, UNSUBSCRIBE, SubscribeLedger
from freshcache._middleware._store import MemoryStore
from freshcache.acceptance import InMemorySource, ReferenceServer
from freshcache.acceptance._http_server import RecordedRequest, ReferenceHttpServer
from tests.polling import until
from tests.test_http_source import Script, U, reference, rpc_error, serving

pytestmark = pytest.mark.anyio

OTHER = "guide://shipping/rates"
SCRIPTS = Path(__file__).parent / "fixtures" / "stdio_scripts.py"
FAST = BackoffSettings(base=0.005, cap=0.02, quick_death=0.0)


# ---------------------------------------------------------------- 5: -32022 on discover


@pytest.mark.wire
@pytest.mark.parametrize("refused", [("server/discover",), ("server/discover", "resources/read")])
async def test_minus_32022_without_data_on_discover_is_one_documented_error(refused):
    """Defect 5: no bare ExceptionGroup from ``async with``, and no fresh read after the
    error, whether only discovery or every request is refused."""
    script = Script()
    for method in refused:
        script.then(method, *[rpc_error(-32022, "Unsupported protocol version", 400)] * 10)
    async with serving(reference(), hook=script) as (_http, make):
        with pytest.raises(UnsupportedVersionError):
            async with FreshCache(make(), select=[U], read_timeout=3.0) as cache:
                await cache.read(U)
        assert cache.engine.unusable is not None
        assert cache.status(U).state != "fresh"


# ---------------------------------------------------------------- 6: overflow parity


@pytest.mark.wire
async def test_the_2025_get_stream_ends_when_its_consumer_falls_behind():
    """Defect 6: a hint that does not fit ends the subscription (as on stdio), so the
    engine re-reads everything it covered; it is never dropped silently."""
    server = reference()
    async with (
        ReferenceHttpServer(server, revision="2025-11-25") as http,
        httpx.AsyncClient(trust_env=False) as client,
    ):
        source = HttpSource(http.url, client=client, timeout=5.0, idle_timeout=5.0)
        await source.start()
        source.legacy._max_backlog = 3
        events: list[StreamEvent] = []
        async with aclosing(source.listen(frozenset({U}), False)) as stream:
            async for event in stream:
                events.append(event)
                if isinstance(event, ListenAcknowledged):
                    break
            assert events[-1] == ListenAcknowledged(
                events[0].subscription_id, frozenset({U}), False
            )
            for _ in range(10):
                server.notify_updated(U)
            await until(lambda: source.legacy.overflows == 1)
            with anyio.fail_after(10):
                async for event in stream:
                    events.append(event)
        await source.aclose()
    assert isinstance(events[-1], StreamLost) and "fell 3 messages behind" in events[-1].detail
    assert sum(isinstance(e, ResourceUpdated) for e in events) == 3


# ---------------------------------------------------------------- 1: 2025 subscribe order


class SlowUnsubscribe:
    """A 2025 server hook: ``resources/unsubscribe`` is handled ``delay`` s late, so a
    subscribe sent meanwhile would be overtaken by it on the server."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.unsubscribes = 0
        self.handled = 0

    async def __call__(self, request: RecordedRequest) -> None:
        message = request.message if isinstance(request.message, dict) else {}
        if message.get("method") == "resources/unsubscribe":
            self.unsubscribes += 1
            await anyio.sleep(self.delay)
            self.handled += 1
        return None


@pytest.mark.wire
async def test_2025_http_resubscribe_while_the_unsubscribe_is_pending_stays_true():
    """Defect 1: select U, X, U again quickly against a server that finishes the
    unsubscribe last; a change of U must still reach the cache (no old text as fresh)."""
    server = reference()
    slow = SlowUnsubscribe(0.3)
    async with (
        ReferenceHttpServer(server, revision="2025-11-25", hook=slow) as http,
        httpx.AsyncClient(trust_env=False) as client,
    ):
        source = HttpSource(http.url, client=client, timeout=5.0, idle_timeout=5.0)
        async with FreshCache(source, select=[U], read_timeout=5.0, backoff=FAST) as cache:
            await until(lambda: cache.engine.covered == {U})
            assert (await cache.read(U)).text == "v1"
            cache.select([OTHER])
            await until(lambda: slow.unsubscribes == 1)
            cache.select([U])
            await until(lambda: slow.handled == 1 and cache.engine.covered == {U})
            server.set(U, "v2", notify=True)
            await until(lambda: cache.status(U).text == "v2")
    methods = [
        (r.message.get("method"), r.message.get("params", {}).get("uri"))
        for r in http.requests
        if isinstance(r.message, dict) and "subscribe" in str(r.message.get("method"))
    ]
    methods = [m for m in methods if m[1] == U]
    # The subscribe went out after the unsubscribe was answered, in that order.
    assert methods[:3] == [
        ("resources/subscribe", U),
        ("resources/unsubscribe", U),
        ("resources/subscribe", U),
    ]


def test_ledger_covers_only_after_the_last_request_was_answered_in_order():
    ledger = SubscribeLedger()
    (sub,) = ledger.record([U], SUBSCRIBE)
    assert ledger.next_op(U, SUBSCRIBE) is sub and not ledger.covers(U)
    ledger.settle(sub, True)
    assert ledger.covers(U)
    (unsub,) = ledger.record([U], UNSUBSCRIBE)
    (again,) = ledger.record([U], SUBSCRIBE)
    assert not ledger.covers(U)
    assert ledger.next_op(U, UNSUBSCRIBE) is unsub and ledger.next_op(U, SUBSCRIBE) is again
    assert not ledger.may_send(again)  # waits for the unsubscribe's answer
    ledger.settle(unsub, True)
    assert ledger.may_send(again) and not ledger.covers(U)
    ledger.settle(again, True)
    assert ledger.covers(U)


def test_ledger_an_unanswered_request_leaves_the_uri_uncovered_until_the_channel_ends():
    ledger = SubscribeLedger()
    (unsub,) = ledger.record([U], UNSUBSCRIBE)
    (sub,) = ledger.record([U], SUBSCRIBE)
    ledger.settle(sub, True)  # answered before the unsubscribe: order unknown
    ledger.settle(unsub, True)
    assert not ledger.covers(U)
    ledger.ended()
    (fresh,) = ledger.record([U], SUBSCRIBE)
    ledger.settle(unsub, True)  # an answer from the old channel changes nothing
    ledger.settle(fresh, True)
    assert ledger.covers(U)
    (lost,) = ledger.record([U], UNSUBSCRIBE)
    ledger.settle(lost, None)
    (back,) = ledger.record([U], SUBSCRIBE)
    ledger.settle(back, True)
    assert not ledger.covers(U)


def test_ledger_an_unanswered_subscribe_only_waits_for_the_next_one():
    """A subscribe given up on can only add the subscription, whenever the server acts
    on it: the next subscribe answered covers the URI (an unsubscribe answered ahead of
    it does not make the state unknown either)."""
    ledger = SubscribeLedger()
    (lost,) = ledger.record([U], SUBSCRIBE)
    ledger.settle(lost, None)
    assert not ledger.covers(U) and not ledger.wants(U)
    (again,) = ledger.record([U], SUBSCRIBE)
    assert ledger.answered([]) and not ledger.answered([U])
    ledger.settle(again, True)
    assert ledger.covers(U) and ledger.answered([U])
    (first,) = ledger.record([U], SUBSCRIBE)
    (unsub,) = ledger.record([U], UNSUBSCRIBE)
    ledger.settle(unsub, True)  # ahead of a subscribe: that one can only add
    ledger.settle(first, True)
    (back,) = ledger.record([U], SUBSCRIBE)
    ledger.settle(back, True)
    assert ledger.covers(U)


# ---------------------------------------------------------------- 4: changes() bounded


async def test_the_changes_feed_forgets_what_the_engine_forgot():
    """Defect 4: a `changes()` subscriber and many distinct URIs through a bounded
    store: the feed keeps about as many records as the engine, not one per URI ever
    read. (Measured for 100k URIs: +24.2 MB RSS before, +7.4 MB after, of which
    7.2 MB without any subscriber.)"""
    server = ReferenceServer()
    readable = [f"guide://many/{i}" for i in range(6_000)]
    for uri in readable:
        server.set(uri, "x")
    store = MemoryStore(max_entries=20, max_bytes=1 << 20)
    async with (
        FreshCache(InMemorySource(server), store=store, listen=False) as cache,
        cache.changes(max_pending=8),
    ):
        for uri in readable:
            assert (await cache.read(uri)).state == "fresh"
        assert cache.engine.tracked_uris <= 20
        assert len(cache._changes._last) <= 2 * 2048


# ---------------------------------------------------------------- 2: context() snapshots


class SlowFor(ReferenceServer):
    """Reads of a URI with a gate wait until that gate is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gates: dict[str, anyio.Event] = {}
        self.waiting: dict[str, int] = {}

    async def read(self, uri: str, principal: str | None = None):  # type: ignore[no-untyped-def]
        gate = self.gates.get(uri)
        if gate is not None:
            self.waiting[uri] = self.waiting.get(uri, 0) + 1
            await gate.wait()
        return await super().read(uri, principal)


@pytest.mark.parametrize("reread", ["held", "answers"])
async def test_context_never_hands_out_a_text_that_changed_while_others_were_read(reread):
    """Defect 2: U is a fresh hit at once, OTHER's read is slow; meanwhile U changes
    and the stream says so. The Context carries U as v2 (read again within the
    deadline) or withholds it with its state; never v1 under ``fresh``."""
    server = SlowFor()
    server.set(U, "v1")
    server.set(OTHER, "r1")
    async with FreshCache(InMemorySource(server), select=[U], read_timeout=5.0) as cache:
        await until(lambda: cache.status(U).text == "v1")
        server.gates[OTHER] = anyio.Event()
        got: list[Context] = []
        async with anyio.create_task_group() as tg:

            async def step() -> None:
                got.append(await cache.context([U, OTHER], timeout=1.0))

            tg.start_soon(step)
            await until(lambda: server.waiting.get(OTHER) == 1)
            if reread == "held":
                server.gates[U] = anyio.Event()  # U's re-read does not answer in time
            server.set(U, "v2", notify=True)
            await until(lambda: cache.status(U).state != "fresh" or cache.status(U).text == "v2")
            server.gates.pop(OTHER).set()
        (context,) = got
        for gate in server.gates.values():
            gate.set()
    texts = {r.uri: r.text for r in context.fresh}
    assert texts[OTHER] == "r1"
    if reread == "held":
        assert [(r.uri, r.state) for r in context.withheld] == [(U, "awaiting_fresh_source")]
    else:
        assert texts[U] == "v2" and context.ok


@pytest.mark.wire
async def test_minus_32022_without_data_on_discover_over_stdio_is_the_same_error():
    """Defect 5 on stdio: the same documented error, never a fresh read after it."""
    source = StdioSource([sys.executable, str(SCRIPTS), "discover-refused"], timeout=5.0)
    with pytest.raises(UnsupportedVersionError):
        async with FreshCache(source, select=[U], read_timeout=3.0) as cache:
            await cache.read(U)
    assert cache.engine.unusable is not None and cache.status(U).state != "fresh"


@pytest.mark.wire
async def test_2025_stdio_resubscribe_while_the_unsubscribe_is_pending_stays_true():
    """Defect 1 on stdio, against a 2025 server that handles requests concurrently and
    finishes the unsubscribe after the re-subscribe: the change of U must still come."""
    source = StdioSource([sys.executable, str(SCRIPTS), "2025-late-unsubscribe"], timeout=5.0)
    async with FreshCache(source, select=[U], read_timeout=5.0, backoff=FAST) as cache:
        await until(lambda: cache.engine.covered == {U})
        assert (await cache.read(U)).text == "v1"
        cache.select([OTHER])
        await until(lambda: cache.engine.covered == {OTHER})
        await anyio.sleep(0.2)  # (setup, not a verdict: the unsubscribe of U is under way)
        cache.select([U])
        await until(lambda: cache.status(U).text == "v2")
