"""Every row of issue 25's table in one run: each cost beside its floor, as a ratio.

    python benchmarks/costs.py [--rounds 3] [--selected 10000] [--fleet] [--json PATH]

One process, one event loop, against the in-memory reference server (`ReferenceServer`
behind `InMemorySource`). Every figure is CPU time (``time.process_time``), the variants
of a row interleaved round by round, the median of ``--rounds`` rounds, and the
machine's load average is printed beside it (2 shared cores: wall-clock is noise):

- **fresh hit** ``await cache.read(uri)`` against an awaited dict lookup: for a covered
  selected URI the subscription vouches for (no time bound: the hit reads no clock) and
  for a URI within its ``ttlMs`` (the hit compares against the clock); the traced hit
  (``trace_hits=True``, an SDK tracer) against the untraced one with the same SDK.
- **status** ``cache.status(uri)`` of a fresh URI against a dict lookup, for
  `FreshCache` and for `SyncFreshCache` (which answered every status on its loop thread).
- **bookkeeping per cached URI**: tracemalloc bytes per entry of the engine with its
  `MemoryStore` (100k entries, 32-byte texts), beside a ``cachetools.TTLCache``
  holding the same strings; the strings themselves are in neither figure. The reply
  objects (a contents tuple and its item, 128 B) are made inside the count, as the
  previous rounds measured; the row "beyond the reply" makes them before it, as the
  strings are, and counts only what the cache adds to keep and judge them.
- **re-reads end to end**: ``resources/updated`` for every one of N selected URIs,
  published on the live stream, until every re-read landed; against the engine alone
  doing the same (``handle`` + ``begin_read`` + ``finish_read``).
- **notifications end to end at N selected**: ``resources/updated`` for URIs never
  read, through the stream into the engine; against ``engine.handle`` of the same events.
- **fleet** (``--fleet``, needs Valkey and the SDK fixture server): ``resources/updated``
  on the server until every one of ``--workers`` fleet worker processes no longer
  hands out the old text (median and p99), beside a raw Valkey publish reaching as many
  plain redis-py subscriber processes, on the same Valkey; and the fan-out hop alone (an
  invalidation published on the fleet channel until every worker is not fresh). Both
  populations of processes stay up; blocks of samples interleaved over
  ``--fleet-rounds`` rounds, each round's p99 ratio kept (the spread on 2 shared cores).

Writes ``benchmarks/results/costs.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
from cachetools import TTLCache

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from freshcache import FreshCache, MemoryStore, Policy  # noqa: E402
from freshcache._core import (  # noqa: E402
    FreshnessEngine,
    ListenAcknowledged,
    ListenStarted,
    ReadReply,
    ReadResource,
    ResourceContents,
    ResourceUpdated,
)
from freshcache.acceptance import InMemorySource, ReferenceServer  # noqa: E402
from freshcache.sync import SyncFreshCache  # noqa: E402

HOUR_MS = 3_600_000
URI = "guide://shipping/approval"
TEXT = "text of a resource, 32 bytes..."


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def uri_of(n: int) -> str:
    return f"guide://costs/{n:07d}"


# ---------------------------------------------------------------------- per-call rows


def cpu_ns(fn: Callable[[], object], loops: int) -> float:
    started = time.process_time()
    for _ in range(loops):
        fn()
    return (time.process_time() - started) / loops * 1e9


async def cpu_ns_async(fn: Callable[[], Awaitable[object]], loops: int) -> float:
    started = time.process_time()
    for _ in range(loops):
        await fn()
    return (time.process_time() - started) / loops * 1e9


async def interleaved(
    variants: dict[str, Callable[[], Any]], rounds: int, loops: int
) -> dict[str, float]:
    """Median ns per call of each variant, one repeat of each in turn per round."""
    seen: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            probe = fn()
            if asyncio.iscoroutine(probe):
                await probe
                seen[name].append(await cpu_ns_async(fn, loops))
            else:
                seen[name].append(cpu_ns(fn, loops))
    return {name: statistics.median(values) for name, values in seen.items()}


def sdk_providers() -> dict[str, Any] | None:
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )
    except ImportError:  # the SDK is a test extra
        return None

    class Discard(SpanExporter):
        def export(self, spans: object) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(Discard()))
    return {"tracer_provider": tracer_provider, "meter_provider": MeterProvider()}


async def live_and_fresh(cache: FreshCache, uris: list[str]) -> None:
    deadline = time.monotonic() + 120
    while (
        cache.stream_status != "live"
        or cache.pending_reads
        or any(cache.status(u).state != "fresh" for u in uris)
    ):
        if time.monotonic() > deadline:
            raise TimeoutError(f"not fresh: {[(u, cache.status(u).reason) for u in uris][:3]}")
        await anyio.sleep(0.002)


async def hit_rows(rounds: int, loops: int) -> dict[str, Any]:
    plain = {URI: "v1"}

    async def dict_get(uri: str) -> str:
        return plain[uri]

    def awaited_dict() -> Awaitable[str]:  # called as the reads are: through a lambda
        return dict_get(URI)

    server = ReferenceServer()
    server.set(URI, "v1", ttl_ms=HOUR_MS)
    sdk = sdk_providers()
    async with AsyncExitStack() as stack:
        backed = await stack.enter_async_context(
            FreshCache(
                InMemorySource(server), select=[URI], policy=Policy(subscription_backed=True)
            )
        )
        timed = await stack.enter_async_context(FreshCache(InMemorySource(server), listen=False))
        await live_and_fresh(backed, [URI])
        assert (await timed.read(URI)).state == "fresh"
        variants: dict[str, Callable[[], Any]] = {
            "awaited_dict": awaited_dict,
            "hit_subscription_backed": lambda: backed.read(URI),
            "hit_within_ttl": lambda: timed.read(URI),
        }
        if sdk is not None:
            for name, options in (
                ("hit_sdk_untraced", sdk),
                ("hit_sdk_traced", {**sdk, "trace_hits": True}),
            ):
                cache = await stack.enter_async_context(
                    FreshCache(InMemorySource(server), listen=False, **options)
                )
                assert (await cache.read(URI)).state == "fresh"
                variants[name] = lambda c=cache: c.read(URI)
        reads = server.reads
        ns = await interleaved(variants, rounds, loops)
        assert server.reads == reads, "the hit rows must measure hits only"
    return ns


async def status_rows(rounds: int, loops: int) -> dict[str, Any]:
    plain = {URI: "v1"}
    server = ReferenceServer()
    server.set(URI, "v1", ttl_ms=HOUR_MS)
    with SyncFreshCache(InMemorySource(server), listen=False) as sync_cache:
        assert sync_cache.read(URI).state == "fresh"
        async with FreshCache(InMemorySource(server), listen=False) as cache:
            assert (await cache.read(URI)).state == "fresh"
            return await interleaved(
                {
                    "dict_lookup": lambda: plain.get(URI),
                    "status": lambda: cache.status(URI),
                    "sync_status": lambda: sync_cache.status(URI),
                },
                rounds,
                loops,
            )


# ---------------------------------------------------------------------- bookkeeping


def bytes_per_entry(entries: int) -> dict[str, float]:
    data = [
        (f"guide://bench/{n:08d}", f"text of resource {n:08d} ......"[:32]) for n in range(entries)
    ]
    replies: list[ReadReply] = []

    def fill_engine() -> object:
        engine = FreshnessEngine(store=MemoryStore(max_entries=entries + 1, max_bytes=1 << 40))
        for uri, text in data:
            ticket = engine.begin_read(uri, None)
            reply = ReadReply((ResourceContents(uri, text=text),), ttl_ms=HOUR_MS)
            engine.finish_read(ticket, reply)
        assert len(engine.hits) == entries
        return engine

    def fill_engine_from(made: list[ReadReply]) -> object:
        engine = FreshnessEngine(store=MemoryStore(max_entries=entries + 1, max_bytes=1 << 40))
        for (uri, _), reply in zip(data, made, strict=True):
            ticket = engine.begin_read(uri, None)
            engine.finish_read(ticket, reply)
        assert len(engine.hits) == entries
        return engine

    def fill_ttlcache() -> object:
        cache: TTLCache[str, str] = TTLCache(maxsize=entries + 1, ttl=3600)
        for uri, text in data:
            cache[uri] = text
        return cache

    def fill_beyond_reply() -> object:
        # The replies a source handed over (their contents tuple and item) are made
        # before the count starts, as the strings are: what is left is what the
        # cache adds per URI to keep and judge them.
        return fill_engine_from(replies)

    out = {}
    for name, fill in (
        ("ttlcache", fill_ttlcache),
        ("freshcache", fill_engine),
        ("beyond_reply", fill_beyond_reply),
    ):
        if name == "beyond_reply":
            replies[:] = [
                ReadReply((ResourceContents(uri, text=text),), ttl_ms=HOUR_MS) for uri, text in data
            ]
        gc.collect()
        objects = len(gc.get_objects())
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        held = fill()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        out[f"{name}_bytes"] = (after - before) / entries
        out[f"{name}_gc_objects"] = (len(gc.get_objects()) - objects) / entries
        del held
    return out


# ---------------------------------------------------------------------- pipelines


def acknowledged_engine(uris: list[str]) -> tuple[FreshnessEngine, str]:
    engine = FreshnessEngine(store=MemoryStore(max_entries=2 * len(uris) + 1000, max_bytes=1 << 40))
    engine.select(uris)
    sid = "listen-1"
    engine.handle(ListenStarted(sid, frozenset(uris), True))
    for decision in engine.handle(ListenAcknowledged(sid, frozenset(uris), True)):
        if isinstance(decision, ReadResource):
            ticket = engine.begin_read(decision.uri, None)
            engine.finish_read(ticket, reply_of(decision.uri))
    return engine, sid


def reply_of(uri: str) -> ReadReply:
    return ReadReply((ResourceContents(uri, text=TEXT, mime_type="text/plain"),), ttl_ms=HOUR_MS)


def engine_rereads(engine: FreshnessEngine, sid: str, uris: list[str]) -> float:
    """CPU seconds of the engine alone re-reading every URI after a notification.

    The replies are made before the clock starts: building one is the source's work
    (the reference server hands out one reply per unchanged resource), not the engine's.
    """
    replies = {uri: reply_of(uri) for uri in uris}
    started = time.process_time()
    for uri in uris:
        for decision in engine.handle(ResourceUpdated(uri, sid)):
            if isinstance(decision, ReadResource):
                ticket = engine.begin_read(decision.uri, None)
                engine.finish_read(ticket, replies[decision.uri])
    return time.process_time() - started


async def reread_floor(uris: list[str], tasks: int = 16) -> float:
    """CPU seconds of what one re-read minimally costs, for every URI: a turn of the
    event loop (its read's round trip) and an awaited dict lookup (its answer), on as
    many tasks as the cache has re-readers (``max_concurrent_reads``, 16)."""
    plain = dict.fromkeys(uris, TEXT)

    async def answer(uri: str) -> str:
        return plain[uri]

    async def reader(share: list[str]) -> None:
        for uri in share:
            await asyncio.sleep(0)
            await answer(uri)

    started = time.process_time()
    await asyncio.gather(*(reader(uris[n::tasks]) for n in range(tasks)))
    return time.process_time() - started


def engine_notifications(engine: FreshnessEngine, sid: str, events: list[str]) -> float:
    started = time.process_time()
    for uri in events:
        engine.handle(ResourceUpdated(uri, sid))
    return time.process_time() - started


async def published(
    cache: FreshCache, server: ReferenceServer, uris: list[str], *, raw: bool, rereads: bool
) -> float:
    """CPU seconds from publishing ``resources/updated`` for ``uris`` until the cache took
    them all in (and, with ``rereads``, every re-read landed)."""
    counters = cache.engine.counters
    target_reads = counters.server_reads + (len(uris) if rereads else 0)
    batch = 2_000  # the reference server's stream buffer holds 10,000
    base = counters.notifications
    started = time.process_time()
    for first in range(0, len(uris), batch):
        chunk = uris[first : first + batch]
        for uri in chunk:
            server.notify_updated(uri, raw=raw)
        while counters.notifications < base + first + len(chunk):
            await anyio.lowlevel.checkpoint()
    while rereads and (counters.server_reads < target_reads or cache.pending_reads):
        await anyio.lowlevel.checkpoint()
    took = time.process_time() - started
    if cache.stream_status != "live":
        raise RuntimeError("the stream was lost while publishing change events")
    return took


async def pipeline_rows(rounds: int, selected: int) -> dict[str, Any]:
    uris = [uri_of(n) for n in range(selected)]
    never_read = [f"guide://never-read/{n:07d}" for n in range(selected)]
    server = ReferenceServer()
    for uri in uris:
        server.set(uri, TEXT, ttl_ms=HOUR_MS, mime_type="text/plain")
    engine, sid = acknowledged_engine(uris)
    store = MemoryStore(max_entries=2 * selected + 1000, max_bytes=1 << 40)
    seen: dict[str, list[float]] = {
        "engine_rereads_per_s": [],
        "reread_floor_per_s": [],
        "rereads_per_s": [],
        "engine_notifications_per_s": [],
        "notifications_per_s": [],
    }
    async with FreshCache(
        InMemorySource(server), select=uris, store=store, read_timeout=600.0
    ) as cache:
        await live_and_fresh(cache, uris)
        for _ in range(rounds):
            gc.collect()
            seen["engine_rereads_per_s"].append(selected / engine_rereads(engine, sid, uris))
            gc.collect()
            seen["reread_floor_per_s"].append(selected / await reread_floor(uris))
            gc.collect()
            took = await published(cache, server, uris, raw=False, rereads=True)
            seen["rereads_per_s"].append(selected / took)
            assert all(cache.status(u).state == "fresh" for u in uris)
            gc.collect()
            seen["engine_notifications_per_s"].append(
                selected / engine_notifications(engine, sid, never_read)
            )
            gc.collect()
            took = await published(cache, server, never_read, raw=True, rereads=False)
            seen["notifications_per_s"].append(selected / took)
    return {name: statistics.median(values) for name, values in seen.items()}


# ---------------------------------------------------------------------- fleet

SUBSCRIBER = """
import asyncio, sys, time
import redis.asyncio as redis

async def main(url, channel):
    client = redis.from_url(url)
    pubsub = client.pubsub()
    await pubsub.subscribe(channel)
    print("ready", flush=True)
    while True:
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
        if message is not None and message["type"] == "message":
            print(message["data"].decode(), time.time(), flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


RELAY = """
import asyncio, json, sys
import httpx
import redis.asyncio as redis

LISTEN = "subscriptions/listen"
VERSION = "2026-07-28"

async def main(mcp_url, valkey_url, channel, uri):
    client = redis.from_url(valkey_url)
    await client.ping()  # a warm connection before the first sample
    meta = {"io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientInfo": {"name": "sse-floor", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {}}
    body = {"jsonrpc": "2.0", "id": 1, "method": LISTEN,
            "params": {"notifications": {"resourceSubscriptions": [uri]}, "_meta": meta}}
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": VERSION,
               "mcp-method": LISTEN}
    relayed = 0
    async with httpx.AsyncClient(timeout=None, trust_env=False) as http:
        async with http.stream("POST", mcp_url, json=body, headers=headers) as response:
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                message = json.loads(line[5:])
                if message.get("method") == "notifications/resources/updated":
                    relayed += 1
                    await client.publish(channel, f"r{relayed}")
                elif relayed == 0:
                    print("ready", flush=True)  # the listen's acknowledgment

asyncio.run(main(*sys.argv[1:5]))
"""
"""The server -> client floor's relay: a plain SSE client of the MCP server's
``subscriptions/listen`` (httpx, no MCP library) that answers each
``notifications/resources/updated`` with one raw ``PUBLISH`` to the floor's subscribers.
What a fleet's listener cannot avoid (the server's notification, its SSE frame read, one
publish), with nothing of freshcache's."""

FLOOR_URI = "bench://sse-floor"
"""The relay's own resource: the fleet's workers select ``bench://doc`` only, so its
notifications reach the relay and no fleet listener (the server filters by URI)."""


def p50_p99(seconds: list[float]) -> tuple[float, float]:
    """Median and nearest-rank p99 (of 1,000 samples: the 990th), in milliseconds."""
    ordered = sorted(seconds)
    return (
        statistics.median(ordered) * 1e3,
        ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)] * 1e3,
    )


