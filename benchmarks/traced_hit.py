"""A traced hit (``trace_hits=True``) against an untraced one, the SDK installed for both
(issue 38, item 4).

    python benchmarks/traced_hit.py [--loops 2000] [--repeats 31] [--json PATH]

One event loop, the in-memory reference server, an OpenTelemetry SDK tracer whose
batched exporter drops the spans. Interleaved rounds of ``--loops`` awaited hits of one
fresh URI, the minimum of ``--repeats`` rounds in CPU nanoseconds per hit:

- ``untraced``: ``await cache.read(uri)`` with the SDK installed, ``trace_hits=False``;
- ``traced_hit``: the same with ``trace_hits=True``, the hits alone;
- ``traced_with_spans``: the same hits and then one loop turn: the whole cost of
  tracing a hit if a tracer made its spans later (today `Telemetry.traced_hit` makes
  each span at its hit, so the two are the same).

Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import (  # noqa: E402
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from freshcache import FreshCache  # noqa: E402
from freshcache.acceptance import InMemorySource, ReferenceServer  # noqa: E402

URI = "doc://traced/hit"


class Discard(SpanExporter):
    def export(self, spans: object) -> SpanExportResult:
        return SpanExportResult.SUCCESS


async def rounds(loops: int, repeats: int) -> dict[str, list[float]]:
    server = ReferenceServer()
    server.set(URI, "v1", ttl_ms=3_600_000)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard()))
    seen: dict[str, list[float]] = {"untraced": [], "traced_hit": [], "traced_with_spans": []}
    async with (
        FreshCache(InMemorySource(server), listen=False, tracer_provider=provider) as plain,
        FreshCache(
            InMemorySource(server), listen=False, tracer_provider=provider, trace_hits=True
        ) as traced,
    ):
        for cache in (plain, traced):
            assert (await cache.read(URI)).state == "fresh"
        await asyncio.sleep(0)
        for _ in range(repeats):
            for name, cache in (("untraced", plain), ("traced", traced)):
                read = cache.read
                started = time.process_time_ns()
                for _ in range(loops):
                    await read(URI)
                hits = time.process_time_ns() - started
                await asyncio.sleep(0)  # the turn that makes the spans
                whole = time.process_time_ns() - started
                if name == "untraced":
                    seen["untraced"].append(hits / loops)
                else:
                    seen["traced_hit"].append(hits / loops)
                    seen["traced_with_spans"].append(whole / loops)
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
    report: dict[str, Any] = {
        "ns_per_hit": {k: round(v, 1) for k, v in best.items()},
        "ratio_to_untraced": {k: round(v / best["untraced"], 2) for k, v in best.items()},
        "load_average": [round(x, 1) for x in os.getloadavg()],
        "machine": f"{platform.processor() or platform.machine()}, Python {platform.python_version()}",
    }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
