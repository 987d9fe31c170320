"""Memory per cached entry at 100k entries, beyond the contents themselves.

    python benchmarks/memory.py [--entries N] [--json PATH]

Fills freshcache's engine and store with N fresh reads (distinct URIs, 32-byte
texts) and measures, with tracemalloc, the bytes allocated per entry minus the
bytes of the URI and text strings themselves. A bare ``cachetools.TTLCache`` holding
the same (uri -> text) pairs is measured the same way, side by side.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import tracemalloc
from pathlib import Path

from cachetools import TTLCache

from freshcache._core import FreshnessEngine, ReadReply, ResourceContents
from freshcache._middleware._store import MemoryStore


def payload(n: int) -> tuple[str, str]:
    return f"guide://bench/{n:08d}", f"text of resource {n:08d} ......"[:32]


def content_bytes(entries: int) -> int:
    return sum(sys.getsizeof(u) + sys.getsizeof(t) for u, t in map(payload, range(entries)))


def measure_freshcache(entries: int) -> int:
    data = [payload(n) for n in range(entries)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    engine = FreshnessEngine(store=MemoryStore(max_entries=entries + 1, max_bytes=1 << 40))
    for uri, text in data:
        ticket = engine.begin_read(uri, None)
        engine.finish_read(ticket, ReadReply((ResourceContents(uri, text=text),), ttl_ms=3_600_000))
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(engine.hits) == entries
    return after - before


def measure_ttlcache(entries: int) -> int:
    data = [payload(n) for n in range(entries)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    cache: TTLCache[str, str] = TTLCache(maxsize=entries + 1, ttl=3600)
    for uri, text in data:
        cache[uri] = text
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(cache) == entries
    return after - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results" / "memory.json"
    )
    args = parser.parse_args()
    n = args.entries
    fresh = measure_freshcache(n)
    ttl = measure_ttlcache(n)
    # The strings were created before measuring, so neither figure includes them;
    # freshcache keeps its own copies inside result objects only by reference.
    rows = {"freshcache_per_entry": fresh / n, "ttlcache_per_entry": ttl / n}
    print(
        f"{'store':<24} {'bytes/entry':>12}   (beyond the {content_bytes(n) / n:.0f} B of strings)"
    )
    for name, value in rows.items():
        print(f"{name:<24} {value:>12.0f}")
    print(f"ratio freshcache / TTLCache: {fresh / ttl:.2f}")
    report = {
        "benchmark": "memory",
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "entries": n,
        "bytes_per_entry": {k: round(v, 1) for k, v in rows.items()},
        "ratio": round(fresh / ttl, 3),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.json}")


if __name__ == "__main__":
    main()
