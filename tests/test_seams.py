"""The promise at the seams, over real wires (invariant 9, issue 10 defect 2).

A server whose read raced a change writes ``resources/updated`` for the URI on the
read's own answer, just before a result that still carries the old text. The race
harnesses play that many times, over real HTTP on loopback and over a real stdio
subprocess, and count results handed out ``fresh`` with the old text: there must be
none (before hints on answers counted, HTTP gave 296 in 200 iterations).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import httpx
import pytest

from freshcache import FreshCache, HttpSource, ReadResult, StdioSource
from freshcache._core._backoff import BackoffSettings
from freshcache.acceptance import ReferenceServer
from freshcache.acceptance._http_server import RawSse, RecordedRequest, ReferenceHttpServer

from .conftest import FIXTURES

pytestmark = [pytest.mark.anyio, pytest.mark.wire]

SELECTED = "guide://shipping/approval"
SID = "io.modelcontextprotocol/subscriptionId"
ITERATIONS = 200
RACED = "guide://race/"


def _frame(message: dict[str, Any]) -> bytes:
    return b"event: message\r\ndata: " + json.dumps(message).encode() + b"\r\n\r\n"


class RacingReads:
    """`ReferenceHttpServer` hook: the first read of each URI answers the text from
    before a change, after a ``resources/updated`` for it on the same SSE answer; the
    server holds the new text from then on. The hint's subscription id takes turns:
    none, one nobody asked for, the live stream's."""

    def __init__(self, reference: ReferenceServer) -> None:
        self.reference = reference
        self.raced: set[str] = set()

    async def __call__(self, request: RecordedRequest) -> RawSse | None:
        message = request.message if isinstance(request.message, dict) else {}
        uri = (message.get("params") or {}).get("uri")
        if message.get("method") != "resources/read" or not str(uri).startswith(RACED):
            return None
        if uri in self.raced:
            return None
        self.raced.add(uri)
        old = self.reference.resources[uri].text
        self.reference.set(uri, f"{uri} new")
        hint: dict[str, Any] = {"uri": uri}
        turn = len(self.raced) % 3
        if turn == 1:
            hint["_meta"] = {SID: "nobody-asked"}
        elif turn == 2 and self.reference.subscribers:
            hint["_meta"] = {SID: next(reversed(self.reference.subscribers))}
        result = {
            "resultType": "complete",
            "contents": [{"uri": uri, "text": old}],
            "ttlMs": 60_000,
        }
        return RawSse(
            (
                _frame(
                    {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": hint}
                ),
                _frame({"jsonrpc": "2.0", "id": message["id"], "result": result}),
            )
        )


async def _race(cache: FreshCache, uri: str) -> list[ReadResult]:
    """Two concurrent reads of ``uri`` and the status after them."""
    results: list[ReadResult] = []

    async def read() -> None:
        results.append(await cache.read(uri, timeout=5.0))

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        tg.start_soon(read)
    return [*results, cache.status(uri)]


async def test_a_hint_on_the_read_answer_never_lets_the_old_text_out_as_fresh_over_http() -> None:
    reference = ReferenceServer()
    reference.set(SELECTED, "selected v1")
    racing = RacingReads(reference)
    old_as_fresh = 0
    async with (
        ReferenceHttpServer(reference, hook=racing) as http,
        httpx.AsyncClient(trust_env=False) as client,
        FreshCache(
            HttpSource(http.url, client=client, timeout=5.0), select=[SELECTED], read_timeout=5.0
        ) as cache,
    ):
        with anyio.fail_after(10):
            while cache.stream_status != "live":
                await anyio.sleep(0.005)
        for i in range(ITERATIONS):
            uri = f"{RACED}{i}"
            reference.set(uri, f"{uri} old")
            for result in await _race(cache, uri):
                if result.state == "fresh" and result.text != reference.resources[uri].text:
                    old_as_fresh += 1
    assert old_as_fresh == 0
    # Every race was run, and every raced answer was read again (not kept).
    assert len(racing.raced) == ITERATIONS
    assert sum(uri.startswith(RACED) for uri in reference.read_log) == ITERATIONS


@pytest.mark.parametrize("listening", [True, False], ids=["with-a-stream", "with-no-stream"])
async def test_a_hint_before_the_response_never_lets_the_old_text_out_as_fresh_over_stdio(
    listening: bool,
) -> None:
    source = StdioSource(
        [sys.executable, str(FIXTURES / "stdio_scripts.py"), "race"],
        timeout=5.0,
        restart=BackoffSettings(base=0.02, cap=0.1, quick_death=0.0),
    )
    old_as_fresh = server_reads = 0
    async with FreshCache(
        source, select=[SELECTED] if listening else [], read_timeout=5.0, ack_timeout=10.0
    ) as cache:
        if listening:
            with anyio.fail_after(20):
                while cache.stream_status != "live":
                    await anyio.sleep(0.005)
        for i in range(ITERATIONS):
            for result in await _race(cache, f"{RACED}{i}"):
                if result.state == "fresh" and result.text == "old":
                    old_as_fresh += 1
                server_reads += result.server_read
    assert old_as_fresh == 0
    assert source.counters.hints_dropped == 0
    assert server_reads >= ITERATIONS  # every race reached the server
