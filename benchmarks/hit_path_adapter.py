"""Hit-path cost through the official SDK client: freshcache vs. the SDK's own cache.

    python benchmarks/hit_path_adapter.py [--loops N] [--repeats R] [--json PATH]

Starts the official-SDK fixture server (tests/fixtures/sdk_server.py) on a free
loopback port, enters one ``mcp.Client`` (with the SDK's default response cache) and
compares, in the same process and event loop, on the same client:

- ``await client.read_resource(uri)``: the SDK's cached read (``cache_mode="use"``),
  served from its response cache inside the resource's ``ttlMs`` (60 s);
- ``await cache.read(uri)``: `FreshCache` over ``McpClientSource(client)``, the URI
  selected and covered by a live subscription, served from freshcache's hit index.

Both loops must be hits: the fixture's read counter is checked before and after.
Prints nanoseconds per call (best of R repeats of N calls) and the ratio, and writes
them to a JSON file. Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

import anyio
from mcp import Client

from freshcache import FreshCache, McpClientSource

URI = "guide://shipping/approval"
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.hit_path import per_call_async as per_call  # noqa: E402
from tests.conftest import SdkServer, start_sdk_server, stop_process  # noqa: E402


async def measure(server: SdkServer, loops: int, repeats: int) -> dict[str, float]:
    async with Client(server.url) as client:
        warm = await client.read_resource(URI)  # fills the SDK's response cache
        assert warm.ttl_ms >= 60_000
        async with FreshCache(McpClientSource(client), select=[URI]) as cache:
            assert (await cache.read(URI)).state == "fresh"
            # Wait (bounded) until the stream is live and the re-read after its ack landed.
            with anyio.fail_after(10):
                while True:
                    if cache.stream_status == "live" and cache.pending_reads == 0:
                        break
                    await anyio.sleep(0.01)
            hit = await cache.read(URI)
            assert (hit.state, hit.server_read) == ("fresh", False)
            before = server.reads(URI)
            results = {
                "sdk_client_read_resource_cached": await per_call(
                    lambda: client.read_resource(URI), loops, repeats
                ),
                "freshcache_read_over_mcp_client_source": await per_call(
                    lambda: cache.read(URI), loops, repeats
                ),
            }
            assert server.reads(URI) == before, "the benchmark must measure hits only"
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results" / "hit_path_adapter.json"
    )
    args = parser.parse_args()
    server = start_sdk_server()
    try:
        results = anyio.run(measure, server, args.loops, args.repeats)
    finally:
        stop_process(server.process)
    sdk = results["sdk_client_read_resource_cached"]
    ours = results["freshcache_read_over_mcp_client_source"]
    print(f"{'operation':<42} {'ns/call':>10} {'vs SDK cache':>13}")
    for name, ns in results.items():
        print(f"{name:<42} {ns:>10.0f} {ns / sdk:>12.3f}x")
    print(f"freshcache's hit is {sdk / ours:.1f}x faster than the SDK client's cached read")
    report = {
        "benchmark": "hit_path_adapter",
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "loops": args.loops,
        "repeats": args.repeats,
        "ns_per_call": {k: round(v, 1) for k, v in results.items()},
        "ratio_freshcache_to_sdk": round(ours / sdk, 4),
        "speedup_over_sdk": round(sdk / ours, 2),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {args.json}")


if __name__ == "__main__":
    main()
