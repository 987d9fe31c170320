"""A cold miss against the engine alone and the transport alone (issue 38, item 2).

    python benchmarks/cold_miss.py [--misses 20000] [--rounds 3] [--fill 100000]
                                   [--readers 1000] [--json PATH]

One process, one event loop, against the in-memory reference server (`ReferenceServer`
behind `InMemorySource`), with no stream (``listen=False``: a miss is a plain miss).
Each figure is CPU time (``time.process_time``), the median of ``--rounds`` rounds:

- **cold miss**: ``await cache.read(uri)`` of a URI never read, one at a time;
- **the engine alone**: ``begin_read`` + ``finish_read`` of the same URIs with the
  source's replies made beforehand (what a miss must do to judge a reply);
- **the transport alone**: ``await source.read_resource(uri, None)`` of the same URIs;
- **counted per miss** (cProfile over ``--misses`` misses, not timed): Python calls,
  event-loop callbacks (asyncio ``Handle._run``), tasks made, cancel scopes made;
- **fill**: ``--fill`` distinct URIs read one after the other into a cache whose
  store holds them all (wall and CPU seconds);
- **concurrent**: ``--readers`` tasks each reading its own never-read URI at once,
  CPU per miss, against the same number of misses one at a time; ``spawn_us`` is the
  row's own cost (as many tasks that each take one loop turn), taken off in
  ``concurrent_less_spawn_vs_alone``. Both caches have read one other URI first: a
  cache's first read runs in a task of its own (`ReadFlights.inline` is learned from
  it), and so do the reads that start while it is under way.

``--wire http`` or ``--wire stdio`` measures the same over a real transport: ``freshcache
serve DIR`` (the embedded reference server, a subprocess: its CPU is not counted) over
HTTP on 127.0.0.1 or over stdio, serving ``--misses`` files. Beside the cold miss, in
the same rounds: **the transport alone** (``source.read_resource``) and **a raw
exchange** (the transport's own floor: the same JSON-RPC ``resources/read`` that
`HttpSource` sends, posted with the same ``httpx`` client and its body read; over stdio
one line written to the server process and one line read back, with anyio's streams).
The concurrent row reads ``--readers`` URIs at once against the same URIs one at a time;
its floor, ``transport_concurrent``, as many ``source.read_resource`` at once, each in a
task of the benchmark's (against the transport alone, one at a time).

Writes ``benchmarks/results/cold_miss.json`` with ``--json``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import platform
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from freshcache import FreshCache, HttpSource, MemoryStore, StdioSource  # noqa: E402
from freshcache._core import FreshnessEngine, ReadReply  # noqa: E402
from freshcache.acceptance import InMemorySource, ReferenceServer  # noqa: E402

TEXT = "x" * 32
HOUR_MS = 3_600_000


def uri_of(n: int) -> str:
    return f"doc://cold/{n}"


def server_with(count: int) -> ReferenceServer:
    server = ReferenceServer()
    for n in range(count):
        server.set(uri_of(n), TEXT, ttl_ms=HOUR_MS, mime_type="text/plain")
    return server


def cache_over(server: ReferenceServer, size: int) -> FreshCache:
    store = MemoryStore(max_entries=size + 1000, max_bytes=1 << 40)
    return FreshCache(InMemorySource(server), listen=False, store=store, read_timeout=600.0)


async def misses(cache: FreshCache, uris: list[str]) -> float:
    gc.collect()
    started = time.process_time()
    for uri in uris:
        result = await cache.read(uri)
        assert result.state == "fresh", result
    return time.process_time() - started


async def transport_alone(source: InMemorySource, uris: list[str]) -> float:
    gc.collect()
    started = time.process_time()
    for uri in uris:
        await source.read_resource(uri, None)
    return time.process_time() - started


def engine_alone(uris: list[str], replies: list[ReadReply]) -> float:
    engine = FreshnessEngine(store=MemoryStore(max_entries=len(uris) + 1000, max_bytes=1 << 40))
    gc.collect()
    started = time.process_time()
    for uri, reply in zip(uris, replies, strict=True):
        engine.finish_read(engine.begin_read(uri, None), reply)
    return time.process_time() - started


async def concurrent(cache: FreshCache, uris: list[str]) -> float:
    gc.collect()
    started = time.process_time()
    async with anyio.create_task_group() as tg:
        for uri in uris:
            tg.start_soon(cache.read, uri)
    return time.process_time() - started


async def transport_concurrent(source: Any, uris: list[str]) -> float:
    """The transport's own floor for the concurrent row: as many reads at once, each in
    a task, without the cache."""
    gc.collect()
    started = time.process_time()
    async with anyio.create_task_group() as tg:
        for uri in uris:
            tg.start_soon(source.read_resource, uri, None)
    return time.process_time() - started


async def spawned_only(count: int) -> float:
    """The concurrent row's own cost: ``count`` tasks that each take one loop turn."""

    async def one() -> None:
        await asyncio.sleep(0)

    gc.collect()
    started = time.process_time()
    async with anyio.create_task_group() as tg:
        for _ in range(count):
            tg.start_soon(one)
    return time.process_time() - started


