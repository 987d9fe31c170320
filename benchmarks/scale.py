"""How freshcache's costs grow with the selection, and what its bookkeeping holds.

    python benchmarks/scale.py [--quick] [--sizes 1000,8000,...] [--budget SECONDS] [--json PATH]

Everything runs against the in-memory reference server (`ReferenceServer` behind
`InMemorySource`) through the public API, each part in its own subprocess so that one
part's garbage does not weigh on the next and memory figures start clean:

- **scale, per selected-set size N** (1k, 8k, 10k, 100k by default): a
  ``FreshCache(select=N URIs)`` is entered and timed until the stream is live and every
  selected URI is fresh (per URI: entering + acknowledgment handling + the reads); the
  acknowledgment's own handling is timed apart (``cache.engine.handle`` of the ack);
  then ``resources/updated`` for one selected URI is published on the server and timed
  until the engine counts the invalidation (median of many, one at a time), and a
  burst of ``--burst`` notifications for distinct selected URIs is published at once
  and timed until every one is invalidated (heard per second) and until every re-read
  landed (settled per second): the throughput, not one notification's latency; then
  ``select(selected + [one more])`` and an abrupt stream drop are timed until every
  selected URI is fresh again, counting the server reads each took and the most re-reads
  seen under way at once. Growth is each per-URI (or per-notification) figure divided by
  the same figure at the smallest size.
- **hits**: the sync fresh hit (``SyncFreshCache.read``) against a
  ``threading.Lock``-guarded dict lookup, and the private-principal hit (``read(uri,
  principal="alice")`` and a cache built with ``principal="alice"``) against the default
  hit and an awaited dict lookup. Best of R repeats, as in ``hit_path.py``, taken
  round by round (one repeat of each variant in turn) so that a busy machine weighs on
  all of them alike.
- **bookkeeping**: ``MemoryStore(max_entries=1000, max_bytes=1 MiB)``, 100,000 reads of
  distinct URIs, then 100,000 ``resources/updated`` for URIs never read (published to the
  live stream whatever its filter); RSS growth and ``cache.engine.tracked_uris`` after
  each half. The server's own copies are made before the baseline is taken.

Each subprocess has a time budget (``--budget``, 120 s; three times that for the
bookkeeping part); a part that runs over it is
printed as ``> budget`` with whatever it finished before. Not a pass/fail test: the
figures go in docs/speed.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

from freshcache import BackoffSettings, FreshCache, MemoryStore
from freshcache.acceptance import InMemorySource, ReferenceServer
from freshcache.sync import SyncFreshCache

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.hit_path import cpu_model, per_call_async, per_call_sync  # noqa: E402

HOUR_MS = 3_600_000
HIT_URI = "guide://shipping/approval"
# A re-listen after the drop waits base/2..base: keep it small beside N re-reads.
QUICK_RELISTEN = BackoffSettings(base=0.002, quick_death=0.0)


def uri_of(n: int) -> str:
    return f"guide://scale/{n:07d}"


def emit(part: str, **figures: Any) -> None:
    """One finished part, as a JSON line the parent collects (even if a later part hangs)."""
    print(json.dumps({"part": part, **figures}), flush=True)


# ---------------------------------------------------------------------- scale (child)


class AckTimer:
    """Wraps ``cache.engine.handle`` to time the handling of acknowledgments."""

    def __init__(self, cache: FreshCache) -> None:
        self.seconds: list[float] = []
        handle = cache.engine.handle

        def timed(event: Any) -> Any:
            if type(event).__name__ != "ListenAcknowledged":
                return handle(event)
            started = time.perf_counter()
            try:
                return handle(event)
            finally:
                self.seconds.append(time.perf_counter() - started)

        cache.engine.handle = timed  # type: ignore[method-assign]


async def settle(cache: FreshCache, uris: list[str], acks: int, peak: list[int]) -> float:
    """Wait until ``acks`` acknowledgments were handled, no read is under way and every
    URI in ``uris`` is fresh. Returns the seconds spent checking freshness (the caller
    subtracts them); notes the most reads seen under way at once in ``peak``."""
    checking = 0.0
    while True:
        await anyio.sleep(0.001)
        pending = cache.pending_reads
        peak[0] = max(peak[0], pending)
        if pending or cache.engine.counters.acknowledgments < acks:
            continue
        if cache.stream_status != "live":
            continue
        started = time.perf_counter()
        stale = next((u for u in uris if cache.status(u).state != "fresh"), None)
        checking += time.perf_counter() - started
        if stale is None:
            return checking


async def warm_up() -> None:
    """Enter and settle a small cache first, so that the timed one pays no first-use costs."""
    server = ReferenceServer()
    uris = [f"guide://warm-up/{n}" for n in range(200)]
    for uri in uris:
        server.set(uri, "v0", ttl_ms=HOUR_MS)
    async with FreshCache(InMemorySource(server), select=uris, read_timeout=60.0) as cache:
        await settle(cache, uris, 1, [0])
        await cache.read(uris[0])


async def scale_child(size: int, notifications: int, burst_size: int) -> None:
    await warm_up()
    gc.collect()
    server = ReferenceServer()
    uris = [uri_of(n) for n in range(size)]
    extra = uri_of(size)
    for uri in [*uris, extra]:
        server.set(uri, "v0", ttl_ms=HOUR_MS)
    # A store that holds every selected URI (the default keeps 10,000 entries).
    store = MemoryStore(max_entries=2 * size + 1_000, max_bytes=1 << 32)
    cache = FreshCache(
        InMemorySource(server),
        select=uris,
        store=store,
        read_timeout=600.0,
        backoff=QUICK_RELISTEN,
    )
    acks = AckTimer(cache)
    peak = [0]
    started = time.perf_counter()
    await cache.__aenter__()
    try:
        checking = await settle(cache, uris, 1, peak)
        entered = time.perf_counter() - started - checking
        emit(
            "enter",
            size=size,
            per_uri_us=entered / size * 1e6,
            total_s=entered,
            ack_ms=sum(acks.seconds) * 1e3,
            ack_us_per_uri=sum(acks.seconds) / size * 1e6,
            server_reads=server.reads,
            tracked_uris=cache.engine.tracked_uris,
        )

        counters = cache.engine.counters
        costs = []
        for n in range(min(notifications, size)):
            uri = uris[(n * 7919) % size]
            before = counters.invalidations
            started = time.perf_counter()
            server.notify_updated(uri)
            while counters.invalidations == before:
                await anyio.lowlevel.checkpoint()
            costs.append(time.perf_counter() - started)
            while cache.pending_reads:  # let its re-read land before the next one
                await anyio.lowlevel.checkpoint()
        emit(
            "notify",
            size=size,
            median_us=statistics.median(costs) * 1e6,
            mean_us=statistics.fmean(costs) * 1e6,
            count=len(costs),
        )

        # Throughput: a burst of notifications for distinct selected URIs, published
        # back to back (the stream buffer holds 10,000), timed until the engine has
        # invalidated every one (heard), then until every re-read landed (settled).
        burst = list(dict.fromkeys(uris[(n * 7919) % size] for n in range(min(burst_size, size))))
        before, before_reads = counters.invalidations, server.reads
        started = time.perf_counter()
        for uri in burst:
            server.notify_updated(uri)
        while counters.invalidations < before + len(burst):
            await anyio.lowlevel.checkpoint()
        heard = time.perf_counter() - started
        checking = await settle(cache, burst, counters.acknowledgments, [0])
        settled = time.perf_counter() - started - checking
        emit(
            "notify_burst",
            size=size,
            count=len(burst),
            heard_per_s=len(burst) / heard,
            settled_per_s=len(burst) / settled,
            server_reads=server.reads - before_reads,
        )

        before_reads, before_acks = server.reads, counters.acknowledgments
        peak = [0]
        started = time.perf_counter()
        cache.select([*uris, extra])
        checking = await settle(cache, [*uris, extra], before_acks + 1, peak)
        emit(
            "select_plus_one",
            size=size,
            seconds=time.perf_counter() - started - checking,
            server_reads=server.reads - before_reads,
        )

        everything = [*uris, extra]
        before_reads, before_acks = server.reads, counters.acknowledgments
        peak = [0]
        ack_count = len(acks.seconds)
        started = time.perf_counter()
        server.drop_streams()
        checking = await settle(cache, everything, before_acks + 1, peak)
        took = time.perf_counter() - started - checking
        emit(
            "reconnect",
            size=size,
            per_uri_us=took / len(everything) * 1e6,
            total_s=took,
            ack_ms=sum(acks.seconds[ack_count:]) * 1e3,
            server_reads=server.reads - before_reads,
            peak_reads_in_flight=peak[0],
        )
    finally:
        await cache.__aexit__(None, None, None)


# ---------------------------------------------------------------------- hits (child)


def loops_for(fn: Callable[[], object], seconds: float = 0.1, cap: int = 200_000) -> int:
    """Enough calls of ``fn`` for one repeat to last about ``seconds``."""
    started = time.perf_counter()
    for _ in range(50):
        fn()
    each = (time.perf_counter() - started) / 50
    return max(200, min(cap, int(seconds / max(each, 1e-9))))


def sync_hits(repeats: int) -> dict[str, float]:
    plain = {HIT_URI: "v1"}
    lock = threading.Lock()

    def locked_get() -> str:
        with lock:
            return plain[HIT_URI]

    server = ReferenceServer()
    server.set(HIT_URI, "v1", ttl_ms=HOUR_MS)
    with SyncFreshCache(InMemorySource(server), listen=False) as cache:
        assert cache.read(HIT_URI).state == "fresh"
        reads = server.reads

        def hit() -> object:
            return cache.read(HIT_URI)

        variants = {"locked_dict_ns": locked_get, "sync_hit_ns": hit}
        loops = {name: loops_for(fn) for name, fn in variants.items()}
        best = dict.fromkeys(variants, float("inf"))
        # Round by round, one repeat of each: a busy machine slows them alike.
        for _ in range(repeats):
            for name, fn in variants.items():
                best[name] = min(best[name], per_call_sync(fn, loops[name], 1))
        assert server.reads == reads, "the benchmark must measure hits only"
    return best


async def async_hits(repeats: int, loops: int) -> dict[str, float]:
    plain = {HIT_URI: "v1"}

    async def dict_get() -> str:
        return plain[HIT_URI]

    server = ReferenceServer()
    server.set(HIT_URI, "v1", ttl_ms=HOUR_MS)
    async with (
        FreshCache(InMemorySource(server), listen=False) as cache,
        FreshCache(InMemorySource(server), listen=False, principal="alice") as alice,
    ):
        for principal in (None, "alice"):
            assert (await cache.read(HIT_URI, principal=principal)).state == "fresh"
        assert (await alice.read(HIT_URI)).state == "fresh"
        reads = server.reads
        variants: dict[str, Callable[[], Awaitable[object]]] = {
            "awaited_dict_ns": dict_get,
            "default_hit_ns": lambda: cache.read(HIT_URI),
            "private_hit_ns": lambda: cache.read(HIT_URI, principal="alice"),
            "principal_cache_hit_ns": lambda: alice.read(HIT_URI),
        }
        best = dict.fromkeys(variants, float("inf"))
        for _ in range(repeats):
            for name, fn in variants.items():
                best[name] = min(best[name], await per_call_async(fn, loops, 1))
        assert server.reads == reads, "the benchmark must measure hits only"
    return best


def hits_child(repeats: int, loops: int) -> None:
    emit("hits", **sync_hits(repeats), **asyncio.run(async_hits(repeats, loops)))


# ---------------------------------------------------------------------- bookkeeping (child)


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def bookkeeping_child(reads: int, events: int) -> None:
    server = ReferenceServer()
    uris = [uri_of(n) for n in range(reads)]
    for uri in uris:
        server.set(uri, "text of a resource, 32 bytes...", ttl_ms=HOUR_MS)
    # The reference server remembers each answer as a loader's local copy: make those
    # slots now, so that its own memory is in the baseline and not in the figure.
    server.local_copies.update((r.uri, r.text) for r in server.resources.values())
    selected = uri_of(reads)
    server.set(selected, "selected", ttl_ms=HOUR_MS)
    store = MemoryStore(max_entries=1000, max_bytes=1 << 20)
    async with FreshCache(InMemorySource(server), select=[selected], store=store) as cache:
        while cache.stream_status != "live" or cache.pending_reads:
            await anyio.sleep(0.001)
        gc.collect()
        baseline = rss_bytes()
        started = time.perf_counter()
        for n, uri in enumerate(uris):
            await cache.read(uri)
            if n % 10_000 == 0:
                server.read_log.clear()
        server.read_log.clear()
        gc.collect()
        after_reads = rss_bytes()
        emit(
            "bookkeeping_reads",
            reads=reads,
            seconds=time.perf_counter() - started,
            rss_growth_mb=(after_reads - baseline) / 1e6,
            tracked_uris=cache.engine.tracked_uris,
            entries=store.entry_count,
        )
        counters = cache.engine.counters
        started = time.perf_counter()
        batch = 2_000  # the reference server's stream buffer holds 10,000
        for first in range(0, events, batch):
            target = counters.notifications + min(batch, events - first)
            for n in range(first, min(first + batch, events)):
                server.notify_updated(f"guide://never-read/{n:07d}", raw=True)
            while counters.notifications < target:
                await anyio.lowlevel.checkpoint()
            if cache.stream_status != "live":
                raise RuntimeError("the stream was lost while publishing change events")
        gc.collect()
        after_events = rss_bytes()
        emit(
            "bookkeeping_events",
            events=events,
            seconds=time.perf_counter() - started,
            rss_growth_mb=(after_events - after_reads) / 1e6,
            rss_growth_total_mb=(after_events - baseline) / 1e6,
            tracked_uris=cache.engine.tracked_uris,
        )


# ---------------------------------------------------------------------- parent


def run_child(args: list[str], budget: float) -> tuple[dict[str, dict[str, Any]], bool]:
    """Run this script as a child; its parts by name, and whether it ran over budget."""
    command = [sys.executable, __file__, "--child", *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=budget, check=False)
        out, over = done.stdout, False
        if done.returncode:
            sys.stderr.write(done.stderr)
            raise RuntimeError(f"{' '.join(args)} failed with exit code {done.returncode}")
    except subprocess.TimeoutExpired as expired:
        raw = expired.stdout or ""
        out, over = raw.decode() if isinstance(raw, bytes) else raw, True
    parts = {}
    for line in out.splitlines():
        if line.startswith("{"):
            part = json.loads(line)
            parts[part.pop("part")] = part
    return parts, over


def cell(parts: dict[str, dict[str, Any]], part: str, key: str, fmt: str) -> str:
    if part not in parts:
        return "> budget"
    return format(parts[part][key], fmt)


def growth(rows: dict[int, dict[str, dict[str, Any]]], size: int, part: str, key: str) -> str:
    base = rows[min(rows)]
    if part not in rows[size] or part not in base:
        return "—"
    return f"{rows[size][part][key] / base[part][key]:.2f}x"


def print_scale(rows: dict[int, dict[str, dict[str, Any]]]) -> None:
    print("per-URI and per-notification cost by selected-set size (growth vs the smallest):")
    header = (
        f"{'selected':>9} {'enter us/URI':>12} {'growth':>7} {'ack ms':>9} {'ack us/URI':>10}"
        f" {'growth':>7} {'re-read us/URI':>14} {'growth':>7} {'notify us':>9} {'growth':>7}"
    )
    print(header)
    for size, parts in rows.items():
        print(
            f"{size:>9,} {cell(parts, 'enter', 'per_uri_us', '.1f'):>12}"
            f" {growth(rows, size, 'enter', 'per_uri_us'):>7}"
            f" {cell(parts, 'enter', 'ack_ms', '.1f'):>9}"
            f" {cell(parts, 'enter', 'ack_us_per_uri', '.2f'):>10}"
            f" {growth(rows, size, 'enter', 'ack_us_per_uri'):>7}"
            f" {cell(parts, 'reconnect', 'per_uri_us', '.1f'):>14}"
            f" {growth(rows, size, 'reconnect', 'per_uri_us'):>7}"
            f" {cell(parts, 'notify', 'median_us', '.1f'):>9}"
            f" {growth(rows, size, 'notify', 'median_us'):>7}"
        )
    print()
    print("notification throughput (a burst for distinct selected URIs, published at once):")
    print(f"{'selected':>9} {'burst':>6} {'heard/s':>9} {'settled/s':>10} {'server reads':>12}")
    for size, parts in rows.items():
        print(
            f"{size:>9,} {cell(parts, 'notify_burst', 'count', ',d'):>6}"
            f" {cell(parts, 'notify_burst', 'heard_per_s', ',.0f'):>9}"
            f" {cell(parts, 'notify_burst', 'settled_per_s', ',.0f'):>10}"
            f" {cell(parts, 'notify_burst', 'server_reads', ',d'):>12}"
        )
    print()
    print("server reads:")
    print(
        f"{'selected':>9} {'entering':>9} {'per URI':>8} {'select(+1)':>11} {'select(+1) s':>12}"
        f" {'reconnect':>10} {'most in flight':>14}"
    )
    for size, parts in rows.items():
        per = (
            format(parts["enter"]["server_reads"] / size, ".2f") if "enter" in parts else "> budget"
        )
        print(
            f"{size:>9,} {cell(parts, 'enter', 'server_reads', ',d'):>9} {per:>8}"
            f" {cell(parts, 'select_plus_one', 'server_reads', ',d'):>11}"
            f" {cell(parts, 'select_plus_one', 'seconds', '.3f'):>12}"
            f" {cell(parts, 'reconnect', 'server_reads', ',d'):>10}"
            f" {cell(parts, 'reconnect', 'peak_reads_in_flight', ',d'):>14}"
        )


def print_hits(parts: dict[str, dict[str, Any]]) -> None:
    if "hits" not in parts:
        print("hits: > budget")
        return
    h = parts["hits"]
    print("hit path (ns per call, best of repeats):")
    print(
        f"  SyncFreshCache.read fresh hit {h['sync_hit_ns']:>10,.0f}   "
        f"locked dict lookup {h['locked_dict_ns']:>5,.0f}   "
        f"ratio {h['sync_hit_ns'] / h['locked_dict_ns']:>6.1f}x"
    )
    floor, default = h["awaited_dict_ns"], h["default_hit_ns"]
    for name, key in (
        ("default hit, read(uri)", "default_hit_ns"),
        ('read(uri, principal="alice")', "private_hit_ns"),
        ('FreshCache(principal="alice")', "principal_cache_hit_ns"),
    ):
        ns = h[key]
        print(
            f"  {name:<30}{ns:>10,.0f}   vs default {ns / default:>5.2f}x"
            f"   vs awaited dict ({floor:,.0f}) {ns / floor:>5.2f}x"
        )


def print_bookkeeping(parts: dict[str, dict[str, Any]], over: bool) -> None:
    print("bookkeeping, MemoryStore(max_entries=1000, max_bytes=1 MiB):")
    if "bookkeeping_reads" in parts:
        r = parts["bookkeeping_reads"]
        print(
            f"  {r['reads']:,} distinct reads: RSS +{r['rss_growth_mb']:.1f} MB,"
            f" tracked_uris {r['tracked_uris']:,}, entries {r['entries']:,} ({r['seconds']:.1f}s)"
        )
    if "bookkeeping_events" in parts:
        e = parts["bookkeeping_events"]
        print(
            f"  + {e['events']:,} change events for URIs never read: RSS +{e['rss_growth_mb']:.1f} MB,"
            f" tracked_uris {e['tracked_uris']:,} ({e['seconds']:.1f}s)"
        )
        print(f"  in all: RSS +{e['rss_growth_total_mb']:.1f} MB (target: at most 12 MB)")
    if over:
        print("  > budget")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (about half a minute)")
    parser.add_argument("--sizes", help="selected-set sizes, comma-separated")
    parser.add_argument("--budget", type=float, default=120.0, help="seconds per subprocess")
    parser.add_argument("--notifications", type=int, default=500)
    parser.add_argument(
        "--burst", type=int, default=5000, help="notifications published at once (throughput)"
    )
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--loops", type=int, default=200_000, help="async hit loops")
    parser.add_argument("--records", type=int, default=100_000, help="bookkeeping reads/events")
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results" / "scale.json"
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *values = args.child
        numbers = [int(v) for v in values]
        match kind:
            case "scale":
                anyio.run(scale_child, *numbers)
            case "hits":
                hits_child(*numbers)
            case "bookkeeping":
                anyio.run(bookkeeping_child, *numbers)
        return
    if args.quick:
        sizes, notifications, records, burst = [1000, 2000], 100, 10_000, 1000
        repeats, loops, budget = 3, 50_000, min(args.budget, 30.0)
    else:
        sizes, notifications, records = (
            [1000, 8000, 10_000, 100_000],
            args.notifications,
            args.records,
        )
        burst = args.burst
        repeats, loops, budget = args.repeats, args.loops, args.budget
    if args.sizes:
        sizes = sorted(int(s) for s in args.sizes.split(","))

    load_before = [round(x, 2) for x in os.getloadavg()]
    rows: dict[int, dict[str, dict[str, Any]]] = {}
    over_budget: list[str] = []
    for size in sizes:
        started = time.perf_counter()
        rows[size], over = run_child(["scale", str(size), str(notifications), str(burst)], budget)
        state = f"> budget ({budget:.0f}s)" if over else f"{time.perf_counter() - started:.1f}s"
        print(f"   selected {size:,}: {state}", flush=True)
        if over:
            over_budget.append(f"scale {size}")
    hits, over = run_child(["hits", str(repeats), str(loops)], budget)
    if over:
        over_budget.append("hits")
    book, over = run_child(["bookkeeping", str(records), str(records)], budget * 3)
    if over:
        over_budget.append("bookkeeping")
    print()
    print_scale(rows)
    print()
    print_hits(hits)
    print()
    print_bookkeeping(book, over)
    machine = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "cpu": cpu_model(),
        "platform": platform.platform(),
    }
    load = {"before": load_before, "after": [round(x, 2) for x in os.getloadavg()]}
    print(f"\nmachine: {machine['cpus']} cpus, Python {machine['python']}, {machine['platform']}")
    print(f"load average: {load}")
    report = {
        "benchmark": "scale",
        "machine": machine,
        "budget_s": budget,
        "load_average": load,
        "over_budget": over_budget,
        "scale": {str(size): parts for size, parts in rows.items()},
        "hits": hits.get("hits"),
        "bookkeeping": book,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.json}")


if __name__ == "__main__":
    main()