class RawSubscribers:
    """The floor: ``workers`` plain redis-py subscriber processes on one channel."""

    def __init__(self, valkey_url: str, workers: int) -> None:
        import queue
        import subprocess
        import threading

        import redis

        self.channel = "costs-floor"
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-c", SUBSCRIBER, valkey_url, self.channel],
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(workers)
        ]
        self.lines: queue.Queue[tuple[int, str]] = queue.Queue()
        for n, proc in enumerate(self.procs):
            threading.Thread(target=self._pump, args=(n, proc), daemon=True).start()
        ready = 0
        while ready < workers:
            ready += self.lines.get(timeout=120)[1].startswith("ready")
        self.client = redis.Redis.from_url(valkey_url)
        self.client.ping()  # a warm connection before the first sample
        self.sent = 0
        self.relays = 0

    def _pump(self, n: int, proc: Any) -> None:
        for line in proc.stdout:
            self.lines.put((n, line))

    def sample(self) -> float:
        """Publish -> received by every subscriber process (seconds)."""
        self.sent += 1
        tag = str(self.sent)
        sent = time.time()
        self.client.publish(self.channel, tag)
        return self._last_heard(tag) - sent

    def relayed(self, sdk: Any, http: Any) -> float:
        """``resources/updated`` on the MCP server (its control endpoint sets `FLOOR_URI`
        and notifies, as the fleet's end-to-end sample does) -> received by every
        subscriber process through the plain SSE relay (`RELAY`), in seconds."""
        self.relays += 1
        tag = f"r{self.relays}"
        sent = time.time()
        http.post(
            sdk.control_url, json={"op": "set", "uri": FLOOR_URI, "text": tag, "notify": True}
        ).raise_for_status()
        return self._last_heard(tag) - sent

    def _last_heard(self, tag: str) -> float:
        """When the last subscriber process printed ``tag`` (its own clock reading)."""
        got: dict[int, float] = {}
        while len(got) < len(self.procs):
            n, line = self.lines.get(timeout=30)
            seen, at = line.split()
            if seen == tag:
                got[n] = float(at)
        return max(got.values())

    def close(self) -> None:
        self.client.close()
        for proc in self.procs:
            proc.kill()
            proc.wait()


