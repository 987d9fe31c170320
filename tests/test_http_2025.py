"""`HttpSource` against a server on MCP 2025-11-25, over real loopback HTTP.

The peer is the project's reference server speaking 2025-11-25
(`ReferenceHttpServer(revision="2025-11-25")`: sessions with SDK 1.x's 400/404
answers, the GET notification stream, ``resources/subscribe``). What is checked is
what went over the wire and what the cache hands out: negotiation, the session
headers, subscribe/unsubscribe as the selection changes, a session that expires, the
DELETE at close.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

from freshcache import FreshCache, HttpSource
from freshcache._core import RequestFailed
from freshcache._core._backoff import BackoffSettings
from freshcache._protocol._client import discovery_unanswered
from freshcache.acceptance import ReferenceServer
from freshcache.acceptance._http_server import RecordedRequest, ReferenceHttpServer
from freshcache.acceptance._settle import wait_for
from tests.polling import scaled
from tests.telemetry_support import Recorder

pytestmark = [pytest.mark.anyio, pytest.mark.wire]

U = "guide://shipping/approval"
V = "guide://shipping/rates"
FAST = BackoffSettings(base=0.005, cap=0.02, quick_death=0.0)


def reference() -> ReferenceServer:
    server = ReferenceServer()
    server.set(U, "v1")
    server.set(V, "r1")
    return server


@asynccontextmanager
async def cache_on(
    server: ReferenceServer, **options: Any
) -> AsyncIterator[tuple[ReferenceHttpServer, FreshCache]]:
    async with (
        ReferenceHttpServer(server, revision="2025-11-25") as http,
        httpx.AsyncClient(trust_env=False) as client,
    ):
        source = HttpSource(http.url, client=client, timeout=5.0, idle_timeout=5.0)
        options.setdefault("select", [U])
        async with FreshCache(source, read_timeout=5.0, backoff=FAST, **options) as cache:
            yield http, cache


def mcp(http: ReferenceHttpServer, method: str) -> list[RecordedRequest]:
    return [
        r
        for r in http.requests
        if isinstance(r.message, dict) and r.message.get("method") == method
    ]


def subscribed(http: ReferenceHttpServer, method: str = "resources/subscribe") -> list[str]:
    return [r.message["params"]["uri"] for r in mcp(http, method)]


async def test_discover_is_declined_and_initialize_agrees_on_2025_11_25():
    async with cache_on(reference()) as (http, cache):
        await wait_for(lambda: cache.server_info is not None, limit=10)
        info = cache.server_info
        assert info is not None
        assert (info.protocol_version, info.subscribe, info.listen) == ("2025-11-25", True, True)
        assert cache.describe()["protocol_version"] == "2025-11-25"
        result = await cache.read(U)
        assert (result.state, result.text) == ("fresh", "v1")
    methods = [r.message.get("method") for r in http.requests if isinstance(r.message, dict)]
    assert methods[:3] == ["server/discover", "initialize", "notifications/initialized"]
    session = http.requests[1]  # the answer to initialize named the session
    later = [r for r in http.requests[2:] if r.method in ("POST", "GET")]
    assert later and all(r.headers.get("mcp-session-id") for r in later)
    assert all(r.headers.get("mcp-protocol-version") == "2025-11-25" for r in later)
    assert session.headers.get("mcp-session-id") is None


async def test_a_covered_selected_uri_is_served_from_the_cache_until_notified():
    server = reference()
    async with cache_on(server) as (http, cache):
        await wait_for(lambda: U in cache.engine.covered, limit=10, what="the subscribe")
        first = await cache.read(U)
        reads = len(mcp(http, "resources/read"))
        again = await cache.read(U)
        assert again.text == first.text and again.server_read is False
        assert len(mcp(http, "resources/read")) == reads  # the hit path: no server read
        server.set(U, "v2", notify=True)

        def heard() -> bool:
            # Not fresh, or already fresh at v2: on loopback the invalidation and the
            # re-read can both land between two looks (never wait on a passing state).
            status = cache.status(U)
            return status.state != "fresh" or status.text == "v2"

        await wait_for(heard, limit=10, what="the resources/updated")
        changed = await cache.read(U)
        assert (changed.state, changed.text) == ("fresh", "v2")
    assert subscribed(http) == [U]


async def test_an_unselected_read_is_read_from_the_server_every_time():
    async with cache_on(reference()) as (http, cache):
        await wait_for(lambda: U in cache.engine.covered, limit=10)
        await cache.read(V)
        await cache.read(V)
        reads = [r for r in mcp(http, "resources/read") if r.message["params"]["uri"] == V]
        assert len(reads) == 2  # no ttlMs in 2025: ttlMs 0


async def test_subscriptions_follow_the_selection():
    async with cache_on(reference()) as (http, cache):
        await wait_for(lambda: U in cache.engine.covered, limit=10)
        cache.select([V])
        await wait_for(
            lambda: cache.engine.covered == {V} and subscribed(http, "resources/unsubscribe"),
            limit=10,
            what="the swap",
        )
        assert subscribed(http) == [U, V]
        assert subscribed(http, "resources/unsubscribe") == [U]
        assert len(mcp(http, "initialize")) == 1  # one session throughout


async def test_an_expired_session_is_initialized_again_resubscribed_and_reread():
    server = reference()
    async with cache_on(server) as (http, cache):
        await wait_for(lambda: U in cache.engine.covered, limit=10)
        assert (await cache.read(U)).text == "v1"
        legacy = http.legacy
        assert legacy is not None
        server.set(U, "v2")  # changed while no notification can reach us
        legacy.forget_sessions()
        # A 2025 client learns of an expired session from the next request's 404.
        other = await cache.read(V)
        assert (other.state, other.text) == ("fresh", "r1")
        await wait_for(
            lambda: len(mcp(http, "initialize")) >= 2 and len(subscribed(http)) >= 2,
            limit=15,
            what="a new session and its subscribe",
        )
        await wait_for(lambda: U in cache.engine.covered, limit=10)
        result = await cache.read(U)
        assert (result.state, result.text) == ("fresh", "v2")


async def test_closing_the_cache_deletes_the_session():
    async with cache_on(reference()) as (http, cache):
        await wait_for(lambda: U in cache.engine.covered, limit=10)
        await cache.read(U)
    deletes = [r for r in http.requests if r.method == "DELETE"]
    assert len(deletes) == 1 and deletes[0].headers.get("mcp-session-id")


async def test_spans_name_the_revision_in_use():
    recorder = Recorder.make()
    try:
        async with cache_on(reference(), **recorder.kwargs()) as (_http, cache):
            await wait_for(lambda: U in cache.engine.covered, limit=10)
            await cache.read(V)
        versions = {
            span.attributes.get("mcp.protocol.version")
            for span in recorder.spans()
            if span.attributes
            and "mcp.method.name" in span.attributes
            and span.attributes["mcp.method.name"] == "resources/read"
        }
    finally:
        recorder.shutdown()
    assert versions == {"2025-11-25"}


class _DiscoveryFails(httpx.AsyncBaseTransport):
    """Loopback HTTP, but the first ``failures`` ``server/discover`` POSTs fail ``how``:
    ``timeout`` (no answer), ``503`` (a gateway while the server starts), ``slow`` (the
    answer comes after ``delay`` seconds: a caller's deadline cuts the discovery off)."""

    def __init__(self, failures: int, how: str = "timeout", delay: float = 0.0) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.failures, self.how, self.delay = failures, how, delay

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.failures and b'"server/discover"' in request.content:
            self.failures -= 1
            if self.how == "timeout":
                raise httpx.ReadTimeout("no answer yet", request=request)
            if self.how == "503":
                return httpx.Response(503, text="upstream starting", request=request)
            await anyio.sleep(self.delay)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@asynccontextmanager
async def discovery_failing(
    transport: _DiscoveryFails, **options: Any
) -> AsyncIterator[tuple[ReferenceHttpServer, HttpSource, FreshCache]]:
    async with (
        ReferenceHttpServer(reference(), revision="2025-11-25") as http,
        httpx.AsyncClient(trust_env=False, transport=transport) as client,
    ):
        source = HttpSource(http.url, client=client, timeout=5.0, idle_timeout=5.0)
        async with FreshCache(source, read_timeout=5.0, backoff=FAST, **options) as cache:
            yield http, source, cache


def spoken(http: ReferenceHttpServer) -> list[str]:
    return [r.message.get("method") for r in http.requests if isinstance(r.message, dict)]


@pytest.mark.parametrize(("failures", "how"), [(1, "timeout"), (3, "timeout"), (2, "503")])
async def test_a_discovery_the_server_did_not_answer_is_sent_again_before_the_next_listen(
    failures: int, how: str
) -> None:
    """Until the server itself answers ``server/discover`` nothing says which revision it
    speaks: sent in 2026 to a 2025 server, every request and listen was refused
    ("Missing session ID") for the cache's whole life."""
    transport = _DiscoveryFails(failures, how)
    async with discovery_failing(transport, select=[U]) as (http, source, cache):
        await wait_for(lambda: U in cache.engine.covered, limit=scaled(10), what="the subscribe")
        result = await cache.read(U)
        assert (result.state, result.text) == ("fresh", "v1")
        assert source.protocol_version == "2025-11-25"
        info = cache.server_info  # the discovery at start: it decided nothing
        assert info is not None and not info.revision_decided, info
    assert transport.failures == 0  # every failure was met
    methods = spoken(http)
    assert "subscriptions/listen" not in methods and methods.count("initialize") == 1
    reads = mcp(http, "resources/read")
    assert reads and all(r.headers.get("mcp-session-id") for r in reads)


async def test_a_read_negotiates_first_when_no_discovery_was_answered() -> None:
    transport = _DiscoveryFails(2)
    async with discovery_failing(transport, listen=False) as (http, _, cache):
        await wait_for(lambda: cache.server_info is not None, limit=scaled(10))
        assert cache.server_info is not None and not cache.server_info.reachable
        first = await cache.read(U)  # its discovery times out too: not sent
        assert (first.state, first.reason) == ("awaiting_fresh_source", "timeout"), first
        assert mcp(http, "resources/read") == []
        second = await cache.read(U)
        assert (second.state, second.text) == ("fresh", "v1")
    assert transport.failures == 0 and spoken(http).count("initialize") == 1
    assert "subscriptions/listen" not in spoken(http)


async def test_a_discovery_cut_off_by_the_cache_deadline_is_sent_again() -> None:
    transport = _DiscoveryFails(1, "slow", delay=1.0)
    async with discovery_failing(transport, select=[U], ack_timeout=0.2) as (http, _, cache):
        await wait_for(lambda: U in cache.engine.covered, limit=scaled(10), what="the subscribe")
        assert (await cache.read(U)).text == "v1"
    methods = spoken(http)
    assert "subscriptions/listen" not in methods and methods.count("initialize") == 1


def test_which_discovery_outcomes_leave_the_revision_undecided() -> None:
    undecided = [
        RequestFailed("timeout", "no answer"),
        RequestFailed("unreachable", "refused"),
        RequestFailed("server_error", "HTTP 503 without a JSON-RPC answer"),
    ]
    decided = [
        {"supportedVersions": ["2026-07-28"], "capabilities": {}},
        RequestFailed("server_error", "internal", -32603),
        RequestFailed("denied", "HTTP 401", 401),
    ]
    assert [discovery_unanswered(o) for o in undecided] == undecided
    assert [discovery_unanswered(o) for o in decided] == [None, None, None]
