"""Cost of a fresh cache hit, side by side with what a user would use instead.

    python benchmarks/hit_path.py [--loops N] [--repeats R] [--keys K] [--json PATH]

Compares, in one process and one event loop, the floor first:

- an awaited dict lookup (``await get(uri)``: the floor for any async cache);
- a bare ``cachetools.TTLCache`` lookup (``ttl[uri]``, synchronous);
- ``await cache.read(uri)`` on a fresh entry (freshcache's hit path);
- the hit path with an OpenTelemetry SDK installed (hits untraced, the default) and
  with ``trace_hits=True`` (a span per hit, batched to an exporter that drops them;
  N/50 calls a round, as each costs some hundred times more);
- the random-key case: ``K`` entries (10,000 by default), each call a different key
  in a shuffled order, for the awaited dict and for the hit path (the same URI every
  time keeps everything in the CPU's caches; many keys in no order do not).

Every call goes through the same loop over a list of keys, made before the clock
starts. The variants are interleaved: each round times one repeat of every variant in
turn, so that a busy machine (and the CPU's clock) weighs on all of them alike. Prints
nanoseconds per call, the minimum and the median of R rounds of N calls, and each
minimum's ratio to the floor; writes the same to a JSON file (``ns_per_call`` is the
minimum). Many short rounds rather than a few long ones: on a shared machine the
minimum of short rounds is the one least disturbed. Not a pass/fail test: the figures
go in docs/speed.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

from cachetools import TTLCache

from freshcache import FreshCache, MemoryStore
from freshcache.acceptance import InMemorySource, ReferenceServer

URI = "guide://shipping/approval"
FLOOR = "awaited_dict_lookup"


@dataclass
class Variant:
    """One way of looking a key up, timed over ``keys`` (one call per key)."""

    name: str
    keys: list[str]
    sync: Callable[[str], object] | None = None
    call: Callable[[str], Awaitable[object]] | None = None
    rounds: list[float] = field(default_factory=list)
    """Nanoseconds per call, one figure per round."""

    async def time_once(self) -> None:
        keys = self.keys
        if self.sync is not None:
            sync = self.sync
            start = time.perf_counter_ns()
            for key in keys:
                sync(key)
        else:
            call = self.call
            assert call is not None
            start = time.perf_counter_ns()
            for key in keys:
                await call(key)
        self.rounds.append((time.perf_counter_ns() - start) / len(keys))


def per_call_sync(fn: Callable[[], object], loops: int, repeats: int) -> float:
    """Best nanoseconds per call of ``fn`` over ``repeats`` runs of ``loops`` calls."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(loops):
            fn()
        best = min(best, (time.perf_counter_ns() - start) / loops)
    return best


