"""Catalogs and snapshots through `FreshCache` over real parts: HTTP on loopback against
the reference server (both revisions), a user's loader (issue 26 parts 1, 2, 5)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from freshcache import (
    Catalog,
    CatalogChange,
    FreshCache,
    HttpSource,
    Loaded,
    LoaderSource,
    Policy,
    ResourceContents,
)
from freshcache.acceptance import ReferenceServer
from freshcache.acceptance._http_server import ReferenceHttpServer
from freshcache.acceptance._mutation import mutate_everything
from freshcache.acceptance._steps import catalog_items
from tests.polling import until

U = "guide://shipping/approval"
pytestmark = pytest.mark.anyio


def reference() -> ReferenceServer:
    server = ReferenceServer()
    server.set(U, "v1")
    for kind in ("tools", "prompts", "resource_templates"):
        server.catalogs.set(kind, catalog_items(kind, "v1"))
    return server


@asynccontextmanager
async def cache_over_http(
    revision: Any = "2026-07-28", **options: Any
) -> AsyncIterator[tuple[ReferenceServer, FreshCache]]:
    server = reference()
    async with (
        ReferenceHttpServer(server, revision=revision) as http,
        httpx.AsyncClient(trust_env=False) as client,
    ):
        source = HttpSource(http.url, client=client, timeout=5.0, idle_timeout=2.0)
        async with FreshCache(source, select=[U], read_timeout=5.0, **options) as cache:
            await until(lambda: cache.stream_status == "live")
            yield server, cache


@pytest.mark.parametrize("revision", ["2026-07-28", "2025-11-25"])
async def test_a_changed_tool_list_heard_is_relisted_and_reported(revision: str) -> None:
    async with cache_over_http(revision) as (server, cache):
        changes = cache.changes()
        first = await cache.tools()
        assert (first.state, first.names) == ("fresh", ("search-v1", "help"))
        assert first.server_read
        lists = server.catalogs.lists["tools"]
        hit = await cache.tools()
        assert hit.names == first.names
        assert not hit.server_read
        assert await cache.tools() is hit  # the same immutable object on every hit
        assert server.catalogs.lists["tools"] == lists

        server.set_catalog("tools", catalog_items("tools", "v2"))  # and notifies
        await until(lambda: cache.catalog_status("tools").names == ("search-v2", "help"))
        again = await cache.tools()
        assert (again.state, again.version) == ("fresh", cache.catalog_status("tools").version)
        assert again.version != first.version
        seen: list[CatalogChange] = []
        async with changes:
            async for change in changes:
                if isinstance(change, CatalogChange):
                    seen.append(change)
                    if change.new_state == "fresh" and change.new_version == again.version:
                        break
        assert seen[-1].kind == "tools"
        assert seen[-1].new_version == again.version


async def test_invalidate_catalog_makes_the_next_call_relist() -> None:
    async with cache_over_http() as (server, cache):
        await cache.prompts()
        lists = server.catalogs.lists["prompts"]
        cache.invalidate_catalog("prompts")
        status = cache.catalog_status("prompts")
        assert (status.state, status.reason, status.items) in (
            ("awaiting_fresh_source", "invalidated", ()),
            ("fresh", None, status.items),  # the background re-list already landed
        )
        catalog = await cache.prompts()
        assert catalog.state == "fresh"
        assert server.catalogs.lists["prompts"] > lists


async def test_a_server_down_gives_a_state_and_the_labelled_catalog_only_when_opted_in() -> None:
    for policy, expected in (
        (Policy(), "awaiting_fresh_source"),
        (Policy(stale_catalogs_on_error=True), "stale"),
    ):
        async with cache_over_http(policy=policy) as (server, cache):
            await cache.tools()
            server.catalogs.faults["tools"] = "server_error"
            server.notify_catalog_changed("tools")
            await until(lambda: cache.catalog_status("tools").state != "fresh")
            catalog = await cache.tools()
            assert catalog.state == expected
            assert not catalog.ok
            if expected == "stale":
                assert catalog.names == ("search-v1", "help")
                assert catalog.age is not None
                assert catalog.age >= 0
            else:
                assert (catalog.items, catalog.age) == ((), None)


async def test_nothing_handed_out_can_be_mutated_nor_change_the_next_callers_copy() -> None:
    annotations: dict[str, Any] = {"audience": ["assistant"], "priority": {"levels": [1, 2]}}
    meta: dict[str, Any] = {"origin": {"path": ["a", "b"]}}

    async def load(uri: str) -> Loaded:
        return Loaded(
            [ResourceContents(uri, text="v1", annotations=annotations, meta=meta)],
            from_server=True,
            ttl_ms=60_000,
        )

    async with FreshCache(LoaderSource(load)) as cache:  # unselected: hits within the TTL
        first = await cache.read(U)
        assert first.state == "fresh"
        assert mutate_everything(first) == 0
        annotations["audience"].append("user")  # the loader's own dict, changed later
        meta["origin"]["path"].clear()
        second = await cache.read(U)
        assert not second.server_read
        assert second.contents[0].annotations == {
            "audience": ("assistant",),
            "priority": {"levels": (1, 2)},
        }
        assert second.contents[0].to_mcp()["_meta"] == {"origin": {"path": ["a", "b"]}}
        context = await cache.context([U])
        assert mutate_everything(context) == 0
        assert (await cache.read(U)).contents == first.contents
        listed = await cache.list_resources()
        assert mutate_everything(listed) == 0


async def test_a_catalog_handed_out_over_http_refuses_every_mutation() -> None:
    async with cache_over_http() as (_, cache):
        for fetch in (cache.tools, cache.prompts, cache.resource_templates):
            catalog: Catalog = await fetch()
            assert catalog.state == "fresh"
            assert mutate_everything(catalog) == 0
            assert (await fetch()).names == catalog.names


async def test_a_source_without_catalogs_gives_a_state_not_an_error() -> None:
    async def load(uri: str) -> str:
        return "text"

    async with FreshCache(LoaderSource(load)) as cache:
        catalog = await cache.tools()
        assert (catalog.state, catalog.reason, catalog.items) == (
            "awaiting_fresh_source",
            "server_error",
            (),
        )
        assert "LoaderSource cannot list tools" in (catalog.detail or "")


async def test_a_server_without_the_list_method_gives_not_found() -> None:
    async with cache_over_http() as (server, cache):
        del server.catalogs.items["tools"]  # the server answers tools/list with -32601
        catalog = await cache.tools()
        assert (catalog.state, catalog.reason, catalog.items) == ("not_found", "not_found", ())
        assert "tools/list" in (catalog.detail or "")
        assert (await cache.prompts()).state == "fresh"


async def test_a_walk_whose_window_closed_before_its_caller_woke_is_not_handed_out() -> None:
    # The walk ends inside its window and settles; the caller resumes only after the
    # window closed (a loaded event loop, here a clock that jumps right after the
    # settle). It is judged as the walk's own end is: walked again, never handed out
    # as fresh past its window.
    skew = [0.0]
    async with cache_over_http(clock=lambda: time.monotonic() + skew[0]) as (server, cache):
        settle = cache.engine.settle_catalog

        def settle_then_the_window_closes(done: Any) -> Catalog:
            settled = settle(done)
            if not skew[0]:
                skew[0] = 120.0  # past the reference server's 60 s ttlMs
            return settled

        cache.engine.settle_catalog = settle_then_the_window_closes  # type: ignore[method-assign]
        handed = await cache.tools()
        assert handed.state == "fresh", handed
        assert cache.catalog_status("tools").state == "fresh", "a closed window handed out"
        assert server.catalogs.lists.get("tools", 0) == 2  # walked again after the jump
