"""Every walk is bounded, and sources declare what they can do (issue 35, items 2 and 4)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from freshcache import ConfigurationError, FreshCache, ListReply, Policy, RequestFailed
from freshcache.acceptance import InMemorySource, ReferenceServer
from tests.polling import until

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("max_list_pages", 0),
        ("max_list_bytes", -1),
        ("max_list_pages", 2.5),
        ("max_list_bytes", True),
    ],
)
def test_a_walk_bound_that_is_no_positive_integer_is_named_in_the_error(
    setting: str, value: object
) -> None:
    with pytest.raises(ConfigurationError, match=rf"Policy\.{setting} .* got {value!r}"):
        Policy(**{setting: value})  # type: ignore[arg-type]


class _Paced(InMemorySource):
    """Each catalog page takes a little while, and the cursor never ends."""

    def __init__(self, server: ReferenceServer) -> None:
        super().__init__(server)
        self.pages = 0

    async def list_catalog(
        self, kind: Any, cursor: str | None, principal: str | None
    ) -> ListReply | RequestFailed:
        self.pages += 1
        await anyio.sleep(0.002)
        return await super().list_catalog(kind, cursor, principal)


async def test_an_endless_walk_stops_at_its_bound_after_the_callers_deadline() -> None:
    server = ReferenceServer()
    server.catalogs.endless = True
    source = _Paced(server)
    async with FreshCache(source, policy=Policy(max_list_pages=40)) as cache:
        # The caller gives up first; the walk goes on in the background, to its bound.
        early = await cache.tools(timeout=0.01)
        assert (early.state, early.reason) == ("awaiting_fresh_source", "timeout")
        await until(lambda: not cache.relisting)
        # 40 pages taken and the one past the bound that stops it (a reply a change
        # outdated, when the listen's acknowledgment lands meanwhile, is not taken).
        assert 41 <= source.pages <= 41 + Policy().max_rereads
        status = cache.catalog_status("tools")
        assert (status.state, status.reason) == ("awaiting_fresh_source", "server_error")
        assert "Policy.max_list_pages (40)" in (status.detail or "")
        pages = source.pages
        again = await cache.tools()  # asked again: one more bounded walk, the same state
        assert (again.state, again.reason) == ("awaiting_fresh_source", "server_error")
        assert source.pages <= pages + 41  # (now covered: it takes the cached pages first)


class _Undeclared:
    """Reads, lists and listens, but declares none of the capabilities."""

    identity = "undeclared"

    async def start(self) -> Any: ...
    async def aclose(self) -> None: ...
    async def read_resource(self, uri: str, principal: str | None) -> Any: ...
    async def list_resources(self, cursor: str | None, principal: str | None) -> Any: ...
    def listen(self, uris: frozenset[str], list_changed: bool) -> Any: ...
    async def call_tool(self, params: Any, principal: str | None) -> Any: ...


class _Declared(_Undeclared):
    """The same source saying what it lacks: nothing is probed for."""

    list_catalog = None
    ask_pushed_bodies = None
    shared_catalogs = None
    forward = None


def test_a_source_that_leaves_a_capability_out_is_refused_naming_them() -> None:
    with pytest.raises(
        ConfigurationError, match="list_catalog, ask_pushed_bodies, shared_catalogs, forward"
    ):
        FreshCache(_Undeclared())  # type: ignore[arg-type]
    FreshCache(_Declared())  # type: ignore[arg-type]
