"""The fleet (docs/fleet.md): workers sharing one freshness view on a real Valkey.

Several `FreshCache` workers in one process share a Valkey server started by the
tests; `test_fleet_processes.py` runs them as separate processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from freshcache import AWAITING_FRESH_SOURCE, FRESH, FreshCache, MissingDependencyError, Policy
from freshcache._core import ListenAcknowledged, ListenStarted, ResourceUpdated, StreamLost
from freshcache.acceptance import InMemorySource, ReferenceServer
from freshcache.fleet import Fleet
from tests.polling import scaled
from tests.polling import until as eventually
from tests.telemetry_support import Recorder
from tests.valkey_support import Valkey

pytestmark = pytest.mark.anyio

URI = "doc://a"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py's client is asyncio only


class Counting(ReferenceServer):
    def __init__(self) -> None:
        super().__init__()
        self.server_reads = 0

    async def read(self, uri: str, principal: str | None = None):  # type: ignore[no-untyped-def]
        self.server_reads += 1
        return await super().read(uri, principal)


def fleet_of(url: str, namespace: str = "t", lease: float | None = None) -> Fleet:
    """The tests' fleet: a short lease (0.6 s) and store deadline (0.5 s), each stretched
    by the load when it is made. Fixed, a loop starved for half a second on a loaded
    machine lets a renewal lapse or a store call time out: the worker fails closed and
    reads the server itself, and a test that counts the fleet's server reads or its
    lease holders sees a cost the design does not have."""
    return Fleet(
        url,
        namespace=namespace,
        lease=scaled(0.6) if lease is None else lease,
        op_timeout=scaled(0.5),
    )


class Workers(list[FreshCache]):
    """Worker caches, each entered in its own task (so any one can leave first)."""

    stops: dict[int, anyio.Event]

    async def leave(self, cache: FreshCache) -> None:
        self.stops.pop(id(cache)).set()
        self.remove(cache)
        await eventually(lambda: cache._tg is None)


async def _hold(cache: FreshCache, entered: anyio.Event, stop: anyio.Event) -> None:
    async with cache:
        entered.set()
        await stop.wait()


@asynccontextmanager
async def workers(
    server: ReferenceServer,
    url: str,
    n: int,
    namespace: str = "t",
    lease: float | None = None,
    **options: Any,
) -> AsyncIterator[Workers]:
    caches = Workers()
    caches.stops = {}
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            cache = FreshCache(
                InMemorySource(server),
                select=[URI],
                fleet=fleet_of(url, namespace, lease),
                read_timeout=scaled(2.0),
                **options,
            )
            entered, caches.stops[id(cache)] = anyio.Event(), anyio.Event()
            tg.start_soon(_hold, cache, entered, caches.stops[id(cache)])
            await entered.wait()
            caches.append(cache)
        try:
            await eventually(lambda: all(c.stream_status == "live" for c in caches))
            yield caches
        finally:
            for stop in caches.stops.values():
                stop.set()


@asynccontextmanager
async def a_follower(
    valkey: Valkey, lease: float | None = None
) -> AsyncIterator[tuple[FreshCache, Any]]:
    """Two workers on ``valkey`` over a reference server holding ``URI`` at v1: the one
    that does not lead, and its fleet parts. A test that needs the leader to stay put
    passes a longer ``lease``: with 0.6 s, a loop starved for a few hundred ms on a
    loaded machine hands the lease over, and every follower stream ends with it."""
    server = ReferenceServer()
    server.set(URI, "v1", ttl_ms=60_000)
    async with workers(server, valkey.url, 2, lease=lease) as caches:
        follower = next(c for c in caches if not c.describe()["fleet"]["leading"])
        assert follower._fleet is not None
        yield follower, follower._fleet


def leader(caches: list[FreshCache]) -> FreshCache:
    leading = [c for c in caches if c.describe()["fleet"]["leading"]]
    assert len(leading) == 1
    return leading[0]


async def read_everywhere(
    caches: list[FreshCache], text: str, timeout: float = 30.0, uri: str = URI
) -> None:
    """Every worker hands out ``text`` when read: the change reached it. A follower
    re-reads a change it heard on the fleet channel when it is read
    (`test_fleet_lazy.py`); one the change has not reached yet still hands out the
    text before it, and is read again."""
    with anyio.fail_after(timeout):
        for cache in caches:
            while (await cache.read(uri)).text != text:
                await anyio.sleep(0.01)


# ---------------------------------------------------------------------- the package


def test_import_freshcache_imports_no_redis() -> None:
    code = (
        "import sys, freshcache, freshcache.fleet\n"
        "f = freshcache.Fleet('redis://127.0.0.1:1/0', namespace='a')\n"
        "print('redis' in sys.modules, f.namespace)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "a"]


def test_fleet_is_exported_from_freshcache() -> None:
    import freshcache

    assert "Fleet" in freshcache.__all__
    assert freshcache.Fleet is Fleet
    assert Fleet.__module__ == "freshcache"


def test_fleet_without_the_extra_names_the_install_command() -> None:
    code = (
        "import sys; sys.modules['redis'] = None\n"
        "from freshcache import FreshCache, MissingDependencyError\n"
        "from freshcache.acceptance import InMemorySource\n"
        "try:\n    FreshCache(InMemorySource(), fleet='redis://127.0.0.1:1/0')\n"
        "except MissingDependencyError as exc:\n    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install '.[fleet]'" in out.stdout
    assert MissingDependencyError is not None


def test_a_bad_fleet_url_is_refused() -> None:
    with pytest.raises(ValueError, match="redis://"):
        Fleet("localhost:6379")


# The scripts' own contract (fencing, partitions, restarts, the lease) is played on
# Valkey and Redis by tests/test_fleet_store_contract.py.


# ---------------------------------------------------------------------- workers


async def test_every_worker_hears_of_a_change_the_listener_heard(valkey: Valkey) -> None:
    server = Counting()
    server.set(URI, "v1", ttl_ms=60_000)
    async with workers(server, valkey.url, 4) as caches:
        await eventually(lambda: all(c.status(URI).text == "v1" for c in caches))
        lead = leader(caches)
        assert sum(c.describe()["fleet"]["leading"] for c in caches) == 1
        assert all(
            c.describe()["fleet"]["listener"] == lead.describe()["fleet"]["worker"] for c in caches
        )
        before = server.server_reads
        server.set(URI, "v2", notify=True, ttl_ms=60_000)
        # Nobody hands out v1 once the change is published...
        await eventually(lambda: all(c.status(URI).text != "v1" for c in caches))
        # ...and the fleet re-reads it once: the listener at once, for the fleet; a
        # follower when it is read (`test_fleet_lazy.py`).
        await eventually(lambda: lead.status(URI).text == "v2")
        assert server.server_reads - before == 1
        for cache in caches:
            assert (await cache.read(URI)).text == "v2"
        assert server.server_reads - before == 1


async def test_a_channel_connection_the_store_closes_fails_closed_without_a_health_check(
    valkey: Valkey,
) -> None:
    """A quiet worker's channel waits on its socket alone (no socket timeout, no PING):
    a subscription the store closes (``CLIENT KILL TYPE pubsub``) still ends that wait
    at once, the worker fails closed, subscribes again and hears the next change."""
    from redis.asyncio import Redis

    server = Counting()
    server.set(URI, "v1", ttl_ms=60_000)
    async with workers(server, valkey.url, 2, namespace="killed", lease=4.0) as caches:
        await eventually(lambda: all(c.status(URI).text == "v1" for c in caches))
        fleets = [c._fleet for c in caches if c._fleet is not None]
        admin = Redis.from_url(valkey.url)
        try:
            assert await admin.client_kill_filter(_type="pubsub") == 2
        finally:
            await admin.aclose()
        await eventually(lambda: all(f.counters.channel_losses == 1 for f in fleets), 10)
        await eventually(lambda: all(f.channel.usable for f in fleets), 10)
        await eventually(lambda: all(c.stream_status == "live" for c in caches), 20)
        server.set(URI, "v2", notify=True, ttl_ms=60_000)
        await read_everywhere(caches, "v2", 10)


async def test_a_hint_on_one_workers_answer_reaches_every_worker(valkey: Valkey) -> None:
    server = Counting()
    server.set(URI, "v1", ttl_ms=60_000)
    async with workers(server, valkey.url, 3) as caches:
        await eventually(lambda: all(c.status(URI).state == FRESH for c in caches))
        follower = next(c for c in caches if not c.describe()["fleet"]["leading"])
        follower._feed_hints((ResourceUpdated(URI, None),))  # as an answer's SSE would
        await eventually(
            lambda: all(
                c.status(URI).text != "v1"
                or c.status(URI).state != FRESH
                or c.describe()["fleet"]["counters"]["remote_invalidations"] >= 1
                for c in caches
            )
        )
        others = [c for c in caches if c is not follower]
        await eventually(
            lambda: all(
                c.describe()["fleet"]["counters"]["remote_invalidations"] >= 1 for c in others
            )
        )


async def test_the_listener_leaves_and_another_worker_takes_over(valkey: Valkey) -> None:
    server = Counting()
    server.set(URI, "v1", ttl_ms=60_000)
    async with workers(server, valkey.url, 4) as caches:
        await eventually(lambda: all(c.status(URI).text == "v1" for c in caches))
        await caches.leave(leader(caches))
        await eventually(lambda: sum(c.describe()["fleet"]["leading"] for c in caches) == 1)
        await eventually(lambda: all(c.stream_status == "live" for c in caches))
        # The new listener's acknowledgment proves nothing about before it: re-read once.
        await eventually(lambda: all(c.status(URI).text == "v1" for c in caches))
        server.set(URI, "v3", notify=True, ttl_ms=60_000)
        await read_everywhere(caches, "v3")


async def test_the_store_goes_down_and_comes_back(valkey: Valkey) -> None:
    server = Counting()
    server.set(URI, "v1", ttl_ms=60_000)
    async with workers(server, valkey.url, 3) as caches:
        await eventually(lambda: all(c.status(URI).text == "v1" for c in caches))
        valkey.stop()
        # Fail closed: no worker can prove its copy any more (the channel is gone).
        await eventually(lambda: all(c.status(URI).state != FRESH for c in caches))
        server.set(URI, "v2", ttl_ms=60_000)  # changed while nobody could hear of it
        for cache in caches:
            started = anyio.current_time()
            result = await cache.read(URI, timeout=1.0)
            assert anyio.current_time() - started < 1.5  # never hangs past the deadline
            assert result.text in (None, "v2")  # never the unproven v1
        valkey.start()
        await eventually(lambda: all(c.describe()["fleet"]["store"] == "up" for c in caches), 10)
        await eventually(lambda: all(c.stream_status == "live" for c in caches), 10)
        server.set(URI, "v4", notify=True, ttl_ms=60_000)
        await read_everywhere(caches, "v4", 10)


async def test_without_a_fleet_nothing_changes() -> None:
    server = ReferenceServer()
    server.set(URI, "v1", ttl_ms=60_000)
    async with FreshCache(InMemorySource(server), select=[URI]) as cache:
        assert "fleet" not in cache.describe()
        assert (await cache.read(URI)).state == FRESH
        assert AWAITING_FRESH_SOURCE != FRESH and Policy is not None


async def test_a_gap_in_the_sequence_drops_the_local_index(valkey: Valkey) -> None:
    from redis.asyncio import Redis

    server = Counting()
    server.set(URI, "v1", ttl_ms=60_000)
    async with workers(server, valkey.url, 2) as caches:
        await eventually(lambda: all(c.status(URI).state == FRESH for c in caches))
        follower = next(c for c in caches if not c.describe()["fleet"]["leading"])
        fleet = follower._fleet
        assert fleet is not None
        redis = Redis.from_url(valkey.url, decode_responses=True)
        try:
            seq = await fleet.shared.sequence()
            # A message from the future: the ones between were missed.
            skipped = json.dumps({"s": seq + 5, "k": "updated", "o": "nobody", "u": "doc://b"})
            await redis.publish(fleet.shared.channel, skipped)
        finally:
            await redis.aclose()
        await eventually(lambda: fleet.counters.gaps == 1)
        assert follower.status(URI).state != FRESH  # failed closed at once
        # It proves freshness again (shared generation or a server read) and goes live.
        await eventually(lambda: follower.stream_status == "live")
        await eventually(lambda: follower.status(URI).state == FRESH)
        assert (await follower.read(URI)).text == "v1"


async def test_a_message_of_an_unknown_kind_fails_closed_and_re_proves(valkey: Valkey) -> None:
    """A channel message of a kind this version does not know (a newer worker's, in a
    fleet not upgraded together) is not taken for a resource's change: what it meant
    is missed, as in a gap. The follower stops serving as fresh what it covered and
    proves it again. Before, it took the message's subject ("tools") for a URI and
    kept serving its copy of the URI as fresh."""
    from redis.asyncio import Redis

    server = Counting()
    server.set(URI, "v1", ttl_ms=60_000)
    async with workers(server, valkey.url, 2) as caches:
        await eventually(lambda: all(c.status(URI).state == FRESH for c in caches))
        follower = next(c for c in caches if not c.describe()["fleet"]["leading"])
        fleet = follower._fleet
        assert fleet is not None
        breaks = fleet.channel.breaks
        redis = Redis.from_url(valkey.url, decode_responses=True)
        try:
            seq = await redis.incr(fleet.shared.seq_key)  # in sequence: no gap
            future = json.dumps({"s": seq, "k": "list_renamed", "o": "nobody", "u": "tools"})
            await redis.publish(fleet.shared.channel, future)
        finally:
            await redis.aclose()
        await eventually(lambda: fleet.channel.breaks > breaks)
        assert fleet.counters.gaps == 0
        assert follower.status(URI).state != FRESH  # failed closed at once
        await eventually(lambda: follower.stream_status == "live")
        await eventually(lambda: follower.status(URI).state == FRESH)
        assert (await follower.read(URI)).text == "v1"


async def test_fan_out_latency_and_lease_changes_are_metrics(valkey: Valkey) -> None:
    recorder = Recorder.make()
    server = Counting()
    server.set(URI, "v1", ttl_ms=60_000)
    try:
        async with workers(server, valkey.url, 2, **recorder.kwargs()) as caches:
            await eventually(lambda: all(c.status(URI).state == FRESH for c in caches))
            server.set(URI, "v2", notify=True, ttl_ms=60_000)
            await read_everywhere(caches, "v2")
            metrics = recorder.metrics()
            assert sum(v for _, v in metrics["freshcache.fleet.fanout_latency"]) >= 1
            assert sum(v for _, v in metrics["freshcache.fleet.lease_changes"]) >= 2
    finally:
        recorder.shutdown()


async def test_a_worker_that_selects_more_is_covered_by_the_listener(valkey: Valkey) -> None:
    server = Counting()
    server.set(URI, "v1", ttl_ms=60_000)
    server.set("doc://b", "b1", ttl_ms=60_000)
    async with workers(server, valkey.url, 2) as caches:
        follower = next(c for c in caches if not c.describe()["fleet"]["leading"])
        follower.select([URI, "doc://b"])
        # The listener re-listens for the union; the follower's coverage follows.
        await eventually(lambda: follower.engine.is_covered("doc://b"))
        await eventually(lambda: follower.status("doc://b").text == "b1")
        server.set("doc://b", "b2", notify=True, ttl_ms=60_000)
        await read_everywhere([follower], "b2", uri="doc://b")
        assert leader(caches).engine.is_covered("doc://b")


async def test_a_lease_that_lapses_while_its_holder_lives_hands_over_cleanly(
    valkey: Valkey,
) -> None:
    from redis.asyncio import Redis

    server = Counting()
    server.set(URI, "v1", ttl_ms=60_000)
    async with workers(server, valkey.url, 3) as caches:
        await eventually(lambda: all(c.status(URI).text == "v1" for c in caches))
        old = leader(caches)
        fleet = old._fleet
        assert fleet is not None
        redis = Redis.from_url(valkey.url, decode_responses=True)
        try:
            # What the store does when renewals stop arriving in time (a starved holder).
            await redis.delete(fleet.shared.lease_key)
        finally:
            await redis.aclose()
        # The holder learns at its next renewal and steps down; exactly one listener
        # remains and every worker is covered by it again.
        await eventually(lambda: fleet.counters.lease_changes >= 2, timeout=10)
        await eventually(
            lambda: (
                sum(c.describe()["fleet"]["leading"] for c in caches) == 1
                and all(c.stream_status == "live" for c in caches)
            ),
            timeout=10,
        )
        holder = leader(caches).describe()["fleet"]["lease_holder"]
        assert all(c.describe()["fleet"]["lease_holder"] == holder for c in caches)
        server.set(URI, "v2", notify=True, ttl_ms=60_000)
        await read_everywhere(caches, "v2")


def _events(recorder: Recorder, name: str) -> list[dict[str, Any]]:
    return [
        dict(event.attributes or {})
        for span in recorder.spans()
        for event in span.events
        if event.name == name
    ]


async def test_fan_out_lease_changes_and_fenced_writes_are_metrics_and_span_events(
    valkey: Valkey,
) -> None:
    recorder = Recorder.make()
    server = Counting()
    server.set(URI, "v1", ttl_ms=60_000)
    try:
        async with workers(server, valkey.url, 2, **recorder.kwargs()) as caches:
            await eventually(lambda: all(c.status(URI).state == FRESH for c in caches))
            # A fill whose server read was sent before a change: v2's read is held at
            # the server while v3 is published, so its fill must be fenced off.
            server.hold_reads()
            server.set(URI, "v2", notify=True, ttl_ms=60_000)
            await eventually(lambda: server.reads_in_flight >= 1)
            fleet = leader(caches)._fleet
            assert fleet is not None
            published = fleet.counters.published  # v2's publication came before its read
            server.set(URI, "v3", notify=True, ttl_ms=60_000)
            await eventually(lambda: fleet.counters.published > published)  # v3 is in the store
            server.release_reads()
            await read_everywhere(caches, "v3")
            fenced = sum(c.describe()["fleet"]["counters"]["fenced_writes"] for c in caches)
            assert fenced >= 1
            metrics = recorder.metrics()
            assert sum(v for _, v in metrics["freshcache.fleet.fenced_writes"]) == fenced
            assert sum(v for _, v in metrics["freshcache.fleet.fanout_latency"]) >= 2
            holders = {a["holder"] for a, _ in metrics["freshcache.fleet.lease_changes"]}
            # (and "none" if a starved loop let the lease lapse between two holders)
            assert {"self", "other"} <= holders <= {"self", "other", "none"}
        # The listen spans end when the workers close: their events are exported then.
        fanned = _events(recorder, "freshcache.fleet.fanout")
        assert len(fanned) >= 2 and all(e["mcp.resource.uri"] == URI for e in fanned)
        assert all(e["latency_s"] >= 0 for e in fanned)
        leases = _events(recorder, "freshcache.fleet.lease")
        assert {e["mine"] for e in leases} == {True, False}
        fences = _events(recorder, "freshcache.fleet.fenced_write")
        assert len(fences) == fenced and all(e["mcp.resource.uri"] == URI for e in fences)
    finally:
        recorder.shutdown()


async def test_describe_says_who_holds_the_lease(valkey: Valkey) -> None:
    server = Counting()
    server.set(URI, "v1", ttl_ms=60_000)
    async with workers(server, valkey.url, 3) as caches:
        lead = leader(caches).describe()["fleet"]
        assert lead["lease_holder"].startswith(f"{lead['worker']}:")
        for cache in caches:
            described = cache.describe()["fleet"]
            assert described["listener"] == lead["worker"]
            assert described["lease_holder"] == lead["lease_holder"]
            assert described["leading"] == (described["worker"] == lead["worker"])


async def test_a_worker_with_a_restricted_acl_user_works_and_sees_only_its_namespace(
    valkey: Valkey,
) -> None:
    from redis.asyncio import Redis
    from redis.exceptions import NoPermissionError

    admin = Redis.from_url(valkey.url, decode_responses=True)
    try:
        # docs/fleet.md's line for a tenant: its own user, its own key and channel prefix.
        await admin.execute_command(
            "ACL", "SETUSER", "tenant-a", "on", ">secret", "~tenant-a:*", "&tenant-a:*",
            "+@all", "-@dangerous",
        )  # fmt: skip
        await admin.set("tenant-b:secret", "theirs")
        url = f"redis://tenant-a:secret@127.0.0.1:{valkey.port}/0"
        server = Counting()
        server.set(URI, "v1", ttl_ms=60_000)
        async with workers(server, url, 2, namespace="tenant-a") as caches:
            await eventually(lambda: all(c.status(URI).text == "v1" for c in caches))
            assert sum(c.describe()["fleet"]["leading"] for c in caches) == 1
            before = server.server_reads
            server.set(URI, "v2", notify=True, ttl_ms=60_000)
            await read_everywhere(caches, "v2")
            assert server.server_reads - before == 1
            assert sum(c.describe()["fleet"]["counters"]["fills"] for c in caches) >= 1
        tenant = Redis.from_url(url, decode_responses=True)
        try:
            with pytest.raises(NoPermissionError):
                await tenant.get("tenant-b:secret")
            with pytest.raises(NoPermissionError):
                await tenant.publish("tenant-b:x:changes", "{}")
        finally:
            await tenant.aclose()
    finally:
        await admin.aclose()


async def test_a_notice_to_a_follower_stream_that_has_ended_breaks_nothing(valkey: Valkey) -> None:
    # Seen on a loaded machine: the store went down, a follower stream ended on the
    # "lost" notice, and while its StreamLost waited to be taken, the next "lost"
    # (the registry tick failing too) was sent to its closed notices and the
    # BrokenResourceError crashed the worker.
    async with a_follower(valkey, lease=2.0) as (follower, fleet):
        stream = fleet.followers.follow("extra", frozenset({URI}), False)
        try:
            with anyio.fail_after(10):
                assert isinstance(await anext(stream), ListenStarted)
                assert isinstance(await anext(stream), ListenAcknowledged)
                fleet.followers.notify("lost", "the fleet channel broke")
                event = await anext(stream)
            assert isinstance(event, StreamLost)
            assert event.detail == "the fleet channel broke"
            # The stream waits at its StreamLost: a later notice must not break.
            fleet.followers.notify("lost", "the store did not answer")
            fleet.followers.notify("tick", None)
        finally:
            await stream.aclose()
        # The worker lives on: its own stream, ended by the same notices, comes back.
        await eventually(lambda: follower.stream_status == "live")


async def test_a_follower_stream_opened_while_the_store_is_down_ends_with_its_reason(
    valkey: Valkey,
) -> None:
    async with a_follower(valkey) as (_follower, fleet):
        valkey.stop()
        stream = fleet.followers.follow("extra", frozenset({URI}), False)
        try:
            with anyio.fail_after(10):
                assert isinstance(await anext(stream), ListenStarted)
                event = await anext(stream)
            assert isinstance(event, StreamLost)
            assert event.detail.startswith("the fleet store failed")
            fleet.followers.notify("lost", "the store did not answer")
        finally:
            await stream.aclose()
            valkey.start()
