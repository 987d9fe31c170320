"""At most once, attacked (issue 34): faults that could make a tool run twice, or be
reported as never sent when it may have run, on real transports: a stdio server that
is slow to read, dies mid-call, or refuses the call's version; concurrent identical
calls; a caller cancelled mid-call (`tests/fixtures/tool_fault_server.py`)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from freshcache import (
    FreshCache,
    HttpSource,
    McpClientSource,
    StdioSource,
    UnsupportedVersionError,
)
from freshcache._protocol._client import ClientProtocol
from freshcache._protocol._http import Attempt, HttpAnswer, HttpBinding, Retry
from freshcache._protocol._wire import ErrorResponse
from freshcache.acceptance import ReferenceServer
from freshcache.acceptance._http_server import ReferenceHttpServer
from freshcache.acceptance._steps import catalog_items
from tests.fault_proxy import HOLD, CutToolCalls, cut_tool_calls
from tests.polling import scaled, until

pytestmark = pytest.mark.anyio

FAULTS = Path(__file__).parent / "fixtures" / "tool_fault_server.py"


def reference() -> ReferenceServer:
    server = ReferenceServer()
    server.set_catalog("tools", catalog_items("tools", "v1"), notify=False)
    return server


def faulty(mode: str, log: Path) -> StdioSource:
    return StdioSource([sys.executable, str(FAULTS), mode, str(log)])


def runs(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


async def test_a_call_cut_off_while_its_request_is_still_being_written_may_have_run(
    tmp_path: Path,
) -> None:
    # The server is not reading: the large request fills the pipe, the caller's
    # timeout ends the write half-way, and the rest still goes out and runs.
    log = tmp_path / "calls"
    async with FreshCache(faulty("slow-reader", log), read_timeout=10.0) as cache:
        call = await cache.call_tool("pay", {"memo": "x" * 4_000_000}, timeout=0.5)
        assert (call.state, call.reason) == ("may_have_run", "timeout"), call
        await until(lambda: runs(log) == ["pay"])


@pytest.mark.parametrize("revision", ["", "-2025"])
async def test_a_process_that_dies_mid_call_is_restarted_without_the_call(
    tmp_path: Path, revision: str
) -> None:
    log = tmp_path / "calls"
    source = faulty("crash-on-call" + revision, log)
    async with FreshCache(source, read_timeout=10.0) as cache:
        call = await cache.call_tool("pay", {}, timeout=10.0)
        assert call.state == "may_have_run", call
        with anyio.fail_after(30.0):  # the supervisor restarts the server (backoff)
            while (probe := await cache.call_tool("probe", {}, timeout=5.0)).state != "answered":
                assert probe.state == "unavailable", probe  # not running yet: never sent
                await anyio.sleep(0.05)
        assert runs(log) == ["pay", "probe"]  # the pending call was not sent to the new one
        assert (source.protocol.legacy is not None) == bool(revision)


async def test_a_version_refusal_of_a_call_sends_it_at_most_once_more(tmp_path: Path) -> None:
    log = tmp_path / "calls"
    async with FreshCache(faulty("version-on-call", log), read_timeout=10.0) as cache:
        # It lists the version the call was sent in: no version left to try (one line).
        with pytest.raises(UnsupportedVersionError, match="rejected 2026-07-28"):
            await cache.call_tool("pay", {}, timeout=10.0)
        assert runs(log) == ["pay", "pay"]  # refused unrun, sent once more, no more


@pytest.mark.parametrize("revision", ["", "-2025"])
async def test_concurrent_identical_calls_are_two_runs(tmp_path: Path, revision: str) -> None:
    log = tmp_path / "calls"
    source = faulty("answer" + revision, log)
    async with FreshCache(source, read_timeout=10.0) as cache:
        states: list[str] = []

        async def one() -> None:
            states.append((await cache.call_tool("pay", {"amount": 5}, timeout=10.0)).state)

        async with anyio.create_task_group() as group:
            group.start_soon(one)
            group.start_soon(one)
        assert states == ["answered", "answered"]
        assert runs(log) == ["pay", "pay"]
        assert (source.protocol.legacy is not None) == bool(revision)


async def test_the_timeout_bounds_a_call_to_a_server_that_does_not_read(tmp_path: Path) -> None:
    # Before: the cancellation sent after the timeout waited (up to 1 s) for the same
    # full pipe, so the caller got its answer a second past its deadline.
    log = tmp_path / "calls"
    async with FreshCache(faulty("slow-reader", log), read_timeout=10.0) as cache:
        started = anyio.current_time()
        with anyio.fail_after(10.0):  # a guard only
            call = await cache.call_tool("pay", {"memo": "x" * 4_000_000}, timeout=0.2)
        took = anyio.current_time() - started
        assert call.state == "may_have_run", call
        assert took < 1.1, took
        # The server reads its stdin in order: once a second call is answered, the first
        # one's bytes were taken, whole (it ran) or cut by its deadline (it did not), and
        # it was never sent again.
        second = await cache.call_tool("pay", {"amount": 1}, timeout=scaled(10.0))
        assert second.state == "answered", second
        assert runs(log) in (["pay"], ["pay", "pay"])


@asynccontextmanager
async def behind_a_cut(
    server: ReferenceServer, revision: str, client: str, answer: bytes | None = None
) -> AsyncIterator[tuple[FreshCache, CutToolCalls]]:
    http = ReferenceHttpServer(server, revision=revision)  # type: ignore[arg-type]
    async with http, cut_tool_calls(http.port, answer) as (proxy, port):
        url = http.url.replace(f":{http.port}", f":{port}")
        source = HttpSource(url) if client == "http" else McpClientSource.connect(url)
        async with FreshCache(source, read_timeout=10.0) as cache:
            yield cache, proxy


HTTP_CLIENTS = [
    (revision, client)
    for revision in ("2026-07-28", "2025-11-25")
    for client in ("http", "mcp-client")
]


@pytest.mark.parametrize(("revision", "client"), HTTP_CLIENTS)
async def test_a_connection_reset_after_the_call_ran_is_may_have_run_never_a_second_run(
    revision: str, client: str
) -> None:
    server = reference()
    async with behind_a_cut(server, revision, client) as (cache, proxy):
        await cache.tools()
        with anyio.fail_after(30.0):  # a guard only
            call = await cache.call_tool("help", {}, timeout=10.0)
        assert proxy.cuts == 1
        assert call.state == "may_have_run", call
        assert server.tool_calls == ["help"]
        again = await cache.call_tool("help", {}, timeout=10.0)  # the channel still works
        assert again.state == "answered", again
        assert server.tool_calls == ["help", "help"]


@pytest.mark.parametrize("client", ["http", "mcp-client"])
async def test_a_2025_session_ended_before_the_call_runs_it_once(client: str) -> None:
    server = reference()
    async with ReferenceHttpServer(server, revision="2025-11-25") as http:
        source = HttpSource(http.url) if client == "http" else McpClientSource.connect(http.url)
        async with FreshCache(source, read_timeout=10.0) as cache:
            await cache.tools()
            assert http.legacy is not None
            http.legacy.forget_sessions()  # the server ended the session (HTTP 404 next)
            call = await cache.call_tool("help", {}, timeout=10.0)
            assert server.tool_calls in ([], ["help"]), server.tool_calls
            if client == "http":  # HttpSource starts a new session and sends it once more
                assert call.state == "answered", call
                assert server.tool_calls == ["help"]
            else:  # the SDK client reports the ended session: never sent twice
                assert call.state != "answered" or server.tool_calls == ["help"], call


@pytest.mark.parametrize("revision", ["", "-2025"])
async def test_a_caller_cancelled_mid_call_never_has_it_sent_again(
    tmp_path: Path, revision: str
) -> None:
    log = tmp_path / "calls"
    source = faulty("slow-call" + revision, log)
    async with FreshCache(source, read_timeout=10.0) as cache:
        async with anyio.create_task_group() as group:
            group.start_soon(cache.call_tool, "pay", {})
            await until(lambda: runs(log) == ["pay"])  # it arrived; the caller gives up
            group.cancel_scope.cancel()
        probe = await cache.call_tool("probe", {}, timeout=10.0)
        assert probe.state == "answered", probe
        assert runs(log) == ["pay", "probe"]
        assert (source.protocol.legacy is not None) == bool(revision)


def test_a_version_refusal_of_a_call_over_http_is_sent_again_at_most_once() -> None:
    # HTTP judges each answer with the one -32022 rule (the stdio test above plays it
    # on a real process): a second refusal of the same call is never a third send.
    binding = HttpBinding(ClientProtocol("test-server"), lambda detail: None)
    data = {"supported": ["2026-07-28"], "requested": "2026-07-28"}
    refusal = HttpAnswer(400, ErrorResponse(7, -32022, "Unsupported protocol version", data))
    attempt = Attempt()
    judged = binding.judge(refusal, "tools/call", attempt, can_reauthorize=False)
    assert isinstance(judged, Retry), judged
    with pytest.raises(UnsupportedVersionError, match="rejected 2026-07-28"):
        binding.judge(refusal, "tools/call", attempt, can_reauthorize=False)


@pytest.mark.parametrize(("revision", "client"), HTTP_CLIENTS)
async def test_concurrent_identical_calls_over_http_are_two_runs(
    revision: str, client: str
) -> None:
    server = reference()
    async with ReferenceHttpServer(server, revision=revision) as http:  # type: ignore[arg-type]
        source = HttpSource(http.url) if client == "http" else McpClientSource.connect(http.url)
        async with FreshCache(source, read_timeout=10.0) as cache:
            await cache.tools()
            states: list[str] = []

            async def one() -> None:
                states.append((await cache.call_tool("help", {}, timeout=10.0)).state)

            async with anyio.create_task_group() as group:
                group.start_soon(one)
                group.start_soon(one)
            assert states == ["answered", "answered"]
            assert server.tool_calls == ["help", "help"]


BAD_GATEWAY = b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


@pytest.mark.parametrize(("revision", "client"), HTTP_CLIENTS)
async def test_a_gateway_error_after_the_call_ran_is_may_have_run(
    revision: str, client: str
) -> None:
    # A 502 without a JSON-RPC answer says nothing of the tool: it may have run.
    server = reference()
    async with behind_a_cut(server, revision, client, BAD_GATEWAY) as (cache, proxy):
        await cache.tools()
        with anyio.fail_after(30.0):  # a guard only
            call = await cache.call_tool("help", {}, timeout=10.0)
        assert proxy.cuts == 1
        assert call.state == "may_have_run", call
        assert server.tool_calls == ["help"]


@pytest.mark.parametrize(("revision", "client"), HTTP_CLIENTS)
async def test_the_timeout_bounds_a_call_whose_answer_never_comes(
    revision: str, client: str
) -> None:
    server = reference()
    async with behind_a_cut(server, revision, client, HOLD) as (cache, proxy):
        await cache.tools()
        started = anyio.current_time()
        with anyio.fail_after(30.0):  # a guard only
            call = await cache.call_tool("help", {}, timeout=0.3)
        took = anyio.current_time() - started
        assert proxy.cuts == 1
        assert (call.state, call.reason) == ("may_have_run", "timeout"), call
        assert took < 3.0, took  # the source's own read timeout is 10 s
        assert server.tool_calls == ["help"]


@pytest.mark.parametrize("revision", ["", "-2025"])
async def test_the_sdk_client_over_stdio_never_sends_a_call_again_after_a_crash(
    tmp_path: Path, revision: str
) -> None:
    from mcp import StdioServerParameters

    log = tmp_path / "calls"
    command = StdioServerParameters(
        command=sys.executable, args=[str(FAULTS), "crash-on-call" + revision, str(log)]
    )
    async with FreshCache(McpClientSource.connect(command), read_timeout=10.0) as cache:
        call = await cache.call_tool("pay", {}, timeout=10.0)
        assert call.state == "may_have_run", call
        with anyio.fail_after(30.0):  # the next request connects a new process
            while (probe := await cache.call_tool("probe", {}, timeout=5.0)).state != "answered":
                assert probe.state in ("unavailable", "may_have_run"), probe
                await anyio.sleep(0.05)
        assert runs(log)[0] == "pay" and runs(log).count("pay") == 1, runs(log)
