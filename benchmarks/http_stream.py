"""How fast the HTTP source turns wire traffic into freshness decisions, on loopback.

    python benchmarks/http_stream.py [--updates N] [--restarts R] [--hits H] [--json PATH]

Measures, against `ReferenceHttpServer` on 127.0.0.1 in the same process, once with the
server on MCP 2026-07-28 and once on 2025-11-25 (session, GET stream,
``resources/subscribe``), side by side:

- SSE parsing throughput of `freshcache._sources._sse.SseParser` (and of httpx-sse's decoder on
  the same bytes, for scale), in MB/s and frames/s;
- the cost of the read loop around it (`freshcache._sources._sse.read_stream`: the silence rule's
  timer per chunk, one item at a time): frames/s through the loop beside the bare
  parser on the same chunks: in 64 KiB chunks, a frame per chunk (how notifications
  arrive one by one), and a frame per chunk once keep-alives have set the silence
  rule's rhythm (every wait for bytes is timed);
- the time from a ``notifications/resources/updated`` frame being written to the
  socket until the selected URI no longer reads fresh (the engine's invalidation):
  loopback transfer, httpx, the SSE parser, the message layer and the engine; median
  and p99;
- the time from a server restart (every socket closed, then listening again) until
  the selected URI reads fresh again, with the default reconnect backoff (which
  dominates: the first re-listen waits a jittered 0.25 to 0.5 s); on 2025 that
  includes a new ``initialize`` and ``resources/subscribe``;
- the hit path: ``cache.read`` of the covered selected URI (no server read; on 2025
  fresh until notified, on 2026 within its ``ttlMs``).

Not a pass/fail test: the figures go in the closing note and docs/speed.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import httpx
from httpx_sse._decoders import SSEDecoder, SSELineDecoder

from freshcache import FreshCache, HttpSource
from freshcache._core import ReconnectBudget
from freshcache._sources._sse import SseEvent, SseLimits, SseParser, read_stream
from freshcache.acceptance import ReferenceServer
from freshcache.acceptance._http_server import ReferenceHttpServer

URI = "guide://shipping/approval"


_FRAME = (
    b"event: message\r\ndata: "
    + json.dumps(
        {
            "jsonrpc": "2.0",
            "method": "notifications/resources/updated",
            "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": 7}, "uri": URI},
        }
    ).encode()
    + b"\r\n\r\n"
)


def parser_throughput(frames: int = 50_000, chunk: int = 65_536) -> dict[str, float]:
    stream = _FRAME * frames
    chunks = [stream[i : i + chunk] for i in range(0, len(stream), chunk)]
    best = float("inf")
    for _ in range(3):
        parser = SseParser()
        start = time.perf_counter()
        seen = sum(1 for c in chunks for item in parser.feed(c) if isinstance(item, SseEvent))
        best = min(best, time.perf_counter() - start)
        assert seen == frames
    theirs = float("inf")
    text_chunks = [c.decode() for c in chunks]
    for _ in range(3):
        lines, decoder = SSELineDecoder(), SSEDecoder()
        start = time.perf_counter()
        count = sum(
            1 for c in text_chunks for line in lines.decode(c) if decoder.decode(line) is not None
        )
        theirs = min(theirs, time.perf_counter() - start)
        assert count == frames
    megabytes = len(stream) / 1e6
    return {
        "bytes": len(stream),
        "mb_per_s": megabytes / best,
        "frames_per_s": frames / best,
        "httpx_sse_mb_per_s": megabytes / theirs,
    }


async def read_loop_cost(frames: int = 20_000) -> dict[str, float]:
    """Frames/s through `read_stream` and through the bare parser, same chunks, CPU time."""

    async def body(chunks: list[bytes]) -> AsyncIterator[bytes]:
        for c in chunks:
            yield c

    async def through_loop(chunks: list[bytes]) -> int:
        async with aclosing(read_stream(body(chunks), SseLimits())) as items:
            return sum([1 async for item in items if isinstance(item, SseEvent)])

    async def parser_only(chunks: list[bytes]) -> int:
        parser, seen = SseParser(), 0
        async for c in body(chunks):
            seen += sum(1 for item in parser.feed(c) if isinstance(item, SseEvent))
        return seen

    stream = _FRAME * frames
    shapes = {
        "64k_chunks": [stream[i : i + 65_536] for i in range(0, len(stream), 65_536)],
        "frame_per_chunk": [_FRAME] * frames,
        # Two keep-alives first: the silence rule has a rhythm, every chunk is timed.
        "frame_per_chunk_timed": [b": ka\r\n\r\n"] * 2 + [_FRAME] * frames,
    }
    report: dict[str, float] = {}
    for shape, chunks in shapes.items():
        best = {"loop": float("inf"), "parser": float("inf")}
        for _ in range(5):
            for name, run in (("loop", through_loop), ("parser", parser_only)):
                start = time.process_time()
                assert await run(chunks) == frames
                best[name] = min(best[name], time.process_time() - start)
        report[f"{shape}_loop_frames_per_s"] = frames / best["loop"]
        report[f"{shape}_parser_frames_per_s"] = frames / best["parser"]
        report[f"{shape}_loop_over_parser"] = best["loop"] / best["parser"]
    return report


REVISIONS = ("2026-07-28", "2025-11-25")


async def update_latency(updates: int, revision: str) -> dict[str, float]:
    server = ReferenceServer()
    server.set(URI, "v1", ttl_ms=3_600_000)
    written: list[int] = []  # when each listen frame left for the socket
    invalidated: list[int] = []
    samples: list[float] = []
    async with (
        ReferenceHttpServer(server, keepalive_interval=1.0, revision=revision) as http,  # type: ignore[arg-type]
        httpx.AsyncClient(trust_env=False) as client,
    ):
        original = http.count_frame

        def count_frame(request_id: str | int) -> None:
            written.append(time.perf_counter_ns())
            original(request_id)

        http.count_frame = count_frame  # type: ignore[method-assign]
        source = HttpSource(http.url, client=client)
        async with FreshCache(source, select=[URI]) as cache:
            engine = cache.engine
            on_invalidation = engine.copies.on_invalidation

            landed = anyio.Event()

            def noted(event: Any) -> None:
                invalidated.append(time.perf_counter_ns())
                landed.set()
                if on_invalidation is not None:
                    on_invalidation(event)

            engine.copies.on_invalidation = noted
            with anyio.fail_after(10):
                while not (cache.stream_status == "live" and cache.status(URI).state == "fresh"):
                    await anyio.sleep(0.001)
            for _ in range(updates):
                written.clear()
                invalidated.clear()
                landed = anyio.Event()
                server.notify_updated(URI)
                with anyio.fail_after(10):
                    await landed.wait()  # the loop sleeps in epoll, as in real use
                    # Let the re-read land so every round starts fresh.
                    while cache.status(URI).state != "fresh" or cache.pending_reads:
                        await anyio.sleep(0.0005)
                samples.append((invalidated[0] - written[-1]) / 1e3)
    return _summary(samples)


async def restart_to_fresh(restarts: int, revision: str) -> dict[str, float]:
    server = ReferenceServer()
    server.set(URI, "v1", ttl_ms=3_600_000)
    times: list[float] = []
    async with (
        ReferenceHttpServer(server, revision=revision) as http,  # type: ignore[arg-type]
        httpx.AsyncClient(trust_env=False) as client,
        FreshCache(HttpSource(http.url, client=client), select=[URI]) as cache,
    ):
        for round_number in range(restarts):
            with anyio.fail_after(30):
                while not (cache.stream_status == "live" and cache.status(URI).state == "fresh"):
                    await anyio.sleep(0.001)
            server.down = True
            server.drop_streams()
            await http.go_down()
            server.set(URI, f"v{round_number + 2}")
            server.down = False
            started = time.perf_counter()
            await http.come_up()
            with anyio.fail_after(30):
                while cache.status(URI).text != f"v{round_number + 2}":
                    await anyio.sleep(0.001)
            times.append((time.perf_counter() - started) * 1e3)
            # Rounds follow each other within seconds: a fresh budget each time keeps
            # its "3 quick deaths in a row, 5 an hour" rules out of the measurement.
            cache._streams.supervisor.budget = ReconnectBudget()
    return _summary(times, unit="ms")


async def hit_path(hits: int, revision: str) -> dict[str, float]:
    server = ReferenceServer()
    server.set(URI, "v1", ttl_ms=3_600_000)
    async with (
        ReferenceHttpServer(server, revision=revision) as http,  # type: ignore[arg-type]
        httpx.AsyncClient(trust_env=False) as client,
        FreshCache(HttpSource(http.url, client=client), select=[URI]) as cache,
    ):
        with anyio.fail_after(30):
            while not (URI in cache.engine.covered and cache.status(URI).state == "fresh"):
                await anyio.sleep(0.001)
        reads = server.reads
        started = time.perf_counter_ns()
        for _ in range(hits):
            result = await cache.read(URI)
        elapsed = time.perf_counter_ns() - started
        assert result.state == "fresh"
        assert server.reads == reads  # every one a hit
    return {"n": hits, "mean_us": elapsed / hits / 1e3}


def _summary(values: list[float], unit: str = "us") -> dict[str, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "n": len(values),
        f"median_{unit}": statistics.median(values),
        f"p99_{unit}": p99,
        f"max_{unit}": ordered[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=2000)
    parser.add_argument("--restarts", type=int, default=5)
    parser.add_argument("--hits", type=int, default=100_000)
    parser.add_argument(
        "--json",
        type=Path,
        default=Path(__file__).parent / "results" / "http_stream.json",
    )
    args = parser.parse_args()
    report = {
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "sse_parser": parser_throughput(),
        "sse_read_loop": anyio.run(read_loop_cost),
        "update_to_not_fresh": {r: anyio.run(update_latency, args.updates, r) for r in REVISIONS},
        "restart_to_fresh": {r: anyio.run(restart_to_fresh, args.restarts, r) for r in REVISIONS},
        "hit_path": {r: anyio.run(hit_path, args.hits, r) for r in REVISIONS},
    }
    print(json.dumps(report, indent=2))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
