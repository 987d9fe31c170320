"""`freshcache.sync.SyncFreshCache`: the same results for code that is not async,
shared between threads, shut down cleanly."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from freshcache import (
    ConfigurationError,
    FreshCacheError,
    Loaded,
    LoaderSource,
    McpClientSource,
    ReadResult,
)
from freshcache.sync import SyncFreshCache
from tests.conftest import SdkServer
from tests.polling import until_sync as wait_for

U = "guide://shipping/approval"
V = "guide://shipping/rates"


class SlowStore:
    """A loader whose answers wait for a gate the test opens (a threading.Event)."""

    def __init__(self) -> None:
        self.texts = {U: "v1", V: "rates v1"}
        self.gate = threading.Event()
        self.gate.set()
        self.calls = 0
        self._lock = threading.Lock()
        self.closed = False

    async def load(self, uri: str) -> Loaded:
        import anyio

        with self._lock:
            self.calls += 1
        with anyio.fail_after(10):
            while not self.gate.is_set():
                await anyio.sleep(0.005)
        return Loaded(self.texts[uri], True, ttl_ms=60_000)

    async def list_uris(self) -> list[str]:
        return sorted(self.texts)


def loop_threads() -> int:
    return sum(1 for t in threading.enumerate() if t is not threading.main_thread())


def test_the_sync_cache_gives_the_same_results_as_the_async_one():
    store = SlowStore()
    with SyncFreshCache(LoaderSource(store.load, list=store.list_uris)) as cache:
        first = cache.read(U)
        again = cache.read(U)  # not selected: served from cache within its ttlMs
        status = cache.status(U)
        listed = cache.list_resources()
        cache.select([U, V])
        selected_read = cache.read(V)
        selected = cache.selected
        described = cache.describe()
        stream = cache.stream_status
    assert (first.state, first.text, first.server_read) == ("fresh", "v1", True)
    assert (again.state, again.server_read) == ("fresh", False)
    assert status == again
    assert [r.uri for r in listed.resources] == [U, V]
    assert (selected_read.state, selected_read.text) == ("fresh", "rates v1")
    assert selected == frozenset({U, V})
    assert described["selected"] == [U, V]
    assert stream == "unsupported", "a loader without a change feed has no stream"
    assert cache.closed


def test_many_threads_reading_at_once_share_one_server_read():
    store = SlowStore()
    store.gate.clear()
    with (
        SyncFreshCache(LoaderSource(store.load), read_timeout=10.0) as cache,
        ThreadPoolExecutor(max_workers=8) as pool,
    ):
        futures = [pool.submit(cache.read, U) for _ in range(32)]
        wait_for(lambda: store.calls >= 1)
        store.gate.set()
        results = [f.result(timeout=10) for f in futures]
    assert {(r.state, r.text) for r in results} == {("fresh", "v1")}
    assert store.calls == 1, "concurrent reads of one URI share a single server read"


def test_threads_reading_different_uris_each_get_their_own():
    store = SlowStore()
    with (
        SyncFreshCache(LoaderSource(store.load), read_timeout=10.0) as cache,
        ThreadPoolExecutor(max_workers=4) as pool,
    ):
        texts = list(pool.map(lambda uri: cache.read(uri).text, [U, V, U, V]))
    assert texts == ["v1", "rates v1", "v1", "rates v1"]


def test_closing_ends_the_loop_thread_and_closes_the_source():
    before = loop_threads()
    cleaned = threading.Event()

    async def feed():
        import anyio

        try:
            await anyio.sleep_forever()
            yield U
        finally:
            cleaned.set()

    store = SlowStore()
    cache = SyncFreshCache(LoaderSource(store.load, changes=feed()), select=[U])
    wait_for(lambda: cache.stream_status == "live")
    assert loop_threads() == before + 1
    cache.close()
    cache.close()  # idempotent
    assert cleaned.wait(timeout=10), "the source's change feed was closed"
    wait_for(lambda: loop_threads() == before)
    with pytest.raises(FreshCacheError, match="closed"):
        cache.read(U)


def test_closing_while_another_thread_waits_ends_that_wait():
    store = SlowStore()
    store.gate.clear()
    cache = SyncFreshCache(LoaderSource(store.load), read_timeout=30.0)
    outcome: list[object] = []

    def reader() -> None:
        try:
            outcome.append(cache.read(U))
        except FreshCacheError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    wait_for(lambda: store.calls >= 1)
    cache.close()
    thread.join(timeout=10)
    assert not thread.is_alive()
    (got,) = outcome
    # Either the call learns the cache closed under it, or its read was cut off: in
    # no case does it get text.
    if isinstance(got, FreshCacheError):
        assert "closed" in str(got)
    else:
        assert isinstance(got, ReadResult)
        assert (got.state, got.reason, got.text) == ("awaiting_fresh_source", "invalidated", None)


def test_a_bad_option_fails_construction_without_leaving_a_thread():
    before = loop_threads()
    store = SlowStore()
    with pytest.raises(ConfigurationError, match="read_timeout"):
        SyncFreshCache(LoaderSource(store.load), read_timeout=-1)
    wait_for(lambda: loop_threads() == before)


@pytest.mark.wire
def test_the_sync_cache_works_over_the_official_sdk_client(sdk_server: SdkServer):
    with SyncFreshCache(McpClientSource.connect(sdk_server.url), select=[U]) as cache:
        first = cache.read(U)
        wait_for(lambda: cache.stream_status == "live")
        sdk_server.control("set", uri=U, text="v2")
        wait_for(lambda: cache.status(U).text == "v2")
        second = cache.read(U)
    assert first.state == "fresh"
    assert first.text is not None
    assert first.text.startswith("Shipping approval v1")
    assert (second.state, second.text) == ("fresh", "v2")
