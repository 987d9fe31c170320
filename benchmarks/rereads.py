"""Re-reads end to end, the engine alone, and what one re-read costs in calls (issue 25).

    python benchmarks/rereads.py [--rounds 5] [--selected 10000]
    python benchmarks/rereads.py --trees /path/to/before /path/to/after [--pairs 3]

The rows of `costs.py` that concern re-reads, measured the same way (CPU time, the
median of ``--rounds`` interleaved rounds, each figure also in awaited dicts of the
same run), and beside them what does not depend on the load:

- ``calls_e2e`` / ``calls_engine``: Python calls per re-read (cProfile's count, C
  functions included), end to end and for the engine alone;
- ``callbacks_e2e``: event-loop callbacks run per re-read (``Handle._run`` calls).

End to end: ``resources/updated`` published on the live stream of a `FreshCache` over
`InMemorySource` for each of ``--selected`` selected URIs, until every re-read landed.
The engine alone: ``handle`` + ``begin_read`` + ``finish_read`` of the same events, the
replies made beforehand. The floor: a loop turn + an awaited dict per re-read, on 16
tasks (the cache's ``max_concurrent_reads``).

``--trees`` runs this script once per tree and pair, alternating the order, with the
tree first on ``sys.path`` (``FRESHCACHE_TREE``), so code before and after a change is
measured in the same minutes; it prints each run and the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import importlib.util
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, os.environ.get("FRESHCACHE_TREE", str(ROOT)))

from freshcache import FreshCache, MemoryStore  # noqa: E402
from freshcache._core import (  # noqa: E402
    FreshnessEngine,
    ReadReply,
    ReadResource,
    ResourceUpdated,
)
from freshcache.acceptance import InMemorySource, ReferenceServer  # noqa: E402

# The helpers shared with `costs.py`, taken from this script's own tree by path (with
# ``--trees`` the tree measured is first on ``sys.path``, and its ``benchmarks`` may be
# older); they run on the freshcache imported above.
_spec = importlib.util.spec_from_file_location("_costs", ROOT / "benchmarks" / "costs.py")
assert _spec is not None
assert _spec.loader is not None
costs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(costs)
HOUR_MS: int = costs.HOUR_MS
TEXT: str = costs.TEXT
acknowledged_engine, live_and_fresh = costs.acknowledged_engine, costs.live_and_fresh
reply_of, uri_of = costs.reply_of, costs.uri_of


def engine_rereads(engine: FreshnessEngine, sid: str, replies: dict[str, ReadReply]) -> None:
    for uri in replies:
        for decision in engine.handle(ResourceUpdated(uri, sid)):
            if isinstance(decision, ReadResource):
                ticket = engine.begin_read(decision.uri, None)
                engine.finish_read(ticket, replies[decision.uri])


async def published(cache: FreshCache, server: ReferenceServer, uris: list[str]) -> None:
    await costs.published(cache, server, uris, raw=False, rereads=True)


def cpu(started: float) -> float:
    return time.process_time() - started


def counted(profile: cProfile.Profile, n: int) -> tuple[float, float]:
    """(Python calls, event-loop callbacks) per re-read of a finished profile."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    calls = sum(v[1] for v in stats.values())
    callbacks = sum(
        v[1] for k, v in stats.items() if k[2] == "_run" and k[0].endswith("asyncio/events.py")
    )
    return calls / n, callbacks / n


