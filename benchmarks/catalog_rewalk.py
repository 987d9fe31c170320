"""Cost of a catalog re-walk that takes pages from the cache, two code trees side by side.

    python benchmarks/catalog_rewalk.py --before /path/to/old/tree [--rounds R] [--walks N]

A catalog walk ends in `CatalogBook.settle`, which labels the catalog with a version
(a digest of the canonical JSON of every item). Rows, each per walk:

- ``engine_all_cached``: the engine alone (no I/O, no event loop): ``begin_catalog`` and
  ``settle_catalog`` of ``tools`` (200 tools, 4 pages of 50, ``Policy(uncovered="ttl")``)
  when every page is fresh in the store, the walk a cache begins after its catalog was
  dropped (its held copy evicted) while the pages stayed;
- ``engine_none_cached``: the same walk with every page from the server (the default
  ``read_before_use``, nothing covered): the cost of a first walk, the control;
- ``cache_first_page_expired``: ``await cache.tools()`` through `FreshCache` over the
  in-memory reference server on a virtual clock, the first page's ``ttlMs`` 1 s and the
  other three's 10^6 s, the clock moved 2 s before each call: one page is listed again,
  three are taken from the cache (the server's own page building is in this row too).

Each round runs one child process per tree (``PYTHONPATH`` = that tree), the trees in
turn, so a busy machine weighs on both alike; a child reports CPU time per walk
(``time.process_time_ns``) and Python function calls per walk (cProfile, a separate
pass). Prints the medians, before -> after, and the load average before and after;
writes ``benchmarks/results/catalog_rewalk.json``. Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
U = "guide://shipping/approval"
TOOLS, PAGE = 200, 50


def tools() -> list[dict[str, Any]]:
    return [
        {
            "name": f"tool_{n}",
            "description": f"Look up record kind {n} by its key and return its fields.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    f"field_{k}": {"type": "string", "description": f"field {k} of the key"}
                    for k in range(6)
                },
                "required": ["field_0"],
            },
        }
        for n in range(TOOLS)
    ]


# --------------------------------------------------------------------------- the child


def engine_rows(walks: int, *, cached: bool) -> tuple[float, float]:
    from freshcache import MemoryStore, Policy
    from freshcache._core import FreshnessEngine
    from freshcache.acceptance import ReferenceServer

    server = ReferenceServer()
    server.catalogs.set("tools", tools())
    server.catalogs.page_size = PAGE
    policy = Policy(uncovered="ttl" if cached else "read_before_use")
    engine = FreshnessEngine(store=MemoryStore(), policy=policy)

    def walk() -> Any:
        done = engine.begin_catalog("tools", None)
        while (ticket := done.walk.next_page()) is not None:
            reply = server.catalogs.page("tools", ticket.cursor, None, down=False)
            done.walk.landed(ticket, reply)
        return engine.settle_catalog(done)

    first = walk()
    assert first.state == "fresh", first
    assert len(first.items) == TOOLS
    lists = server.catalogs.lists["tools"]
    start = time.process_time_ns()
    for _ in range(walks):
        walk()
    cpu = (time.process_time_ns() - start) / walks
    listed = server.catalogs.lists["tools"] - lists
    assert listed == (0 if cached else walks * TOOLS // PAGE), listed
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(walks):
        walk()
    profile.disable()
    return cpu, _calls(profile) / walks


async def cache_rows(walks: int) -> tuple[float, float]:
    import anyio

    from freshcache import FreshCache
    from freshcache.acceptance import InMemorySource, ReferenceServer
    from freshcache.acceptance._runner import VirtualClock

    server = ReferenceServer()
    server.set(U, "v1")
    server.catalogs.set("tools", tools())
    server.catalogs.page_size = PAGE
    server.catalogs.ttl_ms = 1_000
    server.catalogs.later_pages_ttl_ms = 10**9  # outlasts every walk here
    clock = VirtualClock()
    async with FreshCache(
        InMemorySource(server), select=[U], clock=clock, wall_clock=clock.wall
    ) as cache:
        with anyio.fail_after(10):
            while cache.stream_status != "live":
                await anyio.sleep(0.005)
        assert (await cache.tools()).state == "fresh"

        async def rewalk() -> None:
            clock.advance(2.0)
            got = await cache.tools()
            assert got.state == "fresh", got
            assert got.server_read

        lists = server.catalogs.lists["tools"]
        start = time.process_time_ns()
        for _ in range(walks):
            await rewalk()
        cpu = (time.process_time_ns() - start) / walks
        assert server.catalogs.lists["tools"] == lists + walks, "not one page per walk"
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(walks):
            await rewalk()
        profile.disable()
    return cpu, _calls(profile) / walks


def _calls(profile: cProfile.Profile) -> int:
    stats = pstats.Stats(profile)
    return sum(entry[1] for entry in stats.stats.values())  # type: ignore[attr-defined]


def child(walks: int) -> None:
    import anyio

    engine_cpu, engine_calls = engine_rows(walks, cached=True)
    fetched_cpu, fetched_calls = engine_rows(walks, cached=False)
    cache_cpu, cache_calls = anyio.run(cache_rows, walks)
    print(
        json.dumps(
            {
                "engine_all_cached": {"cpu_ns": engine_cpu, "calls": engine_calls},
                "engine_none_cached": {"cpu_ns": fetched_cpu, "calls": fetched_calls},
                "cache_first_page_expired": {"cpu_ns": cache_cpu, "calls": cache_calls},
            }
        )
    )


# --------------------------------------------------------------------------- the parent


def run_tree(tree: Path, walks: int) -> dict[str, dict[str, float]]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, str(HERE), "--child", "--walks", str(walks)],
        env=env,
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, dict[str, float]] = json.loads(out.strip().splitlines()[-1])
    return result


def _commit(tree: Path) -> str:
    """The tree's commit (and whether it has changes), else its folder's name."""
    try:
        head = subprocess.run(
            ["git", "-C", str(tree), "describe", "--always", "--dirty"],
            check=True,
            capture_output=True,
            text=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return tree.name
    return head.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="the tree to compare with (old code)")
    parser.add_argument("--after", type=Path, default=HERE.parents[1])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--walks", type=int, default=200)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=HERE.parent / "results" / "catalog_rewalk.json")
    args = parser.parse_args()
    if args.child:
        child(args.walks)
        return
    if args.before is None:
        parser.error("--before TREE is required (a checkout of the code to compare with)")
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    load_before = [round(x, 2) for x in os.getloadavg()]
    samples: dict[str, list[dict[str, dict[str, float]]]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            samples[name].append(run_tree(tree, args.walks))
    load_after = [round(x, 2) for x in os.getloadavg()]
    rows = ("engine_all_cached", "engine_none_cached", "cache_first_page_expired")
    report: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
        f"Python {sys.version.split()[0]}",
        "load_average": {"before": load_before, "after": load_after},
        "rounds": args.rounds,
        "walks": args.walks,
        "commits": {name: _commit(tree) for name, tree in trees.items()},
        "rows": {},
    }
    print(f"{report['machine']}; load average before {load_before}, after {load_after}")
    print(f"median of {args.rounds} interleaved rounds of {args.walks} walks, per walk")
    print(f"{'row':<28}{'CPU us before':>14}{'after':>10}{'calls before':>14}{'after':>8}")
    for row in rows:
        figures = {
            name: {
                measure: statistics.median(sample[row][measure] for sample in samples[name])
                for measure in ("cpu_ns", "calls")
            }
            for name in trees
        }
        report["rows"][row] = figures
        before, after = figures["before"], figures["after"]
        print(
            f"{row:<28}{before['cpu_ns'] / 1000:>14.1f}{after['cpu_ns'] / 1000:>10.1f}"
            f"{before['calls']:>14.0f}{after['calls']:>8.0f}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
