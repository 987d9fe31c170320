"""Issue 22: the promise has one home. Regression tests, one per defect, on real parts
(HTTP on 127.0.0.1, the reference servers' fault hooks) where the defect lives on a wire.
"""

from __future__ import annotations

from contextlib import aclosing

import anyio
import httpx
import pytest

from freshcache import FreshCache, HttpSource, UnsupportedVersionError
from freshcache._core import ListenAcknowledged, ResourceUpdated, StreamEvent, StreamLost
from freshcache.acceptance._http_server import ReferenceHttpServer
from tests.polling import until
from tests.test_http_source import Script, U, reference, rpc_error, serving

pytestmark = pytest.mark.anyio


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
