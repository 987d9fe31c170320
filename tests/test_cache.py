"""FreshCache middleware: deadlines, single flight, the listen supervisor, misuse."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from freshcache import (
    BackoffSettings,
    ConfigurationError,
    FreshCache,
    FreshCacheError,
    RequestFailed,
)
from freshcache._core import ListenStarted, StreamEvent
from freshcache.acceptance import InMemorySource, ReferenceServer
from tests.polling import until

U = "guide://shipping/approval"
FAST = BackoffSettings(base=0.005, cap=0.02, quick_death=0.0)

pytestmark = pytest.mark.anyio


def reference(**resources: str) -> ReferenceServer:
    server = ReferenceServer()
    server.set(U, "v1")
    for uri, text in resources.items():
        server.set(uri, text)
    return server


async def test_reading_outside_async_with_is_a_clear_error():
    cache = FreshCache(InMemorySource(reference()))
    with pytest.raises(FreshCacheError, match="async with"):
        await cache.read(U)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"select": U}, "list of URIs"),
        ({"read_timeout": -1}, "read_timeout"),
        ({"ack_timeout": float("nan")}, "ack_timeout"),
    ],
    ids=["select-string", "negative-timeout", "nan-timeout"],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ConfigurationError, match=message):
        FreshCache(InMemorySource(reference()), **kwargs)


def test_something_that_is_not_a_source_is_refused():
    with pytest.raises(ConfigurationError, match="must be a freshcache Source"):
        FreshCache("http://127.0.0.1:1/mcp")  # type: ignore[arg-type]


async def test_a_cache_cannot_be_entered_twice():
    cache = FreshCache(InMemorySource(reference()))
    async with cache:
        pass
    with pytest.raises(FreshCacheError, match="already entered"):
        await cache.__aenter__()


async def test_a_bad_uri_or_timeout_in_read_is_named():
    async with FreshCache(InMemorySource(reference()), listen=False) as cache:
        with pytest.raises(ConfigurationError, match="uri"):
            await cache.read("")
        with pytest.raises(ConfigurationError, match="timeout"):
            await cache.read(U, timeout=-2)


async def test_past_the_deadline_read_says_timeout_and_the_read_lands_later():
    server = reference()
    async with FreshCache(InMemorySource(server), listen=False) as cache:
        server.hold_reads()
        result = await cache.read(U, timeout=0.05)
        assert (result.state, result.reason, result.server_read) == (
            "awaiting_fresh_source",
            "timeout",
            True,
        )
        assert cache.status(U).reason == "timeout"
        server.release_reads()
        await until(lambda: cache.status(U).state == "fresh")
        assert cache.status(U).text == "v1"
        assert server.reads == 1


async def test_concurrent_reads_of_one_uri_cost_one_server_read():
    server = reference()
    async with FreshCache(InMemorySource(server), listen=False) as cache:
        server.hold_reads()
        results = []

        async def reader() -> None:
            results.append(await cache.read(U))

        async with anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(reader)
            await until(lambda: server.reads_in_flight == 1)
            assert cache.pending_reads == 1
            server.release_reads()
        assert server.reads == 1
        assert {r.text for r in results} == {"v1"}


async def test_entering_with_the_server_down_neither_hangs_nor_raises():
    server = reference()
    server.down = True
    with anyio.fail_after(5):
        async with FreshCache(InMemorySource(server), select=[U], backoff=FAST) as cache:
            result = await cache.read(U)
            assert (result.state, result.reason) == ("awaiting_fresh_source", "unreachable")
            assert cache.stream_status != "live"
            server.down = False
            await until(lambda: cache.stream_status == "live")
            await until(lambda: cache.status(U).state == "fresh")


async def test_a_source_that_raises_gives_server_error_and_the_cache_goes_on():
    class Broken(InMemorySource):
        async def read_resource(self, uri, principal):
            raise RuntimeError("bug in a source")

    async with FreshCache(Broken(reference()), listen=False) as cache:
        result = await cache.read(U)
        assert (result.state, result.reason) == ("awaiting_fresh_source", "server_error")
        assert "bug in a source" in (result.detail or "")


async def test_changing_the_selection_opens_the_new_stream_before_closing_the_old():
    extra = "guide://shipping/holidays"
    seen_open: list[int] = []

    class Counting(ReferenceServer):
        def subscribe(self, *args, **kwargs):
            seen_open.append(len(self.subscribers))
            return super().subscribe(*args, **kwargs)

    server = Counting()
    server.set(U, "v1")
    server.set(extra, "h1")
    async with FreshCache(InMemorySource(server), select=[U], backoff=FAST) as cache:
        await until(lambda: cache.stream_status == "live")
        cache.select([U, extra])
        await until(lambda: cache.engine.covered == {U, extra} and len(server.subscribers) == 1)
        assert seen_open == [0, 1]  # the second listen started while the first was open
        assert cache.selected == {U, extra}


async def test_a_server_without_listen_leaves_the_cache_on_direct_reads():
    server = reference()
    server.listen_supported = False
    async with FreshCache(InMemorySource(server), select=[U]) as cache:
        await until(lambda: cache.stream_status == "unsupported")
        assert (await cache.read(U)).server_read is True
        assert (await cache.read(U)).server_read is True


async def test_listening_can_be_switched_off():
    async with FreshCache(InMemorySource(reference()), select=[U], listen=False) as cache:
        await until(lambda: cache.stream_status == "disabled")
        assert (await cache.read(U)).state == "fresh"


async def test_a_stream_without_acknowledgment_in_time_is_closed_and_retried():
    log: list[tuple[str, int, float]] = []  # ("open" | "close", attempt, time)

    class Silent(InMemorySource):
        async def listen(self, uris, list_changed) -> AsyncIterator[StreamEvent]:
            attempt = sum(1 for what, _, _ in log if what == "open")
            log.append(("open", attempt, anyio.current_time()))
            try:
                yield ListenStarted(f"quiet-{attempt}", uris, list_changed)
                await anyio.sleep_forever()
            finally:
                log.append(("close", attempt, anyio.current_time()))

    async with FreshCache(Silent(reference()), select=[U], ack_timeout=0.05, backoff=FAST) as cache:
        await until(lambda: sum(1 for what, _, _ in log if what == "open") >= 3)
        opened = {n: t for what, n, t in log if what == "open"}
        closed = {n: t for what, n, t in log if what == "close"}
        # Each attempt that gave no acknowledgment was closed, not before its ack
        # deadline, and before the next one was opened.
        for n in range(len(opened) - 1):
            assert n in closed, f"attempt {n} was never closed"
            assert closed[n] - opened[n] >= 0.05 * 0.9
            assert log.index(("close", n, closed[n])) < log.index(("open", n + 1, opened[n + 1]))
        assert cache.engine.counters.acknowledgments == 0
        assert not cache.engine.is_covered(U)
        assert (await cache.read(U)).server_read is True  # uncovered: read before use


async def test_lists_walk_every_page_and_are_cached():
    server = reference(**{f"guide://p/{n}": str(n) for n in range(5)})
    server.page_size = 2
    async with FreshCache(InMemorySource(server), listen=False) as cache:
        first = await cache.list_resources()
        assert first.state == "fresh"
        assert len(first.resources) == 6
        assert first.server_read is True
        second = await cache.list_resources()
        assert (second.resources, second.server_read) == (first.resources, False)


async def test_a_list_failure_is_an_explicit_state():
    server = reference()
    server.down = True
    async with FreshCache(InMemorySource(server), listen=False) as cache:
        listed = await cache.list_resources()
        assert (listed.state, listed.reason) == ("awaiting_fresh_source", "unreachable")


async def test_describe_reports_stream_selection_and_counters():
    async with FreshCache(InMemorySource(reference()), select=[U], backoff=FAST) as cache:
        await until(lambda: cache.stream_status == "live")
        await cache.read(U)
        info = cache.describe()
        assert info["server"] == cache.source.identity
        assert info["protocol_version"] == "2026-07-28"
        assert (info["stream"], info["retry_in"]) == ("live", None)
        assert (info["selected"], info["covered"]) == ([U], [U])
        assert info["counters"]["acknowledgments"] == 1
        assert info["counters"] == {
            name: getattr(cache.engine.counters, name) for name in cache.engine.counters.__slots__
        }
        store = cache.store
        assert (info["entries"], info["bytes"]) == (store.entry_count, store.bytes_held)
        assert info["entries"] >= 1 and info["bytes"] > 0  # the read (and a list page)


async def test_a_reply_source_values_pass_through_unchanged():
    """The middleware hands the engine exactly what the source replied."""

    class Scripted(InMemorySource):
        async def read_resource(self, uri, principal):
            if principal == "mallory":
                return RequestFailed("denied", "no")
            return await super().read_resource(uri, principal)

    async with FreshCache(Scripted(reference()), listen=False) as cache:
        denied = await cache.read(U, principal="mallory")
        assert (denied.state, denied.detail, denied.text) == ("denied", "no", None)
        fresh = await cache.read(U)
        assert (fresh.state, fresh.text, fresh.server_read) == ("fresh", "v1", True)


async def test_a_configuration_problem_is_raised_to_the_caller_not_turned_into_a_state():
    from freshcache import UnsupportedVersionError

    class Misconfigured(InMemorySource):
        async def read_resource(self, uri, principal):
            raise UnsupportedVersionError(
                "no version in common", supported=("1999-01-01",), requested="2026-07-28"
            )

    async with FreshCache(Misconfigured(reference()), listen=False) as cache:
        for _ in range(2):  # every caller hears of it, not only the first
            with pytest.raises(UnsupportedVersionError, match="no version in common"):
                await cache.read(U)


async def test_a_server_that_cannot_be_used_at_all_says_so_at_every_read():
    from freshcache import ProtocolError

    class NotMcp(InMemorySource):
        async def start(self):
            raise ProtocolError("nothing answers MCP at memory://x; check the endpoint path")

    async with FreshCache(NotMcp(reference()), select=[U], backoff=FAST) as cache:
        await until(lambda: cache.server_info is not None)
        assert cache.server_info.listen is False
        with pytest.raises(ProtocolError, match="endpoint path"):
            await cache.read(U)
        with pytest.raises(ProtocolError, match="endpoint path"):
            await cache.list_resources()
