"""A traced hit (``trace_hits=True``) against an untraced one, the SDK installed for both,
and an awaited dict lookup as the floor, in one run (issue 38, item 4).

    python benchmarks/traced_hit.py [--loops 2000] [--repeats 31] [--json PATH]

One event loop, the in-memory reference server, an OpenTelemetry SDK tracer whose
batched exporter drops the spans. Interleaved rounds of ``--loops`` awaited calls, the
minimum of ``--repeats`` rounds in CPU nanoseconds per call:

- ``awaited_dict``: ``await get(uri)`` of a coroutine that returns ``table[uri]``;
- ``untraced``: ``await cache.read(uri)`` of one fresh URI, ``trace_hits=False``;
- ``traced_hit``: the same with ``trace_hits=True``, the hits alone;
- ``traced_with_spans``: the same hits, then the spans they owe made at once
  (`Telemetry.flush_hits`, which the cache's timer calls once a second) and one loop
  turn: the whole cost of tracing a hit when a URI is read over and over;
- ``traced_distinct``: ``--loops`` different fresh URIs read once each, then the spans
  made: the worst case, one span per hit (a URI's hits share a span, different URIs
  do not).

``FRESHCACHE_TREE=/path/to/a/checkout`` measures that tree's ``freshcache`` instead
(before and after a change, with this same script). Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks._report import emit  # noqa: E402  (this tree's, before another is first)

sys.path.insert(0, os.environ.get("FRESHCACHE_TREE", str(ROOT)))

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import (  # noqa: E402
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from freshcache import FreshCache  # noqa: E402
from freshcache.acceptance import InMemorySource, ReferenceServer  # noqa: E402

URI = "doc://traced/hit"
HOUR_MS = 3_600_000


class Discard(SpanExporter):
    def export(self, spans: object) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def flusher(cache: FreshCache) -> Callable[[], object]:
    """What makes the spans the hits owe (nothing before hits were batched)."""
    flush: Callable[[], object] | None = getattr(cache.telemetry, "flush_hits", None)
    return flush if flush is not None else lambda: None


async def rounds(loops: int, repeats: int) -> dict[str, list[float]]:
    server = ReferenceServer()
    server.set(URI, "v1", ttl_ms=HOUR_MS)
    distinct = [f"doc://traced/{i}" for i in range(loops)]
    for uri in distinct:
        server.set(uri, uri, ttl_ms=HOUR_MS)
    table = {URI: "v1"}

    async def get(uri: str) -> str:
        return table[uri]

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard(), max_queue_size=4 * loops))
    names = ("awaited_dict", "untraced", "traced_hit", "traced_with_spans", "traced_distinct")
    seen: dict[str, list[float]] = {name: [] for name in names}
    async with (
        FreshCache(InMemorySource(server), listen=False, tracer_provider=provider) as plain,
        FreshCache(
            InMemorySource(server), listen=False, tracer_provider=provider, trace_hits=True
        ) as traced,
    ):
        for cache in (plain, traced):
            assert (await cache.read(URI)).state == "fresh"
        for uri in distinct:
            assert (await traced.read(uri)).state == "fresh"
        flush = flusher(traced)
        flush()
        await asyncio.sleep(0)
        reads = server.reads

        def timed(read: Callable[[str], Awaitable[object]], keys: list[str]) -> Any:
            async def run() -> tuple[float, float]:
                started = time.process_time_ns()
                for key in keys:
                    await read(key)
                hits = time.process_time_ns() - started
                flush()
                await asyncio.sleep(0)  # the turn a timer would have made the spans in
                return hits / len(keys), (time.process_time_ns() - started) / len(keys)

            return run

        same = [URI] * loops
        for _ in range(repeats):
            seen["awaited_dict"].append((await timed(get, same)())[0])
            seen["untraced"].append((await timed(plain.read, same)())[0])
            hits, whole = await timed(traced.read, same)()
            seen["traced_hit"].append(hits)
            seen["traced_with_spans"].append(whole)
            seen["traced_distinct"].append((await timed(traced.read, distinct)())[1])
        assert server.reads == reads, "hits only"
    provider.shutdown()
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=31)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    seen = asyncio.run(rounds(args.loops, args.repeats))
    best = {k: min(v) for k, v in seen.items()}
    emit(
        {
            "ns_per_call": {k: round(v, 1) for k, v in best.items()},
            "ratio_to_untraced": {k: round(v / best["untraced"], 2) for k, v in best.items()},
            "ratio_to_awaited_dict": {
                k: round(v / best["awaited_dict"], 2) for k, v in best.items()
            },
            "tree": os.environ.get("FRESHCACHE_TREE", "this checkout"),
        },
        args.json,
    )


if __name__ == "__main__":
    main()
