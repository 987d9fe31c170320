"""`SourceWrapper`: a source around another one that forwards every call to it."""

from __future__ import annotations

from contextlib import aclosing

import anyio
import pytest

from freshcache import (
    FRESH,
    FreshCache,
    ListenAcknowledged,
    ListenStarted,
    ReadReply,
    RequestFailed,
    Source,
    SourceWrapper,
    StreamEvent,
)
from freshcache.acceptance import InMemorySource, ReferenceServer

U = "guide://shipping/approval"

pytestmark = pytest.mark.anyio


class CountedReads(SourceWrapper):
    """Overrides one call; inherits the other five."""

    def __init__(self, inner: Source) -> None:
        super().__init__(inner)
        self.reads: list[str] = []

    async def read_resource(self, uri: str, principal: str | None) -> ReadReply | RequestFailed:
        self.reads.append(uri)
        return await self.inner.read_resource(uri, principal)


def wrapped() -> tuple[InMemorySource, CountedReads]:
    server = ReferenceServer()
    server.set(U, "v1")
    inner = InMemorySource(server, identity="memory://wrapped")
    return inner, CountedReads(inner)


async def test_a_wrapper_is_a_source_that_answers_as_the_wrapped_one():
    inner, source = wrapped()
    assert isinstance(source, Source)
    assert source.identity == "memory://wrapped"
    assert await source.start() == await inner.start()
    page = await source.list_resources(None, None)
    assert page == await inner.list_resources(None, None)
    reply = await source.read_resource(U, None)
    assert isinstance(reply, ReadReply) and reply.contents[0].text == "v1"
    assert source.reads == [U]


async def test_a_wrapper_forwards_the_listen_stream():
    _inner, source = wrapped()
    events: list[StreamEvent] = []
    with anyio.fail_after(5):
        async with aclosing(source.listen(frozenset({U}), True)) as stream:
            async for event in stream:
                events.append(event)
                if isinstance(event, ListenAcknowledged):
                    break
    assert [type(e) for e in events] == [ListenStarted, ListenAcknowledged]
    assert events[1].resource_uris == frozenset({U})  # type: ignore[union-attr]


async def test_a_cache_over_a_wrapper_reads_only_through_its_override():
    _inner, source = wrapped()
    async with FreshCache(source, select=[U], read_timeout=5.0) as cache:
        result = await cache.read(U)
        server_reads = cache.engine.counters.server_reads
    assert (result.state, result.text) == (FRESH, "v1")
    assert server_reads >= 1
    assert source.reads == [U] * server_reads  # every server read went through it
