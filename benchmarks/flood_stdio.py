"""How many notifications per second the stdio source takes in a flood, beside HTTP.

    python benchmarks/flood_stdio.py [--updates N] [--repeats R] [--json PATH]

Measures, on this machine:

- **demultiplexer alone** (sans-IO, one process): ``Demultiplexer.feed`` over N
  ``notifications/resources/updated`` lines in 64 KiB chunks: line splitting, JSON,
  the message layer, routing by subscription id. Beside it, the same N notifications
  as SSE frames through the HTTP source's path (``SseParser`` then the same message
  layer): the per-message client cost of each transport, like for like.
- **stdio end to end**: the fault server (``python -m freshcache.acceptance._stdio_server``,
  its own process) writes N updates to one open subscription as fast as the pipe
  takes them; timed from the command until the listen iterator has yielded the N-th
  event (pipe, reader task, demultiplexer, per-subscription queue, consumer).
- **stdio into the cache**: the same flood through `FreshCache` (updates for a cached,
  unselected URI), timed until the engine has counted N notifications.
- **HTTP end to end**, for comparison: `ReferenceHttpServer` in this process (it shares
  the event loop with the client, so this is a lower bound), N updates pushed in
  batches of 5,000 (its per-subscriber queue holds 10,000), timed until the listen
  iterator has yielded the N-th event.

Prints a table and writes the figures to ``benchmarks/results/flood_stdio.json``. Not a
pass/fail test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio

from freshcache import FreshCache, StdioSource
from freshcache._core import ListenAcknowledged, ResourceUpdated
from freshcache._core._backoff import BackoffSettings
from freshcache._protocol._client import ClientProtocol
from freshcache._protocol._wire import parse_message
from freshcache._sources._stdio import Demultiplexer, EventFor
from freshcache.acceptance._stdio_world import ControlChannel

SELECTED = "guide://shipping/approval"
OTHER = "guide://shipping/rates"
SID = "listen-1"
CHUNK = 65_536


def _notification(sid: str | int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": sid}, "uri": OTHER},
    }


def _chunks(data: bytes) -> list[bytes]:
    return [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]


def demux_alone(updates: int, repeats: int) -> dict[str, float]:
    line = json.dumps(_notification(SID), separators=(",", ":")).encode() + b"\n"
    chunks = _chunks(line * updates)
    best = float("inf")
    for _ in range(repeats):
        demux = Demultiplexer(max_line_bytes=1 << 20)
        demux.open_subscription(SID)
        started = time.perf_counter()
        routed = sum(1 for c in chunks for d in demux.feed(c) if isinstance(d, EventFor))
        best = min(best, time.perf_counter() - started)
        assert routed == updates
    return {"messages_per_s": updates / best, "seconds": best, "bytes": len(line) * updates}


def sse_path_alone(updates: int, repeats: int) -> dict[str, float] | None:
    try:
        from freshcache._sources._sse import SseEvent, SseParser
    except ImportError:  # the HTTP source is not there
        return None
    frame = b"event: message\r\ndata: " + json.dumps(_notification(SID)).encode() + b"\r\n\r\n"
    chunks = _chunks(frame * updates)
    best = float("inf")
    for _ in range(repeats):
        parser = SseParser()
        protocol = ClientProtocol("benchmark")
        protocol.open_subscription(SID)
        started = time.perf_counter()
        routed = 0
        for chunk in chunks:
            for item in parser.feed(chunk):
                if isinstance(item, SseEvent):
                    got = protocol.receive(parse_message(json.loads(item.data)), stream=SID)
                    routed += isinstance(getattr(got, "event", None), ResourceUpdated)
        best = min(best, time.perf_counter() - started)
        assert routed == updates
    return {"messages_per_s": updates / best, "seconds": best, "bytes": len(frame) * updates}


def _fault_server(tmp: Path) -> tuple[StdioSource, ControlChannel]:
    state, control = tmp / "state.json", tmp / "control.json"
    source = StdioSource(
        [
            sys.executable,
            "-m",
            "freshcache.acceptance._stdio_server",
            "--state",
            str(state),
            "--control-file",
            str(control),
        ],
        timeout=10.0,
        max_backlog=1_000_000,
    )
    return source, ControlChannel(control)


async def _command(source: StdioSource, channel: ControlChannel, payload: dict[str, Any]) -> None:
    with anyio.fail_after(10):
        while await channel.command(source.pid, payload) is None:  # its port comes a moment later
            await anyio.sleep(0.01)


async def stdio_end_to_end(updates: int, repeats: int) -> dict[str, float]:
    best = float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        source, channel = _fault_server(Path(tmp))
        try:
            assert (await source.start()).reachable
            for _ in range(repeats):
                async with aclosing(source.listen(frozenset({OTHER}), False)) as events:
                    with anyio.fail_after(10):
                        async for event in events:
                            if isinstance(event, ListenAcknowledged):
                                break
                    started = time.perf_counter()
                    await _command(source, channel, {"op": "flood", "uri": OTHER, "count": updates})
                    got = 0
                    with anyio.fail_after(120):
                        async for event in events:
                            got += isinstance(event, ResourceUpdated)
                            if got == updates:
                                break
                    best = min(best, time.perf_counter() - started)
            assert source.counters.overflows == 0
        finally:
            await channel.aclose()
            await source.aclose()
    return {"messages_per_s": updates / best, "seconds": best}


async def stdio_into_cache(updates: int, repeats: int) -> dict[str, float]:
    best = float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        source, channel = _fault_server(Path(tmp))
        try:
            backoff = BackoffSettings(base=0.01, cap=0.05, quick_death=0.0)
            async with FreshCache(source, select=[SELECTED], backoff=backoff) as cache:
                with anyio.fail_after(20):
                    while cache.stream_status != "live":
                        await anyio.sleep(0.005)
                for _ in range(repeats):
                    await cache.read(OTHER)
                    counted = cache.engine.counters.notifications
                    started = time.perf_counter()
                    await _command(source, channel, {"op": "flood", "uri": OTHER, "count": updates})
                    with anyio.fail_after(120):
                        while cache.engine.counters.notifications < counted + updates:
                            await anyio.sleep(0.001)
                    best = min(best, time.perf_counter() - started)
                    assert cache.status(OTHER).state != "fresh"  # invalidated, as it must be
        finally:
            await channel.aclose()
    return {"messages_per_s": updates / best, "seconds": best}


async def http_end_to_end(updates: int, repeats: int) -> dict[str, float] | None:
    try:
        import httpx

        from freshcache import HttpSource
        from freshcache.acceptance import ReferenceServer
        from freshcache.acceptance._http_server import ReferenceHttpServer
    except ImportError:
        return None
    batch = 5_000
    best = float("inf")
    server = ReferenceServer()
    server.set(OTHER, "v1")
    async with (
        ReferenceHttpServer(server, keepalive_interval=None) as http,
        httpx.AsyncClient(trust_env=False) as client,
    ):
        source = HttpSource(http.url, client=client)
        for _ in range(repeats):
            async with aclosing(source.listen(frozenset({OTHER}), False)) as events:
                with anyio.fail_after(10):
                    async for event in events:
                        if isinstance(event, ListenAcknowledged):
                            break
                started = time.perf_counter()
                got = 0
                with anyio.fail_after(120):
                    while got < updates:
                        for _ in range(min(batch, updates - got)):
                            server.notify_updated(OTHER)
                        target = min(updates, got + batch)
                        async for event in events:
                            got += isinstance(event, ResourceUpdated)
                            if got == target:
                                break
                best = min(best, time.perf_counter() - started)
        await source.aclose()
    return {"messages_per_s": updates / best, "seconds": best}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results" / "flood_stdio.json"
    )
    args = parser.parse_args()
    n, r = args.updates, args.repeats
    rows = {
        "stdio demultiplexer alone (sans-IO)": demux_alone(n, r),
        "HTTP SSE parser + message layer (sans-IO)": sse_path_alone(n, r),
        "stdio end to end (server in its own process)": anyio.run(stdio_end_to_end, n, r),
        "stdio into FreshCache's engine": anyio.run(stdio_into_cache, n, r),
        "HTTP end to end (server in this process)": anyio.run(http_end_to_end, n, r),
    }
    print(f"{n:,} notifications/resources/updated, best of {r}")
    print(f"{'path':<48} {'messages/s':>12} {'seconds':>9}")
    for name, figures in rows.items():
        if figures is None:
            print(f"{name:<48} {'n/a':>12}")
            continue
        print(f"{name:<48} {figures['messages_per_s']:>12,.0f} {figures['seconds']:>9.3f}")
    report = {
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "updates": n,
        "repeats": r,
        "results": rows,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