def counted(profile: cProfile.Profile, n: int) -> dict[str, float]:
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]

    def named(file_end: str, name: str) -> int:
        return sum(v[1] for k, v in stats.items() if k[2] == name and k[0].endswith(file_end))

    return {
        "calls": sum(v[1] for v in stats.values()) / n,
        "loop_callbacks": named("asyncio/events.py", "_run") / n,
        "loop_turns": named("asyncio/base_events.py", "_run_once") / n,
        # (every task, asyncio's or anyio's, is made by the loop's `create_task`)
        "tasks": named("asyncio/base_events.py", "create_task") / n,
        "cancel_scopes": named("anyio/_backends/_asyncio.py", "__enter__") / n,
    }


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    n, rounds = args.misses, args.rounds
    seen: dict[str, list[float]] = {
        k: []
        for k in ("miss_us", "engine_us", "transport_us", "concurrent_us", "spawn_us", "alone_us")
    }
    for round_ in range(rounds):
        server = server_with(n)
        uris = [uri_of(k) for k in range(n)]
        async with cache_over(server, n) as cache:
            seen["miss_us"].append(await misses(cache, uris) / n * 1e6)
        source = InMemorySource(server)
        await source.start()
        seen["transport_us"].append(await transport_alone(source, uris) / n * 1e6)
        replies = [await source.read_resource(uri, None) for uri in uris]
        seen["engine_us"].append(engine_alone(uris, replies) / n * 1e6)  # type: ignore[arg-type]
        readers = uris[: args.readers]
        async with cache_over(server, n) as cache:
            await cache.read(uris[-1])  # a cache that has read before (see the docstring)
            seen["concurrent_us"].append(await concurrent(cache, readers) / len(readers) * 1e6)
        seen["spawn_us"].append(await spawned_only(len(readers)) / len(readers) * 1e6)
        async with cache_over(server, n) as cache:
            await cache.read(uris[-1])
            seen["alone_us"].append(await misses(cache, readers) / len(readers) * 1e6)
        print(f"round {round_ + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in seen.items()))
    row: dict[str, Any] = {k: round(statistics.median(v), 2) for k, v in seen.items()}
    row["miss_vs_engine"] = round(row["miss_us"] / row["engine_us"], 2)
    row["miss_vs_transport"] = round(row["miss_us"] / row["transport_us"], 2)
    row["miss_vs_engine_plus_transport"] = round(
        row["miss_us"] / (row["engine_us"] + row["transport_us"]), 2
    )
    row["concurrent_vs_alone"] = round(row["concurrent_us"] / row["alone_us"], 2)
    row["concurrent_less_spawn_vs_alone"] = round(
        (row["concurrent_us"] - row["spawn_us"]) / row["alone_us"], 2
    )
    # Counted, not timed.
    server = server_with(n)
    uris = [uri_of(k) for k in range(n)]
    async with cache_over(server, n) as cache:
        await misses(cache, uris[:10])
        profile = cProfile.Profile()
        profile.enable()
        await misses(cache, uris[10:])
        profile.disable()
    row.update({f"per_miss_{k}": round(v, 2) for k, v in counted(profile, n - 10).items()})
    source = InMemorySource(server)
    await source.start()
    profile = cProfile.Profile()
    profile.enable()
    await transport_alone(source, uris)
    profile.disable()
    row["transport_calls"] = round(counted(profile, n)["calls"], 2)
    row["transport_loop_callbacks"] = round(counted(profile, n)["loop_callbacks"], 2)
    if args.fill:
        server = server_with(args.fill)
        uris = [uri_of(k) for k in range(args.fill)]
        async with cache_over(server, args.fill) as cache:
            wall = time.perf_counter()
            row["fill_cpu_s"] = round(await misses(cache, uris), 2)
            row["fill_wall_s"] = round(time.perf_counter() - wall, 2)
            row["fill_entries"] = cache.store.entry_count
    row["load_average"] = [round(x, 1) for x in os.getloadavg()]
    row["machine"] = (
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"
    )
    return row


class _Served:
    """``freshcache serve DIR`` over ``wire``, serving ``count`` files."""

    def __init__(self, wire: str, count: int) -> None:
        self.wire = wire
        self.folder = Path(tempfile.mkdtemp(prefix="cold_miss_"))
        for n in range(count):
            (self.folder / f"f{n}.txt").write_text(TEXT, encoding="utf-8")
        self.uris = [(self.folder / f"f{n}.txt").as_uri() for n in range(count)]
        self.argv = [sys.executable, "-m", "freshcache", "serve", str(self.folder)]
        self.url = ""
        self.process: subprocess.Popen[str] | None = None
        self.sent: tuple[dict[str, str], dict[str, Any]] | None = None
        """Headers and JSON body of a ``resources/read`` `HttpSource` sent (the raw rows')."""

    def __enter__(self) -> _Served:
        if self.wire == "http":
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            self.process = subprocess.Popen(
                [*self.argv, "--port", "0"], stdout=subprocess.PIPE, text=True, env=env
            )
            assert self.process.stdout is not None
            line = self.process.stdout.readline()
            self.url = line.split()[2]
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)

    def source(self) -> Any:
        if self.wire == "http":
            import httpx

            async def note(request: httpx.Request) -> None:
                if self.sent is None and b'"resources/read"' in request.content:
                    self.sent = (dict(request.headers), json.loads(request.content))

            client = httpx.AsyncClient(event_hooks={"request": [note]})
            return HttpSource(self.url, client=client), client
        return StdioSource([*self.argv, "--stdio"]), None