async def measure(rounds: int, selected: int, loops: int) -> dict[str, Any]:
    uris = [uri_of(n) for n in range(selected)]
    server = ReferenceServer()
    for uri in uris:
        server.set(uri, TEXT, ttl_ms=HOUR_MS, mime_type="text/plain")
    engine, sid = acknowledged_engine(uris)
    plain = {uris[0]: TEXT}

    async def dict_get(uri: str) -> str:
        return plain[uri]

    seen: dict[str, list[float]] = {
        k: [] for k in ("awaited_dict_ns", "engine_per_s", "e2e_per_s", "floor_per_s")
    }
    store = MemoryStore(max_entries=2 * selected + 1000, max_bytes=1 << 40)
    async with FreshCache(
        InMemorySource(server), select=uris, store=store, read_timeout=600.0
    ) as cache:
        await live_and_fresh(cache, uris)
        await published(cache, server, uris)  # warm
        for _ in range(rounds):
            gc.collect()
            started = time.process_time()
            for _ in range(loops):
                await dict_get(uris[0])
            seen["awaited_dict_ns"].append(cpu(started) / loops * 1e9)
            replies = {uri: reply_of(uri) for uri in uris}  # made anew, as costs.py does
            gc.collect()
            started = time.process_time()
            engine_rereads(engine, sid, replies)
            seen["engine_per_s"].append(selected / cpu(started))
            gc.collect()
            seen["floor_per_s"].append(selected / await costs.reread_floor(uris))
            gc.collect()
            started = time.process_time()
            await published(cache, server, uris)
            seen["e2e_per_s"].append(selected / cpu(started))
            assert all(cache.status(u).state == "fresh" for u in uris)
        gc.collect()
        profile = cProfile.Profile()
        profile.enable()
        await published(cache, server, uris)
        profile.disable()
        calls_e2e, callbacks_e2e = counted(profile, selected)
        replies = {uri: reply_of(uri) for uri in uris}
        profile = cProfile.Profile()
        profile.enable()
        engine_rereads(engine, sid, replies)
        profile.disable()
        calls_engine, _ = counted(profile, selected)
    out: dict[str, Any] = {k: statistics.median(v) for k, v in seen.items()}
    dict_ns = out["awaited_dict_ns"]
    for name in ("engine", "e2e", "floor"):
        out[f"{name}_awaited_dicts"] = 1e9 / out[f"{name}_per_s"] / dict_ns
    out.update(
        calls_e2e=calls_e2e,
        calls_engine=calls_engine,
        callbacks_e2e=callbacks_e2e,
        load=" ".join(f"{x:.2f}" for x in os.getloadavg()),
    )
    return out


def show(label: str, r: dict[str, Any]) -> str:
    return (
        f"{label:<28} e2e {r['e2e_per_s'] / 1e3:6.1f}k/s {r['e2e_awaited_dicts']:6.1f} ad | "
        f"engine {r['engine_per_s'] / 1e3:6.1f}k/s {r['engine_awaited_dicts']:6.1f} ad | "
        f"floor {r['floor_awaited_dicts']:5.1f} ad | dict {r['awaited_dict_ns']:4.0f} ns | "
        f"calls {r['calls_e2e']:5.1f} / {r['calls_engine']:5.1f} | "
        f"callbacks {r['callbacks_e2e']:4.2f} | load {r['load']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--selected", type=int, default=10_000)
    parser.add_argument("--loops", type=int, default=100_000)
    parser.add_argument("--trees", nargs="+", type=Path)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not args.trees:
        result = asyncio.run(measure(args.rounds, args.selected, args.loops))
        print(json.dumps(result))
        return
    runs: dict[str, list[dict[str, Any]]] = {str(t): [] for t in args.trees}
    for pair in range(args.pairs):
        order = args.trees if pair % 2 == 0 else list(reversed(args.trees))
        for tree in order:
            env = {**os.environ, "FRESHCACHE_TREE": str(tree), "PYTHONPATH": str(tree)}
            line = (
                subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--rounds",
                        str(args.rounds),
                        "--selected",
                        str(args.selected),
                        "--loops",
                        str(args.loops),
                    ],
                    env=env,
                    check=True,
                    capture_output=True,
                    text=True,
                )
                .stdout.strip()
                .splitlines()[-1]
            )
            runs[str(tree)].append(json.loads(line))
            print(show(f"{tree.name} #{pair + 1}", runs[str(tree)][-1]), flush=True)
    medians = {
        tree: {k: statistics.median(r[k] for r in rs) for k in rs[0] if k != "load"}
        | {"load": "; ".join(r["load"] for r in rs)}
        for tree, rs in runs.items()
    }
    for tree, m in medians.items():
        print(show(f"{Path(tree).name} median", m))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"runs": runs, "medians": medians}, indent=2) + "\n")


if __name__ == "__main__":
    main()
