"""A cold start costs one server read per selected URI and one walk of the resource list
(DESIGN §8, issue 38): what is asked before the first acknowledgment waits for it and
takes the read or walk the acknowledgment asks for, instead of being done twice."""

from __future__ import annotations

import math

import anyio
import pytest

from freshcache import FreshCache
from freshcache.acceptance import InMemorySource, ReferenceServer
from tests.polling import until

pytestmark = pytest.mark.anyio

URIS = [f"doc://cold/{n}" for n in range(6)]


def held_server() -> ReferenceServer:
    server = ReferenceServer()
    server.page_size = 2
    for uri in URIS:
        server.set(uri, f"{uri} v1")
    server.hold_acks()
    return server


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_list_asked_while_the_first_listen_opens_is_walked_once() -> None:
    server = held_server()
    async with FreshCache(InMemorySource(server), select=URIS[:2], read_timeout=30.0) as cache:
        got = []

        async def listing() -> None:
            got.append(await cache.list_resources())

        async with anyio.create_task_group() as tg:
            tg.start_soon(listing)
            await until(lambda: server.listens_for(frozenset(URIS[:2])))
            lists_before_ack = server.lists
            server.release_acks()
        (listed,) = got
        assert listed.state == "fresh"
        pages = math.ceil(len(listed.resources) / server.page_size)
    assert lists_before_ack == 0
    assert server.lists == pages  # the acknowledgment's re-list, taken by the caller


async def test_reads_asked_before_the_first_ack_are_the_reads_it_asks_for() -> None:
    server = held_server()
    async with FreshCache(InMemorySource(server), select=URIS, read_timeout=30.0) as cache:
        got = []

        async def step() -> None:
            context = await cache.context(URIS)
            got.extend(context.fresh)

        async with anyio.create_task_group() as tg:
            tg.start_soon(step)
            await until(lambda: server.listens_for(frozenset(URIS)))
            reads_before_ack = server.reads
            server.release_acks()
        assert len(got) == len(URIS)
        assert all(cache.status(uri).state == "fresh" for uri in URIS)
    assert reads_before_ack == 0
    assert server.reads == len(URIS)