async def raw_http(served: _Served, client: Any, uris: list[str]) -> float:
    assert served.sent is not None
    headers, body = served.sent
    headers = {k: v for k, v in headers.items() if k.lower() not in ("content-length",)}
    gc.collect()
    started = time.process_time()
    for n, uri in enumerate(uris):
        body["id"] = n + 10**6
        body["params"]["uri"] = headers["mcp-name"] = uri
        response = await client.post(served.url, content=json.dumps(body), headers=headers)
        await response.aread()
        assert response.status_code == 200, response.text
    return time.process_time() - started


async def raw_stdio(served: _Served, uris: list[str]) -> float:
    """One JSON-RPC line out and one back per URI, against its own server process."""
    from anyio.streams.buffered import BufferedByteReceiveStream

    assert served.sent is not None
    _, body = served.sent
    async with await anyio.open_process([*served.argv, "--stdio"]) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        lines = BufferedByteReceiveStream(process.stdout)
        gc.collect()
        started = time.process_time()
        for n, uri in enumerate(uris):
            body["id"] = n + 10**6
            body["params"]["uri"] = uri
            await process.stdin.send(json.dumps(body).encode() + b"\n")
            answer = await lines.receive_until(b"\n", 1 << 22)
            assert b'"result"' in answer, answer[:200]
        spent = time.process_time() - started
        process.terminate()
    return spent