async def per_call_async(fn: Callable[[], Awaitable[object]], loops: int, repeats: int) -> float:
    """`per_call_sync` for an awaited call (``scale.py``'s hits use both)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(loops):
            await fn()
        best = min(best, (time.perf_counter_ns() - start) / loops)
    return best


def many_uris(count: int) -> list[str]:
    return [f"guide://many/{i:06d}" for i in range(count)]


def shuffled_keys(uris: list[str], loops: int, seed: int = 21) -> list[str]:
    """``loops`` keys drawn from ``uris`` at random (seeded: repeatable)."""
    rng = random.Random(seed)
    return [rng.choice(uris) for _ in range(loops)]


async def fresh_cache(
    stack: AsyncExitStack, uris: list[str], options: dict[str, object]
) -> FreshCache:
    """An entered cache with every one of ``uris`` read once (fresh, an hour's ttlMs)."""
    server = ReferenceServer()
    for uri in uris:
        server.set(uri, "v1", ttl_ms=3_600_000)
    store = MemoryStore(max_entries=2 * len(uris) + 100, max_bytes=1 << 32)  # holds them all
    cache = await stack.enter_async_context(
        FreshCache(InMemorySource(server), listen=False, store=store, **options)
    )
    for uri in uris:
        first = await cache.read(uri)
        assert first.state == "fresh"
    hit = await cache.read(uris[0])
    assert hit.state == "fresh"
    assert hit.server_read is False
    return cache


async def measure(loops: int, repeats: int, keys: int) -> dict[str, list[float]]:
    same = [URI] * loops
    everything = many_uris(keys)
    scattered = shuffled_keys(everything, loops)
    plain = {URI: "v1"}
    many = dict.fromkeys(everything, "v1")
    ttl: TTLCache[str, str] = TTLCache(maxsize=10_000, ttl=3600)
    ttl[URI] = "v1"

    async def dict_get(uri: str) -> str:
        return plain[uri]

    async def many_get(uri: str) -> str:
        return many[uri]

    caches: list[FreshCache] = []
    async with AsyncExitStack() as stack:
        variants = [
            Variant(FLOOR, same, call=dict_get),
            Variant("ttlcache_lookup", same, sync=ttl.__getitem__),
        ]
        for name, options in telemetry_variants():
            cache = await fresh_cache(stack, [URI], options)
            caches.append(cache)
            # A traced hit costs a hundred times more: fewer calls last as long.
            keys = same[: max(1, loops // 50)] if options.get("trace_hits") else same
            variants.append(Variant(name, keys, call=cache.read))
        variants.append(Variant("awaited_dict_random_key", scattered, call=many_get))
        cache = await fresh_cache(stack, everything, {})
        caches.append(cache)
        variants.append(Variant("freshcache_read_hit_random_key", scattered, call=cache.read))
        reads_before = [c.engine.counters.server_reads for c in caches]
        for _ in range(repeats):
            for variant in variants:
                await variant.time_once()
        reads_after = [c.engine.counters.server_reads for c in caches]
        assert reads_after == reads_before, "the benchmark must measure hits only"
    return {v.name: v.rounds for v in variants}


def telemetry_variants() -> list[tuple[str, dict[str, object]]]:
    """Tracing off (API only, no SDK), an SDK installed with hits untraced, hits traced."""
    variants: list[tuple[str, dict[str, object]]] = [("freshcache_read_hit", {})]
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )
    except ImportError:  # the SDK is a test extra
        return variants

    class Discard(SpanExporter):
        def export(self, spans: object) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(Discard()))
    sdk = {"tracer_provider": tracer_provider, "meter_provider": MeterProvider()}
    variants.append(("freshcache_hit_sdk_untraced", sdk))
    variants.append(("freshcache_hit_sdk_traced", {**sdk, "trace_hits": True}))
    return variants


def cpu_model() -> str:
    """The CPU's model name (Linux ``/proc/cpuinfo``), for the results' machine note."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=20_000, help="calls a round")
    parser.add_argument("--repeats", type=int, default=41, help="interleaved rounds")
    parser.add_argument("--keys", type=int, default=10_000, help="entries of the random-key case")
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results" / "hit_path.json"
    )
    args = parser.parse_args()
    load_before = [round(x, 2) for x in os.getloadavg()]
    rounds = asyncio.run(measure(args.loops, args.repeats, args.keys))
    load = {"before": load_before, "after": [round(x, 2) for x in os.getloadavg()]}
    best = {name: min(r) for name, r in rounds.items()}
    median = {name: statistics.median(r) for name, r in rounds.items()}
    floor = best[FLOOR]
    print(f"{args.repeats} interleaved rounds of {args.loops} calls; load average {load}")
    print(f"{'operation':<32} {'min ns':>8} {'median ns':>10} {'min vs floor':>13}")
    for name in rounds:
        print(f"{name:<32} {best[name]:>8.0f} {median[name]:>10.0f} {best[name] / floor:>12.2f}x")
    report = {
        "benchmark": "hit_path",
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "cpu": cpu_model(),
            "platform": platform.platform(),
        },
        "loops": args.loops,
        "repeats": args.repeats,
        "random_keys": args.keys,
        "load_average": load,
        "ns_per_call": {k: round(v, 1) for k, v in best.items()},
        "ns_per_call_median": {k: round(v, 1) for k, v in median.items()},
        "ratio_to_floor": {k: round(v / floor, 3) for k, v in best.items()},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.json}")


if __name__ == "__main__":
    main()
