"""Cost of a fresh cache hit, side by side with what a user would use instead.

    python benchmarks/hit_path.py [--loops N] [--repeats R] [--json PATH]

Compares, in one process and one event loop:

- ``await cache.read(uri)`` on a fresh entry (freshcache's hit path);
- a bare ``cachetools.TTLCache`` lookup (``ttl[uri]``, synchronous);
- an awaited dict lookup (``await get(uri)``: the floor for any async cache);
- the hit path with an OpenTelemetry SDK installed (hits untraced, the default) and
  with ``trace_hits=True`` (a span per hit, batched to an exporter that drops them).

Prints nanoseconds per call (best of R repeats of N calls each) and the ratios, and
writes the same to a JSON file. Not a pass/fail test: the figures go in the README.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from cachetools import TTLCache

from freshcache import FreshCache
from freshcache.acceptance import InMemorySource, ReferenceServer

URI = "guide://shipping/approval"


def per_call_sync(fn: Callable[[], object], loops: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(loops):
            fn()
        best = min(best, (time.perf_counter_ns() - start) / loops)
    return best


async def per_call_async(fn: Callable[[], Awaitable[object]], loops: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(loops):
            await fn()
        best = min(best, (time.perf_counter_ns() - start) / loops)
    return best


async def measure(loops: int, repeats: int) -> dict[str, float]:
    ttl: TTLCache[str, str] = TTLCache(maxsize=10_000, ttl=3600)
    ttl[URI] = "v1"
    plain = {URI: "v1"}

    async def dict_get(uri: str) -> str:
        return plain[uri]

    results = {
        "ttlcache_lookup": per_call_sync(lambda: ttl[URI], loops, repeats),
        "awaited_dict_lookup": await per_call_async(lambda: dict_get(URI), loops, repeats),
    }
    for name, options in telemetry_variants():
        server = ReferenceServer()
        server.set(URI, "v1", ttl_ms=3_600_000)
        async with FreshCache(InMemorySource(server), listen=False, **options) as cache:
            first = await cache.read(URI)
            assert first.state == "fresh"
            hit = await cache.read(URI)
            assert hit.state == "fresh"
            assert hit.server_read is False
            results[name] = await per_call_async(lambda c=cache: c.read(URI), loops, repeats)
            assert server.reads == 1, "the benchmark must measure hits only"
    return results


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
    parser.add_argument("--loops", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results" / "hit_path.json"
    )
    args = parser.parse_args()
    results = asyncio.run(measure(args.loops, args.repeats))
    base = results["ttlcache_lookup"]
    print(f"{'operation':<28} {'ns/call':>9} {'vs TTLCache':>12}")
    for name, ns in results.items():
        print(f"{name:<28} {ns:>9.0f} {ns / base:>11.2f}x")
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
        "ns_per_call": {k: round(v, 1) for k, v in results.items()},
        "ratio_to_ttlcache": {k: round(v / base, 3) for k, v in results.items()},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.json}")


if __name__ == "__main__":
    main()
