"""A catalog's version over its pages (issue 25): each page's canonical JSON is made once,
so a re-walk that takes pages from the cache encodes only what the server sent again,
and the digest stays `catalog_version`'s over every item."""

from __future__ import annotations

from typing import Any

import pytest

import freshcache._core._catalogs as catalogs_module
from freshcache import FreshCache
from freshcache._core import ListReply
from freshcache._core._catalogs import PageVersions, catalog_version
from freshcache._core._frozen import frozen
from freshcache.acceptance import InMemorySource, ReferenceServer
from freshcache.acceptance._runner import VirtualClock
from tests.polling import until

U = "guide://shipping/approval"


def tool(n: int) -> dict[str, Any]:
    return {
        "name": f"tool-{n}",
        "description": f"does thing {n} — ünïcode \U0001f600",
        "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}, "n": n},
    }


def page(*numbers: int) -> ListReply:
    return ListReply((), items=frozen([tool(n) for n in numbers]))


def test_the_version_of_pages_is_the_version_of_their_items_whatever_was_reused():
    versions = PageVersions()
    a, b, c, empty = page(1, 2), page(3), page(4, 5, 6), page()
    walks = [
        [a, b, c],
        [a, b, c],  # every page from the cache
        [page(1, 2), b, c],  # the first page sent again, the rest cached
        [a, empty, c],
        [empty],
        [],
        [c, a],
        [page(7), b, empty, page(8, 9)],
    ]
    for pages in walks:
        items = tuple(item for p in pages for item in p.items)
        assert versions.version("tools", pages) == catalog_version(items)
    assert versions.version("tools", [a]) != versions.version("tools", [c])


@pytest.mark.anyio
async def test_a_rewalk_encodes_only_the_pages_the_server_sent_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: every walk encoded every item again (100 here), cached pages included."""
    encoded: list[int] = []
    real = catalogs_module.canonical_json

    def counting(value: Any) -> str:
        encoded.append(len(value))
        return real(value)

    monkeypatch.setattr(catalogs_module, "canonical_json", counting)
    server = ReferenceServer()
    server.set(U, "v1")
    server.catalogs.set("tools", [tool(n) for n in range(100)])
    server.catalogs.page_size = 25
    server.catalogs.ttl_ms = 1_000  # the first page expires first
    server.catalogs.later_pages_ttl_ms = 60_000
    clock = VirtualClock()
    async with FreshCache(
        InMemorySource(server), select=[U], clock=clock, wall_clock=clock.wall
    ) as cache:
        await until(lambda: cache.stream_status == "live")
        first = await cache.tools()
        assert first.state == "fresh" and len(first.items) == 100
        assert sum(encoded) == 100
        lists = server.catalogs.lists["tools"]

        clock.advance(2.0)  # page 1's window passed, the other three are fresh
        again = await cache.tools()
        assert again.state == "fresh" and again.server_read
        assert server.catalogs.lists["tools"] == lists + 1  # only the first page asked for
        assert sum(encoded) == 100 + 25  # the three cached pages were not encoded again
        assert again.version == first.version == catalog_version(again.items)
