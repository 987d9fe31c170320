"""`FreshCache.server_info` is set by the request that agreed on the revision, whatever
the caller did first (issue 34): with nothing selected, a first `list_resources()` no
longer races the discovery, which used to leave ``server_info`` ``None`` after it."""

from __future__ import annotations

import pytest

from freshcache import FreshCache, HttpSource
from freshcache.acceptance import ReferenceServer
from freshcache.acceptance._http_server import ReferenceHttpServer

pytestmark = pytest.mark.anyio


async def test_server_info_is_known_once_a_first_list_returns() -> None:
    server = ReferenceServer()
    server.set("guide://a", "v1")
    async with (
        ReferenceHttpServer(server) as http,
        FreshCache(HttpSource(http.url), read_timeout=5.0) as cache,
    ):
        listed = await cache.list_resources()
        assert listed.state == "fresh"
        info = cache.server_info
        assert info is not None and info.protocol_version == "2026-07-28", info
