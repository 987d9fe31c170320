"""A fresh read through ``freshcache proxy`` beside a direct read upstream and a floor.

    python benchmarks/proxy.py [--reads 300] [--json PATH]

Three MCP servers on 127.0.0.1, all Streamable HTTP, all the official SDK's server, each
read by the same host (the official SDK client, 2026-07-28, its own response cache off
so every read is a request) ``--reads`` times for the same resource, in one run:

- **proxy**: ``freshcache proxy --http`` in front of the SDK fixture server
  (`tests/fixtures/sdk_server.py`): after the first read the text is fresh in the
  proxy's cache (selected, covered by the upstream's listen stream), so the upstream
  is not asked again;
- **direct**: the same fixture server read directly (every read runs its handler);
- **floor**: an SDK server answering from a dict (`--floor-server`): what the server
  library itself costs per request.

Printed: the median and p90 latency of each, the ratios proxy/direct and proxy/floor
(the proxy's own cost over the library's), and the upstream reads per host read (the
fixture's read counter). Ratios, side by side: the absolute figures depend on the
machine and its load. Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import free_port, start_sdk_server, stop_process  # noqa: E402

U = "guide://shipping/approval"
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}


def floor_server(port: int) -> None:
    """An SDK lowlevel server answering ``resources/read`` from a dict."""
    import mcp_types as types
    import uvicorn
    from mcp.server import Server

    texts = {U: "Shipping approval v1: orders over $500 need a manager."}

    async def read(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, text=texts[uri], mime_type="text/plain")],
            ttl_ms=0,
            cache_scope="private",
        )

    async def listed(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[types.Resource(uri=U, name="approval")])

    server = Server("floor", on_read_resource=read, on_list_resources=listed)
    app = server.streamable_http_app(stateless_http=True)  # as the fixture is served
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def _wait_for(port: int, process: subprocess.Popen[bytes]) -> None:
    import socket

    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the floor server on port {port} never listened") from None
            time.sleep(0.05)


async def timed_reads(urls: dict[str, str], reads: int) -> dict[str, list[float]]:
    """``reads`` reads from each server, in turns (one from each, again and again), so
    the machine's load falls on the three alike."""
    from contextlib import AsyncExitStack

    from mcp import Client

    async with AsyncExitStack() as stack:
        clients = {
            name: await stack.enter_async_context(
                Client(url, mode="2026-07-28", cache=None, read_timeout_seconds=30)
            )
            for name, url in urls.items()
        }
        for client in clients.values():
            await client.read_resource(U)  # warm: connection, first upstream read
        times: dict[str, list[float]] = {name: [] for name in urls}
        for _ in range(reads):
            for name, client in clients.items():
                start = time.perf_counter()
                result = await client.read_resource(U)
                times[name].append(time.perf_counter() - start)
                assert result.contents
        return times


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "median_ms": statistics.median(ordered) * 1000,
        "p90_ms": ordered[int(len(ordered) * 0.9)] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=300)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--floor-server", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_server:
        floor_server(args.floor_server)
        return
    upstream = start_sdk_server()
    floor_port = free_port()
    floor = subprocess.Popen([sys.executable, __file__, "--floor-server", str(floor_port)], env=ENV)
    err = Path(os.environ.get("TMPDIR", "/tmp")) / f"proxy-bench-{os.getpid()}.err"
    with err.open("wb") as stderr:
        proxy = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "freshcache._cli",
                "proxy",
                "--http",
                "127.0.0.1:0",
                upstream.url,
            ],
            stderr=stderr,
            env=ENV,
        )
    try:
        deadline = time.monotonic() + 60
        while not (found := re.search(r"serving (http://\S+/mcp)", err.read_text())):
            if proxy.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the proxy never served: {err.read_text()}")
            time.sleep(0.05)
        proxy_url, floor_url = found[1], f"http://127.0.0.1:{floor_port}/mcp"
        _wait_for(floor_port, floor)
        results: dict[str, Any] = {}
        urls = {"proxy": proxy_url, "direct": upstream.url, "floor": floor_url}
        before = upstream.reads(U)
        times = anyio.run(timed_reads, urls, args.reads)
        # The direct reads are the fixture's too: one each, plus its warm-up read.
        upstream_reads = upstream.reads(U) - before - (args.reads + 1)
        for name, taken in times.items():
            results[name] = summary(taken)
        proxy_ms = results["proxy"]["median_ms"]
        results["ratios"] = {
            "proxy_over_direct": proxy_ms / results["direct"]["median_ms"],
            "proxy_over_floor": proxy_ms / results["floor"]["median_ms"],
        }
        results["upstream_reads_per_host_read"] = upstream_reads / (args.reads + 1)
        results["reads"] = args.reads
        for name in ("proxy", "direct", "floor"):
            row = results[name]
            print(f"{name:7} median {row['median_ms']:7.2f} ms   p90 {row['p90_ms']:7.2f} ms")
        print(
            f"proxy/direct {results['ratios']['proxy_over_direct']:.2f}   "
            f"proxy/floor {results['ratios']['proxy_over_floor']:.2f}   "
            f"upstream reads per host read {results['upstream_reads_per_host_read']:.3f}"
        )
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")
    finally:
        for process in (proxy, floor):
            process.terminate()
            process.wait(timeout=10)
        stop_process(upstream.process)
        err.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
