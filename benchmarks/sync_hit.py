"""`SyncFreshCache.read` of a fresh URI against a lock-guarded dict (issue 38, item 4).

    python benchmarks/sync_hit.py [--loops 20000] [--repeats 41] [--json PATH]

In the calling thread, interleaved rounds of ``--loops`` calls, the minimum and the
median of ``--repeats`` rounds, in nanoseconds per call:

- the floor: ``with lock: table[uri]`` (a ``threading.Lock``-guarded dict lookup);
- ``cache.read(uri)`` of a selected URI its acknowledged stream covers (the row has no
  time bound: the hit reads no clock);
- ``cache.read(uri)`` of a URI fresh within its ``ttlMs`` (the row is compared against
  the clock).

The cache runs over the in-memory reference server on its own loop thread. Not a
pass/fail test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._report import emit  # noqa: E402
from freshcache.acceptance import InMemorySource, ReferenceServer  # noqa: E402
from freshcache.sync import SyncFreshCache  # noqa: E402

COVERED = "doc://sync/covered"
TIMED = "doc://sync/timed"


def timed(fn: Callable[[str], object], uri: str, loops: int) -> float:
    keys = [uri] * loops
    started = time.perf_counter_ns()
    for key in keys:
        fn(key)
    return (time.perf_counter_ns() - started) / loops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=41)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    server = ReferenceServer()
    server.set(COVERED, "covered v1")
    server.set(TIMED, "timed v1", ttl_ms=3_600_000)
    lock = threading.Lock()
    table = {COVERED: "covered v1"}

    def locked_get(uri: str) -> str:
        with lock:
            return table[uri]

    with SyncFreshCache(InMemorySource(server), select=[COVERED]) as cache:
        deadline = time.monotonic() + 10
        while cache.status(COVERED).state != "fresh" or cache.stream_status != "live":
            cache.read(COVERED)
            assert time.monotonic() < deadline, "the stream did not come up"
            time.sleep(0.01)
        assert cache.read(TIMED).state == "fresh"
        variants: dict[str, tuple[Callable[[str], object], str]] = {
            "locked_dict": (locked_get, COVERED),
            "sync_hit_covered": (cache.read, COVERED),
            "sync_hit_ttl": (cache.read, TIMED),
        }
        rounds: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.repeats):
            for name, (fn, uri) in variants.items():
                rounds[name].append(timed(fn, uri, args.loops))
        assert cache.read(COVERED).server_read is False
    best = {name: min(r) for name, r in rounds.items()}
    floor = best["locked_dict"]
    emit(
        {
            "ns_per_call": {k: round(v, 1) for k, v in best.items()},
            "ns_per_call_median": {k: round(statistics.median(v), 1) for k, v in rounds.items()},
            "ratio_to_floor": {k: round(v / floor, 3) for k, v in best.items()},
        },
        args.json,
    )


if __name__ == "__main__":
    main()
