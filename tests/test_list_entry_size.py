"""A list page is counted by what it holds (``resources/list`` entries carry the whole
``Resource``: title, description, annotations, icons, ``_meta``), so a byte bound
means what it says: the store's ``max_bytes`` and `Policy.max_list_bytes`."""

from __future__ import annotations

from typing import Any

import pytest

from freshcache import FreshCache, ListReply, MemoryStore, Policy, RequestFailed
from freshcache._core import ResourceInfo
from freshcache._core._frozen import frozen
from freshcache._core._lists import ListPages
from freshcache.testing import InMemorySource

pytestmark = pytest.mark.anyio

DESCRIPTION = "x" * 100_000


def _described(n: int) -> ResourceInfo:
    uri = f"guide://{n}"
    item = {"uri": uri, "name": str(n), "description": DESCRIPTION, "icons": [{"src": uri}]}
    return ResourceInfo(uri, str(n), None, frozen(item))


def test_a_stored_page_counts_the_descriptions_its_entries_carry() -> None:
    store = MemoryStore(max_entries=100, max_bytes=1_000_000)
    pages = ListPages(store, "server", Policy())
    ticket = pages.begin(None, None)
    landed = pages.finish(ticket, ListReply((_described(1), _described(2))), 0.0)
    assert isinstance(landed, ListReply)
    assert 2 * len(DESCRIPTION) < store.bytes_held < 2 * len(DESCRIPTION) + 2_000
    assert landed.item_bytes == store.bytes_held - 256  # counted once, when it landed

    # Ten such pages are twice the bound: the store keeps what fits, not all ten.
    for n in range(10):
        ticket = pages.begin(f"page-{n}", None)
        pages.finish(ticket, ListReply((_described(10 + 2 * n), _described(11 + 2 * n))), 0.0)
    assert store.bytes_held <= 1_000_000 and store.entry_count < 11


class _Described(InMemorySource):
    """Every page lists two resources with a 100 kB description; the cursor goes on."""

    pages = 0

    async def list_resources(self, cursor: str | None, principal: Any) -> ListReply | RequestFailed:
        self.pages += 1
        n = int(cursor or 0)
        return ListReply((_described(n), _described(n + 1)), next_cursor=str(n + 2))


async def test_the_walk_byte_bound_counts_the_descriptions() -> None:
    policy = Policy(max_list_pages=1000, max_list_bytes=1_000_000)
    source = _Described()
    async with FreshCache(source, policy=policy, listen=False) as cache:
        listed = await cache.list_resources()
    assert (listed.state, listed.reason) == ("awaiting_fresh_source", "server_error")
    assert "Policy.max_list_bytes (1000000)" in (listed.detail or "")
    assert source.pages == 5  # 1 MB is five pages of 200 kB, not 1,000 pages of "400 bytes"