async def measure_wire(args: argparse.Namespace) -> dict[str, Any]:
    """The rows of the docstring over ``--wire`` (``http`` or ``stdio``)."""
    n, rounds = args.misses, args.rounds
    seen: dict[str, list[float]] = {
        k: []
        for k in (
            "miss_us",
            "transport_us",
            "raw_us",
            "concurrent_us",
            "alone_us",
            "transport_concurrent_us",
        )
    }
    row: dict[str, Any] = {"wire": args.wire, "misses": n}
    with _Served(args.wire, n) as served:
        uris = served.uris
        readers = uris[: args.readers]

        def store() -> MemoryStore:
            return MemoryStore(max_entries=n + 1000, max_bytes=1 << 40)

        source, client = served.source()  # warm: what loads once per process loads here
        async with FreshCache(source, listen=False, store=store(), read_timeout=600) as cache:
            await cache.read(uris[-1])
        if client is not None:
            await client.aclose()
        for round_ in range(rounds):
            source, client = served.source()
            async with FreshCache(source, listen=False, store=store(), read_timeout=600) as cache:
                seen["miss_us"].append(await misses(cache, uris) / n * 1e6)
            if client is not None:
                await client.aclose()
            source, client = served.source()
            await source.start()
            seen["transport_us"].append(await transport_alone(source, uris) / n * 1e6)
            spent = await transport_concurrent(source, uris[n - len(readers) :])
            seen["transport_concurrent_us"].append(spent / len(readers) * 1e6)
            if client is not None:
                seen["raw_us"].append(await raw_http(served, client, uris) / n * 1e6)
            elif served.sent is None:  # the message `StdioSource` sends, as it makes it
                params = source.protocol.read_rounds(uris[0]).params
                message = source.protocol.request(0, "resources/read", params, track=False)
                served.sent = ({}, json.loads(json.dumps(message.message)))
            await source.aclose()
            if client is not None:
                await client.aclose()
            else:
                seen["raw_us"].append(await raw_stdio(served, uris) / n * 1e6)
            source, client = served.source()
            async with FreshCache(source, listen=False, store=store(), read_timeout=600) as cache:
                await cache.read(uris[-1])
                seen["concurrent_us"].append(await concurrent(cache, readers) / len(readers) * 1e6)
            if client is not None:
                await client.aclose()
            source, client = served.source()
            async with FreshCache(source, listen=False, store=store(), read_timeout=600) as cache:
                await cache.read(uris[-1])
                seen["alone_us"].append(await misses(cache, readers) / len(readers) * 1e6)
            if client is not None:
                await client.aclose()
            print(f"round {round_ + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in seen.items()))
        row.update({k: round(statistics.median(v), 1) for k, v in seen.items()})
        row["miss_vs_transport"] = round(row["miss_us"] / row["transport_us"], 2)
        row["miss_vs_raw"] = round(row["miss_us"] / row["raw_us"], 2)
        row["transport_vs_raw"] = round(row["transport_us"] / row["raw_us"], 2)
        row["concurrent_vs_alone"] = round(row["concurrent_us"] / row["alone_us"], 2)
        row["transport_concurrent_vs_alone"] = round(
            row["transport_concurrent_us"] / row["transport_us"], 2
        )
        # Counted, not timed.
        source, client = served.source()
        async with FreshCache(source, listen=False, store=store(), read_timeout=600) as cache:
            await misses(cache, uris[:10])
            profile = cProfile.Profile()
            profile.enable()
            await misses(cache, uris[10:])
            profile.disable()
        if client is not None:
            await client.aclose()
        row.update({f"per_miss_{k}": round(v, 2) for k, v in counted(profile, n - 10).items()})
        source, client = served.source()
        await source.start()
        profile = cProfile.Profile()
        profile.enable()
        await transport_alone(source, uris)
        profile.disable()
        await source.aclose()
        if client is not None:
            await client.aclose()
        row.update({f"transport_{k}": round(v, 2) for k, v in counted(profile, n).items()})
    row["load_average"] = [round(x, 1) for x in os.getloadavg()]
    row["machine"] = (
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"
    )
    return row


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--misses", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fill", type=int, default=100_000)
    parser.add_argument("--readers", type=int, default=1000)
    parser.add_argument("--wire", choices=("memory", "http", "stdio"), default="memory")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = asyncio.run(measure(args) if args.wire == "memory" else measure_wire(args))
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