class FleetCrew:
    """``workers`` fleet worker processes (`benchmarks/fleet.py`'s) on the fixture server.

    Two samples: ``end_to_end``, ``resources/updated`` on the server (its control
    endpoint sets and notifies) until every worker stopped handing out the old text; and
    ``channel``, an invalidation published on the fleet channel by this process (the
    store's own script, as a worker publishes) until every worker is not fresh: the
    fan-out hop alone, what the raw floor measures, without the server -> listener hop."""

    def __init__(self, valkey_url: str, workers: int) -> None:
        import queue

        from benchmarks.fleet import Trigger, Worker, start_workers
        from freshcache import HttpSource
        from freshcache._fleet._store import SharedStore
        from freshcache.fleet import Fleet
        from tests.conftest import start_sdk_server

        self.sdk = start_sdk_server()
        self.trigger = Trigger(self.sdk)
        self.arrived: queue.SimpleQueue[None] = queue.SimpleQueue()
        self.crew: list[Worker] = []
        self.crew = start_workers(workers, self.sdk.url, valkey_url, self.arrived, self.trigger)
        self.version = 0
        self.loop = asyncio.new_event_loop()
        fleet = Fleet(valkey_url, namespace="bench")
        import redis.asyncio as aredis

        self.redis = aredis.Redis.from_url(valkey_url)
        server = HttpSource(self.sdk.url).identity
        self.store = SharedStore(self.redis, "bench", server, fleet.binding_key)
        self.trigger.set("v0", notify=False)  # a warm connection before the first sample
        self.loop.run_until_complete(self.redis.ping())

    def end_to_end(self) -> float:
        from benchmarks.fleet import change

        self.version += 1
        took, _ = change(self.trigger, self.crew, self.arrived, self.version, read=False)
        return took

    def read_all(self) -> None:
        """Every worker reads until it hands out the current text again (after a sample:
        a follower does not re-read a change it heard on the channel, its next read
        does). Not part of a sample's time; its CPU is counted apart (``reads``)."""
        from benchmarks.fleet import read_all

        read_all(self.crew, self.arrived, f"v{self.version}")

    def channel(self) -> float:
        from benchmarks.fleet import URI as FLEET_URI
        from benchmarks.fleet import wait

        marks = [len(w.seen) for w in self.crew]
        text = f"v{self.version}"

        def away(w: Any, m: int) -> list[float]:
            return [x["at"] for x in w.seen[m:] if "state" in x and x["state"] != "fresh"]

        sent = time.time()
        self.loop.run_until_complete(
            self.store.invalidate([FLEET_URI], "costs", "updated", int(sent * 1000))
        )
        wait(
            lambda: all(away(w, m) for w, m in zip(self.crew, marks, strict=True)),
            f"every worker not fresh at {text}",
            self.crew,
            self.arrived,
        )
        return max(away(w, m)[0] for w, m in zip(self.crew, marks, strict=True)) - sent

    def close(self) -> None:
        from tests.conftest import stop_process

        self.trigger.close()
        self.loop.run_until_complete(self.redis.aclose())
        self.loop.close()
        for w in self.crew:
            if w.proc.poll() is None:
                w.proc.kill()
            w.proc.wait()
        stop_process(self.sdk.process)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process used so far (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fleet_rows(workers: int, samples: int, rounds: int) -> dict[str, Any]:
    """The raw Valkey pub/sub floor and the fleet on one Valkey: both populations of
    processes alive throughout, the four kinds of sample interleaved in blocks of 50
    (a busy spell weighs on all of them), ``samples`` of each over ``rounds`` rounds;
    every round's p99 ratio is kept, to show the spread on a shared machine. Also the
    CPU each group of processes used per sample of each kind (``cpu_ms_per_sample``):
    where the time goes when 10+ processes share 2 cores.

    The kinds: ``floor``, a raw publish -> the plain subscriber processes; ``sse_floor``,
    the same server's ``resources/updated`` read by a plain SSE client (`RELAY`) that
    publishes it raw to the same subscribers (the floor of the end-to-end row: the
    server -> client hop it cannot avoid, nothing of freshcache's); ``end_to_end``, the
    server's ``resources/updated`` -> every fleet worker not fresh; ``channel``, an
    invalidation on the fleet channel -> every worker not fresh. After each fleet
    sample every worker reads the resource until it is fresh again (a follower does not
    re-read a change it heard on the channel: its next read does); that read's CPU is
    ``read_cpu_ms_per_sample``, apart from the change's."""
    import subprocess

    from tests.valkey_support import Valkey

    valkey = Valkey()
    valkey.start()
    floor_subs: RawSubscribers | None = None
    crew: FleetCrew | None = None
    relay: subprocess.Popen[str] | None = None
    try:
        floor_subs = RawSubscribers(valkey.url, workers)
        crew = FleetCrew(valkey.url, workers)
        relay = subprocess.Popen(
            [sys.executable, "-c", RELAY, crew.sdk.url, valkey.url, floor_subs.channel, FLOOR_URI],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert relay.stdout is not None
        if relay.stdout.readline().strip() != "ready":
            raise RuntimeError("the SSE floor's relay did not start")
        kinds: dict[str, Callable[[], float]] = {
            "floor": floor_subs.sample,
            "sse_floor": lambda: floor_subs.relayed(crew.sdk, crew.trigger.client),
            "end_to_end": crew.end_to_end,
            "channel": crew.channel,
        }
        # After a fleet sample every worker reads the resource again (the next sample
        # needs it fresh): CPU counted apart from the change's (``reads``).
        after: dict[str, Callable[[], None]] = {
            "end_to_end": crew.read_all,
            "channel": crew.read_all,
        }
        groups = {
            "floor_subscribers": [p.pid for p in floor_subs.procs],
            "sse_relay": [relay.pid],
            "fleet_workers": [w.proc.pid for w in crew.crew],
            "valkey": [valkey.process.pid] if valkey.process is not None else [],
            "mcp_server": [crew.sdk.process.pid],
            "benchmark": [os.getpid()],
        }
        cpu = {k: dict.fromkeys(groups, 0.0) for k in kinds}
        read_cpu = {k: dict.fromkeys(groups, 0.0) for k in after}

        def used_now() -> dict[str, float]:
            return {g: sum(map(cpu_seconds, pids)) for g, pids in groups.items()}

        per_round = max(1, samples // rounds)
        block = min(50, per_round)
        taken: dict[str, list[list[float]]] = {k: [] for k in kinds}
        for r in range(rounds):
            for seen in taken.values():
                seen.append([])
            order = list(kinds) if r % 2 == 0 else list(reversed(kinds))
            for _ in range(0, per_round, block):
                for kind in order:
                    used = used_now()
                    for _ in range(block):
                        taken[kind][-1].append(kinds[kind]())
                        if kind in after:
                            time.sleep(0.005)  # what the change set off lands first
                            mid = used_now()
                            after[kind]()
                            for g, spent in used_now().items():
                                read_cpu[kind][g] += spent - mid[g]
                                cpu[kind][g] -= spent - mid[g]
                        time.sleep(0.005)  # the same pause after every kind of sample
                    for g, spent in used_now().items():
                        cpu[kind][g] += spent - used[g]
    finally:
        if relay is not None:
            relay.kill()
            relay.wait()
        if crew is not None:
            crew.close()
        if floor_subs is not None:
            floor_subs.close()
        valkey.stop()
    pooled = {k: p50_p99([x for one in v for x in one]) for k, v in taken.items()}
    spread = {
        f"{k}_p99_ratio_by_round": [
            round(p50_p99(one)[1] / p50_p99(taken["floor"][i])[1], 2) for i, one in enumerate(v)
        ]
        for k, v in taken.items()
        if k != "floor"
    }
    # The end-to-end row against the floor that has the same server -> client hop.
    spread["end_to_end_vs_sse_floor_p99_ratio_by_round"] = [
        round(p50_p99(one)[1] / p50_p99(taken["sse_floor"][i])[1], 2)
        for i, one in enumerate(taken["end_to_end"])
    ]
    return {
        "floor_p50_ms": pooled["floor"][0],
        "floor_p99_ms": pooled["floor"][1],
        "fleet_p50_ms": pooled["end_to_end"][0],
        "fleet_p99_ms": pooled["end_to_end"][1],
        "channel_p50_ms": pooled["channel"][0],
        "channel_p99_ms": pooled["channel"][1],
        "sse_floor_p50_ms": pooled["sse_floor"][0],
        "sse_floor_p99_ms": pooled["sse_floor"][1],
        "samples": sum(len(one) for one in taken["end_to_end"]),
        "rounds": rounds,
        **spread,
        "cpu_ms_per_sample": {
            k: {g: round(used / max(1, sum(map(len, taken[k]))) * 1e3, 2) for g, used in v.items()}
            for k, v in cpu.items()
        },
        "read_cpu_ms_per_sample": {
            k: {g: round(used / max(1, sum(map(len, taken[k]))) * 1e3, 2) for g, used in v.items()}
            for k, v in read_cpu.items()
        },
    }


# ---------------------------------------------------------------------- report


def row(
    what: str,
    floor_name: str,
    floor: float,
    name: str,
    value: float,
    unit: str,
    higher_is_better: bool = False,
) -> dict[str, Any]:
    ratio = floor / value if higher_is_better else value / floor
    return {
        "what": what,
        "floor": floor_name,
        "floor_value": round(floor, 1),
        "freshcache": name,
        "value": round(value, 1),
        "unit": unit,
        "ratio_to_floor": round(ratio, 3),
    }


async def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    hits = await hit_rows(args.rounds, args.loops)
    for name in ("hit_subscription_backed", "hit_within_ttl"):
        rows.append(
            row(
                f"fresh hit ({name[4:].replace('_', ' ')})",
                "awaited dict",
                hits["awaited_dict"],
                name,
                hits[name],
                "ns",
            )
        )
    if "hit_sdk_traced" in hits:
        rows.append(
            row(
                "traced hit vs untraced (SDK installed)",
                "untraced hit",
                hits["hit_sdk_untraced"],
                "trace_hits=True",
                hits["hit_sdk_traced"],
                "ns",
            )
        )
        rows.append(
            row(
                "untraced hit, SDK installed (hits counted)",
                "awaited dict",
                hits["awaited_dict"],
                "hit_sdk_untraced",
                hits["hit_sdk_untraced"],
                "ns",
            )
        )
    status = await status_rows(args.rounds, args.loops)
    rows.append(
        row(
            "cache.status(uri), fresh",
            "dict lookup",
            status["dict_lookup"],
            "FreshCache.status",
            status["status"],
            "ns",
        )
    )
    rows.append(
        row(
            "sync cache.status(uri), fresh",
            "dict lookup",
            status["dict_lookup"],
            "SyncFreshCache.status",
            status["sync_status"],
            "ns",
        )
    )
    memory = bytes_per_entry(args.entries)
    rows.append(
        row(
            "bookkeeping per cached URI",
            "cachetools.TTLCache",
            memory["ttlcache_bytes"],
            "engine + MemoryStore",
            memory["freshcache_bytes"],
            "B",
        )
    )
    rows[-1]["gc_objects_per_uri"] = round(memory["freshcache_gc_objects"], 2)
    rows[-1]["ttlcache_gc_objects_per_uri"] = round(memory["ttlcache_gc_objects"], 2)
    rows.append(
        row(
            "bookkeeping per cached URI, beyond the reply",
            "cachetools.TTLCache",
            memory["ttlcache_bytes"],
            "engine + MemoryStore",
            memory["beyond_reply_bytes"],
            "B",
        )
    )
    rows[-1]["gc_objects_per_uri"] = round(memory["beyond_reply_gc_objects"], 2)
    pipes = await pipeline_rows(args.rounds, args.selected)
    rows.append(
        row(
            f"re-reads end to end ({args.selected} selected)",
            "engine alone",
            pipes["engine_rereads_per_s"],
            "FreshCache",
            pipes["rereads_per_s"],
            "/s",
            higher_is_better=True,
        )
    )
    rows.append(
        row(
            "re-reads end to end vs their floor",
            "a loop turn + an awaited dict",
            pipes["reread_floor_per_s"],
            "FreshCache",
            pipes["rereads_per_s"],
            "/s",
            higher_is_better=True,
        )
    )
    rows.append(
        row(
            f"notifications end to end ({args.selected} selected)",
            "engine alone",
            pipes["engine_notifications_per_s"],
            "FreshCache",
            pipes["notifications_per_s"],
            "/s",
            higher_is_better=True,
        )
    )
    if args.fleet:
        fleet = fleet_rows(args.workers, args.fleet_samples, args.fleet_rounds)
        for which, what, name in (
            ("p50", "fleet updated -> {n} workers not fresh, p50", "fleet"),
            ("p99", "fleet updated -> {n} workers not fresh, p99", "fleet"),
            ("p50", "fleet channel -> {n} workers not fresh, p50", "channel"),
            ("p99", "fleet channel -> {n} workers not fresh, p99", "channel"),
        ):
            rows.append(
                row(
                    what.format(n=args.workers),
                    "raw Valkey pub/sub",
                    fleet[f"floor_{which}_ms"],
                    "fleet=",
                    fleet[f"{name}_{which}_ms"],
                    "ms",
                )
            )
            rows[-1]["samples"] = fleet["samples"]
            if which == "p99":
                key = "end_to_end" if name == "fleet" else "channel"
                rows[-1]["p99_ratio_by_round"] = fleet[f"{key}_p99_ratio_by_round"]
        # Beside them, not instead: the end-to-end row against the floor that has the
        # same server -> client hop (a plain SSE client publishing raw).
        rows.append(
            row(
                f"fleet updated -> {args.workers} workers not fresh, p99, vs the SSE floor",
                "server updated -> plain SSE client -> raw pub/sub",
                fleet["sse_floor_p99_ms"],
                "fleet=",
                fleet["fleet_p99_ms"],
                "ms",
            )
        )
        rows[-1]["samples"] = fleet["samples"]
        rows[-1]["p99_ratio_by_round"] = fleet["end_to_end_vs_sse_floor_p99_ratio_by_round"]
    # This VM's speed varies (an awaited dict took 101 ns on the machine issue 25 was
    # filed on, 376 ns here): every cost also in awaited dicts of the same run.
    for r in rows:
        if r["unit"] == "ns":
            r["in_awaited_dicts"] = round(r["value"] / hits["awaited_dict"], 2)
        elif r["unit"] == "/s":
            r["in_awaited_dicts"] = round(1e9 / r["value"] / hits["awaited_dict"], 1)
            r["floor_in_awaited_dicts"] = round(1e9 / r["floor_value"] / hits["awaited_dict"], 1)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loops", type=int, default=100_000)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--selected", type=int, default=10_000)
    parser.add_argument("--label", default="")
    parser.add_argument("--fleet", action="store_true", help="also the fleet rows (Valkey)")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument(
        "--fleet-samples", type=int, default=1000, help="samples of each kind (fleet)"
    )
    parser.add_argument("--fleet-rounds", type=int, default=5)
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results" / "costs.json"
    )
    parser.add_argument(
        "--carry-fleet",
        type=Path,
        help="without --fleet: copy the fleet rows of this earlier report, each marked "
        "with the run it comes from (its ratios were taken in that run)",
    )
    args = parser.parse_args()
    load_before = load()
    rows = asyncio.run(measure(args))
    load_after = load()
    if args.carry_fleet is not None and not args.fleet:
        earlier = json.loads(args.carry_fleet.read_text())
        for carried in earlier["rows"]:
            if carried["what"].startswith("fleet "):
                carried.setdefault(
                    "carried_from",
                    f"{earlier.get('label', '')}, load average {earlier['load_average']['after']}",
                )
                rows.append(carried)
    print(
        f"load average before {load_before}, after {load_after}; CPU time, median of "
        f"{args.rounds} interleaved rounds; ratio = cost / floor (higher = slower)"
    )
    print(f"{'what':<44} {'floor':>12} {'freshcache':>12} {'ratio':>7}  in awaited dicts")
    for r in rows:
        dicts = f"{r['in_awaited_dicts']:>8}" if "in_awaited_dicts" in r else ""
        if "floor_in_awaited_dicts" in r:
            dicts = f"{r['floor_in_awaited_dicts']:>6} -> {r['in_awaited_dicts']}"
        print(
            f"{r['what']:<44} {r['floor_value']:>10}{r['unit']:>2} "
            f"{r['value']:>10}{r['unit']:>2} {r['ratio_to_floor']:>6.2f}x  {dicts}"
        )
    report = {
        "benchmark": "costs",
        "label": args.label,
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "load_average": {"before": load_before, "after": load_after},
        "rounds": args.rounds,
        "rows": rows,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.json}")


if __name__ == "__main__":
    main()
