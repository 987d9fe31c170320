"""Print the trace of seed case 8 with OpenTelemetry's console exporter.

    python examples/trace_seed8.py          # needs opentelemetry-sdk (the test extra)

The reference server runs on 127.0.0.1; the cache reads the selected resource at v1;
the server goes down, changes the resource to v2 while nobody listens, and comes back.
freshcache re-listens, re-reads and hands out v2. Each finished span is printed on
one line (a compact formatter for the console exporter), children indented.
"""

from __future__ import annotations

import anyio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from freshcache import BackoffSettings, FreshCache, HttpSource
from freshcache.acceptance._http_server import ReferenceHttpServer
from freshcache.testing import ReferenceServer

URI = "guide://shipping/approval"
SHOWN = (
    "mcp.resource.uri",
    "jsonrpc.request.id",
    "error.type",
    "freshcache.state",
    "freshcache.reason",
    "freshcache.version",
    "freshcache.server_read",
    "freshcache.listen.attempt",
)


def one_line(span: ReadableSpan) -> str:
    depth = 0 if span.parent is None else 1
    attrs = " ".join(f"{k}={span.attributes[k]}" for k in SHOWN if k in (span.attributes or {}))
    events = "".join(
        f"\n{'  ' * (depth + 1)}event {e.name} "
        + " ".join(
            f"{k}={v}" for k, v in (e.attributes or {}).items() if k != "freshcache.subscription_id"
        )
        for e in span.events
    )
    return f"{'  ' * depth}{span.name} [{span.kind.name.lower()}] {attrs}{events}\n"


async def main() -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(formatter=one_line)))
    server = ReferenceServer()
    server.set(URI, "Shipping approval v1")
    async with ReferenceHttpServer(server) as http:
        backoff = BackoffSettings(base=0.05, cap=0.2)
        async with FreshCache(
            HttpSource(http.url), select=[URI], backoff=backoff, tracer_provider=provider
        ) as cache:
            with anyio.fail_after(10):
                while cache.status(URI).state != "fresh":
                    await anyio.sleep(0.01)
            print("# read:", (await cache.read(URI)).text, flush=True)
            print("# server goes down, changes the text, comes back", flush=True)
            await http.go_down()
            server.set(URI, "Shipping approval v2")
            await anyio.sleep(0.2)
            print(
                "# status while down:",
                cache.status(URI).state,
                cache.status(URI).reason,
                flush=True,
            )
            await http.come_up()
            with anyio.fail_after(10):
                while cache.status(URI).text != "Shipping approval v2":
                    await anyio.sleep(0.01)
            print("# read:", (await cache.read(URI)).text, flush=True)
    provider.shutdown()


if __name__ == "__main__":
    anyio.run(main)
