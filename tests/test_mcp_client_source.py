"""`McpClientSource`: the official SDK client as a freshcache source.

End to end against the official-SDK fixture server (HTTP on loopback, a stdio child):
the seed rows, the SDK-cache hazard, stream endings, a dead transport. In process
(``mcp.Client(server)`` with a small lowlevel server): input-required reads and listen
mapping. Without a server: the error mapping and the import without the SDK.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.server import Server
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    ResourcesListChanged,
    ToolsListChanged,
)
from mcp.server.subscriptions import ResourceUpdated as SdkResourceUpdated

from freshcache import (
    BackoffSettings,
    ConfigurationError,
    FreshCache,
    McpClientSource,
    MissingDependencyError,
    ProtocolError,
    RequestFailed,
)
from freshcache._core import (
    CatalogListChanged,
    ListenAcknowledged,
    ListenStarted,
    ListenUnsupported,
    ResourceListChanged,
    ResourceUpdated,
    StreamClosed,
    StreamEvent,
    StreamLost,
)
from freshcache._protocol._wire import DenialRules
from freshcache._sources._mcp_client import failure_from_sdk_error
from freshcache.acceptance import load_cases, play
from tests.conftest import FIXTURES, SdkServer, start_sdk_server, stop_process
from tests.mcp_client_world import McpClientWorld
from tests.polling import reads_done, scaled, until
from tests.sdk_world import SdkPeer

if sys.version_info >= (3, 11):
    from builtins import ExceptionGroup
else:  # pragma: no cover - anyio brings the backport
    from exceptiongroup import ExceptionGroup

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
SEEDS = load_cases([ROOT / "acceptance_tables" / "01-seed.md"])
URI = "guide://shipping/approval"
OTHER = "guide://shipping/returns"
FAST = BackoffSettings(base=0.05, cap=0.25, quick_death=0.0, max_per_hour=10_000)


async def events_until_end(stream: Any, *, timeout: float = 10.0) -> list[StreamEvent]:
    got: list[StreamEvent] = []
    with anyio.fail_after(timeout):
        async for event in stream:
            got.append(event)
    return got


# --------------------------------------------------------------------------- seed rows


MODES = ["http-borrowed", "http-owned", "stdio"]


# Rows a mode cannot express are not generated; the test below pins which they are.
PLAYABLE = [
    pytest.param(case, mode, id=f"{case.id}-{mode}")
    for mode in MODES
    for case in SEEDS
    if McpClientWorld(mode).unplayable(case) is None
]


@pytest.fixture(scope="module")
def sdk_peer() -> Iterator[SdkPeer]:
    """One HTTP fixture for the module's seed rows; every row resets it."""
    peer = SdkPeer()
    try:
        yield peer
    finally:
        peer.stop()


@pytest.mark.wire
@pytest.mark.parametrize(("case", "mode"), PLAYABLE)
async def test_seed_row_passes_through_the_official_sdk_client(case, mode, sdk_peer):
    world = McpClientWorld(mode, None if mode == "stdio" else sdk_peer)
    report = await play(case, world, step_timeout=15.0)
    assert report.passed, (
        f"{case.where} [{mode}]: expected {report.expected}, got {report.actual}: {report.failures}"
    )


@pytest.mark.parametrize(
    ("mode", "skipped"),
    [
        ("http-owned", {"seed-3"}),
        ("http-borrowed", {"seed-3", "seed-8"}),
        ("stdio", {"seed-1", "seed-3", "seed-4", "seed-8"}),
    ],
    ids=["http-owned", "http-borrowed", "stdio"],
)
def test_only_rows_the_sdk_setup_cannot_express_are_skipped(mode, skipped):
    world = McpClientWorld(mode)
    assert {c.id for c in SEEDS if world.unplayable(c) is not None} == skipped


# --------------------------------------------------------------------------- the SDK-cache hazard

CHANGES = ["after-a-dropped-stream", "within-ttl-for-a-uri-the-ack-left-out"]


@pytest.mark.wire
@pytest.mark.parametrize("change", CHANGES, ids=CHANGES)
async def test_the_sdk_cache_alone_would_hand_back_the_old_copy(sdk_server: SdkServer, change):
    """Seed case 3's hazard with the real SDK: its response cache keeps v1 (ttlMs is
    60 s) after the change; FreshCache over the *same* client hands out v2."""
    sdk_server.control("set", uri=URI, text="v1")
    if change != "after-a-dropped-stream":
        sdk_server.control("ack_exclude", uris=[URI])
    async with Client(sdk_server.url) as client:  # the SDK's default response cache is on
        assert (await client.read_resource(URI)).contents[0].text == "v1"  # now cached by the SDK
        # A slow re-listen keeps the window without a stream open for the whole test.
        slow = BackoffSettings(base=20.0, cap=20.0, quick_death=0.0)
        async with FreshCache(
            McpClientSource(client), select=[URI], ack_timeout=5.0, backoff=slow
        ) as cache:
            assert (await cache.read(URI)).text == "v1"
            await until(lambda: cache.stream_status == "live" and reads_done(cache))
            if change == "after-a-dropped-stream":
                losses = cache.engine.counters.stream_losses
                sdk_server.control("drop_listeners")
                await until(lambda: cache.engine.counters.stream_losses > losses)
                await until(lambda: reads_done(cache))  # the re-read the loss caused
            reads_before = sdk_server.reads(URI)
            # No stream hears of this change: dropped, or the ack left the URI out.
            sdk_server.control("set", uri=URI, text="v2")

            sdk_alone = await client.read_resource(URI)  # cache_mode="use", the default
            assert sdk_alone.contents[0].text == "v1", "the SDK's own cache served the old copy"

            result = await cache.read(URI)
            assert result.text != "v1"
            assert (result.state, result.text) == ("fresh", "v2") or (
                result.state == "awaiting_fresh_source" and result.text is None
            )
            if result.state != "fresh":
                await until(lambda: cache.status(URI).text == "v2")
            assert sdk_server.reads(URI) > reads_before, "freshcache's reads reach the server"


# --------------------------------------------------------------------------- listen contract


@pytest.mark.wire
async def test_a_listen_is_started_acknowledged_fed_and_closed_gracefully(sdk_server: SdkServer):
    sdk_server.control("ack_exclude", uris=[OTHER])
    async with Client(sdk_server.url) as client:
        source = McpClientSource(client)
        stream = source.listen(frozenset({URI, OTHER}), True)
        with anyio.fail_after(10):
            started = await stream.__anext__()
            acked = await stream.__anext__()
        assert isinstance(started, ListenStarted)
        # The fixture lists tools and resources (listChanged declared), no prompts.
        covered = frozenset({"tools", "resource_templates"})
        assert acked == ListenAcknowledged(started.subscription_id, frozenset({URI}), True, covered)
        sdk_server.control("set", uri=URI, text="v2")
        sdk_server.control("list_changed")
        with anyio.fail_after(10):
            assert await stream.__anext__() == ResourceUpdated(URI, started.subscription_id)
            assert await stream.__anext__() == ResourceListChanged(started.subscription_id)
        sdk_server.control("close_listeners")
        assert await events_until_end(stream) == [StreamClosed(started.subscription_id)]


@pytest.mark.wire
async def test_a_dropped_listen_ends_in_stream_lost_not_an_exception(sdk_server: SdkServer):
    async with Client(sdk_server.url) as client:
        stream = McpClientSource(client).listen(frozenset({URI}), False)
        with anyio.fail_after(10):
            started = await stream.__anext__()
            await stream.__anext__()  # the acknowledgment
        sdk_server.control("drop_listeners")
        ended = await events_until_end(stream)
    assert len(ended) == 1
    assert isinstance(ended[0], StreamLost)
    assert ended[0].subscription_id == started.subscription_id
    assert "SSE stream ended" in ended[0].detail


@pytest.mark.wire
async def test_closing_the_listen_early_ends_the_servers_stream(sdk_server: SdkServer):
    async with Client(sdk_server.url) as client:
        stream = McpClientSource(client).listen(frozenset({URI}), True)
        with anyio.fail_after(10):
            await stream.__anext__()
            await stream.__anext__()
        assert sdk_server.state()["open_listen_streams"] == 1
        await stream.aclose()
        await until(lambda: sdk_server.state()["open_listen_streams"] == 0)


async def test_a_legacy_connection_has_no_listen(sdk_server_inproc: Server):
    async with Client(sdk_server_inproc, mode="legacy") as client:
        source = McpClientSource(client)
        info = await source.start()
        events = await events_until_end(source.listen(frozenset({URI}), True))
    assert info.listen is False
    assert isinstance(events[0], ListenStarted)
    assert isinstance(events[1], ListenUnsupported)
    assert len(events) == 2


# --------------------------------------------------------------------------- dead transports


def _stdio_children() -> set[int]:
    """Pids of this process's children running the fixture over stdio."""
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and "sdk_server.py stdio" in cmdline:
            found.add(int(entry.name))
    return found


STDIO = StdioServerParameters(
    command=sys.executable, args=[str(FIXTURES / "sdk_server.py"), "stdio"]
)


@pytest.mark.wire
async def test_a_borrowed_stdio_client_whose_child_died_reads_as_unreachable():
    before = _stdio_children()
    async with Client(STDIO) as client:
        source = McpClientSource(client)
        first = await source.read_resource(URI, None)
        assert not isinstance(first, RequestFailed)
        (child,) = _stdio_children() - before
        stream = source.listen(frozenset({URI}), True)
        with anyio.fail_after(10):
            started = await stream.__anext__()
            await stream.__anext__()
        os.kill(child, signal.SIGKILL)
        ended = await events_until_end(stream)
        failed = await source.read_resource(URI, None)
        relisten = await events_until_end(source.listen(frozenset({URI}), True))
    assert ended == [StreamLost(started.subscription_id, ended[0].detail)]
    assert "Connection closed" in ended[0].detail
    assert failed == RequestFailed("unreachable", failed.detail, -32000)
    assert [type(e) for e in relisten] == [ListenStarted, StreamLost]


@pytest.mark.wire
async def test_an_owned_stdio_client_is_respawned_after_its_child_died():
    before = _stdio_children()
    source = McpClientSource.connect(STDIO, read_timeout_seconds=5.0)
    async with FreshCache(source, select=[URI], ack_timeout=5.0, backoff=FAST) as cache:
        # A child is a Python process importing the SDK: under load it can take longer
        # than a read's deadline to answer at all. Wait (for as long as the machine's
        # load says it may take) until it answers and the stream is live, then read.
        await until(lambda: cache.stream_status == "live", timeout=scaled(10.0))
        first = await cache.read(URI)
        (child,) = _stdio_children() - before
        os.kill(child, signal.SIGKILL)
        await until(lambda: cache.engine.counters.stream_losses >= 1)
        # The loss invalidated the URI; a new child (built-in v1 text) answers again.
        await until(lambda: cache.stream_status == "live", timeout=scaled(20.0))
        again = await cache.read(URI)
        (respawned,) = _stdio_children() - before
    assert first.state == again.state == "fresh", (first.reason, first.detail)
    assert again.server_read or cache.engine.counters.server_reads >= 2
    assert respawned != child
    await until(lambda: not (_stdio_children() - before))  # aclose ended the child


@pytest.mark.wire
async def test_an_owned_http_client_lives_through_a_server_that_refuses_connections():
    server = start_sdk_server()
    try:
        source = McpClientSource.connect(server.url)
        async with FreshCache(source, select=[URI], ack_timeout=5.0, backoff=FAST) as cache:
            assert (await cache.read(URI)).state == "fresh"
            await until(lambda: cache.stream_status == "live")
            os.kill(server.process.pid, signal.SIGKILL)
            server.process.wait(timeout=10)
            await until(lambda: cache.status(URI).reason in ("unreachable", "stream_lost"))
            down = await cache.read(URI, timeout=3.0)
            other = await cache.read(OTHER, timeout=3.0)
    finally:
        stop_process(server.process)
    assert (down.state, down.reason, down.text) == ("awaiting_fresh_source", "unreachable", None)
    assert (other.state, other.reason) == ("awaiting_fresh_source", "unreachable")


# --------------------------------------------------------------------------- reads and lists


@pytest.mark.wire
async def test_reads_and_lists_carry_the_servers_hints_and_failures(sdk_server: SdkServer):
    sdk_server.control("ttl", uri=URI, ttl_ms=1234, scope="public")
    sdk_server.control("deny", uri=OTHER)
    async with Client(sdk_server.url) as client:
        source = McpClientSource(client)
        reply = await source.read_resource(URI, None)
        denied = await source.read_resource(OTHER, None)
        missing = await source.read_resource("guide://nowhere", None)
        page = await source.list_resources(None, None)
    assert not isinstance(reply, RequestFailed)
    assert (reply.ttl_ms, reply.cache_scope, reply.from_server) == (1234, "public", True)
    assert reply.contents[0].text.startswith("Shipping approval v1")
    assert reply.contents[0].mime_type == "text/plain"
    assert denied == RequestFailed("denied", "Forbidden", -32003)
    assert missing == RequestFailed("not_found", "Resource not found", -32602)
    assert not isinstance(page, RequestFailed)
    assert {r.uri for r in page.resources} == {URI, OTHER}
    assert page.ttl_ms == 60_000


@pytest.mark.wire
async def test_an_sdk_timeout_is_a_timeout(sdk_server: SdkServer):
    sdk_server.control("slow", uri=URI, ms=3000)
    async with Client(sdk_server.url, read_timeout_seconds=0.3) as client:
        failed = await McpClientSource(client).read_resource(URI, None)
    assert (failed.kind, failed.code) == ("timeout", -32001)


@pytest.fixture
def sdk_server_inproc() -> Server:
    """A small lowlevel SDK server for in-process clients (no transport)."""
    return _inproc_server()[0]


def _inproc_server() -> tuple[Server, dict[str, Any]]:
    state: dict[str, Any] = {"reads": 0, "text": "v1", "rounds": False}
    bus = InMemorySubscriptionBus()

    async def read(ctx: Any, params: types.ReadResourceRequestParams) -> Any:
        state["reads"] += 1
        if state["rounds"] and params.request_state is None:
            return types.InputRequiredResult(request_state="round-2")
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=params.uri, text=state["text"])],
            ttl_ms=60_000,
        )

    async def listing(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[types.Resource(uri=URI, name="approval")])

    server = Server(
        "inproc",
        on_read_resource=read,
        on_list_resources=listing,
        on_subscriptions_listen=ListenHandler(bus),
    )
    state["bus"] = bus
    return server, state


async def test_a_read_that_needed_input_rounds_is_never_cached():
    server, state = _inproc_server()
    state["rounds"] = True
    async with Client(server) as client:
        reply = await McpClientSource(client).read_resource(URI, None)
        async with FreshCache(McpClientSource(client), select=[URI], listen=False) as cache:
            first = await cache.read(URI)
            second = await cache.read(URI)
    assert not isinstance(reply, RequestFailed)
    assert reply.multi_round_trip is True
    assert reply.contents[0].text == "v1"
    assert first.state == second.state == "fresh"
    assert first.server_read and second.server_read, "a multi-round-trip result is not cached"


async def test_listen_events_map_onto_the_source_contract_in_process():
    server, state = _inproc_server()
    async with Client(server) as client:
        stream = McpClientSource(client).listen(frozenset({URI}), True)
        with anyio.fail_after(5):
            started = await stream.__anext__()
            acked = await stream.__anext__()
            await state["bus"].publish(SdkResourceUpdated(uri=URI))
            await state["bus"].publish(ResourcesListChanged())
            await state["bus"].publish(ToolsListChanged())
            updated = await stream.__anext__()
            listed = await stream.__anext__()
            tools = await stream.__anext__()
        await stream.aclose()
    sid = started.subscription_id
    # No tools/list handler: tools are not declared, so the ack covers templates only.
    assert acked == ListenAcknowledged(
        sid, frozenset({URI}), True, frozenset({"resource_templates"})
    )
    assert updated == ResourceUpdated(URI, sid)
    assert listed == ResourceListChanged(sid)
    assert tools == CatalogListChanged("tools", sid)


# --------------------------------------------------------------------------- error mapping


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (MCPError(-32602, "Resource not found"), "not_found"),
        (MCPError(-32002, "Resource not found"), "not_found"),
        (MCPError(-32003, "Forbidden"), "denied"),
        (MCPError(-32099, "access denied for this user"), "denied"),
        (MCPError(-32603, "Internal server error"), "server_error"),
        (MCPError(-32603, "Server returned an error response"), "server_error"),
        (MCPError(-32000, "Connection closed"), "unreachable"),
        (MCPError(-32000, "SSE stream ended without a response"), "unreachable"),
        (MCPError(-32001, "Request 'resources/read' timed out"), "timeout"),
        (TimeoutError(), "timeout"),
        (ConnectionRefusedError("refused"), "unreachable"),
        (
            ExceptionGroup("tg", [ExceptionGroup("inner", [ConnectionResetError("reset")])]),
            "unreachable",
        ),
        (ExceptionGroup("tg", [MCPError(-32602, "gone")]), "not_found"),
        (RuntimeError("Client must be used within an async context manager"), "unreachable"),
        (ValueError("something odd"), "server_error"),
    ],
    ids=[
        "invalid-params-is-not-found",
        "legacy-not-found",
        "forbidden-code-is-denied",
        "denial-words-are-denied",
        "internal-error",
        "plain-http-403-loses-its-status",
        "connection-closed",
        "sse-ended",
        "sdk-timeout",
        "timeout-error",
        "connection-refused",
        "nested-exception-group",
        "group-of-mcp-error",
        "client-not-open",
        "anything-else",
    ],
)
def test_sdk_errors_map_to_failure_kinds(error, kind):
    assert failure_from_sdk_error(error, DenialRules()).kind == kind


def test_httpx2_connect_and_timeout_errors_are_mapped():
    import httpx2

    assert failure_from_sdk_error(httpx2.ConnectError("no"), DenialRules()).kind == "unreachable"
    assert failure_from_sdk_error(httpx2.ReadTimeout("slow"), DenialRules()).kind == "timeout"


def test_a_configured_denial_code_wins_over_the_message():
    rules = DenialRules(codes=frozenset({-32050}), message_pattern=None)
    assert failure_from_sdk_error(MCPError(-32050, "nope"), rules).kind == "denied"
    assert failure_from_sdk_error(MCPError(-32003, "Forbidden"), rules).kind == "server_error"


@pytest.mark.parametrize("code", [-32601, -32020], ids=["method-not-found", "header-mismatch"])
def test_errors_that_mean_misconfiguration_are_raised_not_mapped(code):
    with pytest.raises(ProtocolError):
        failure_from_sdk_error(MCPError(code, "no"), DenialRules())


# --------------------------------------------------------------------------- construction


def test_something_that_is_not_an_entered_client_is_refused_with_a_hint():
    with pytest.raises(ConfigurationError, match=r"McpClientSource\.connect"):
        McpClientSource("http://127.0.0.1:1/mcp")


def test_connect_checks_its_options_when_it_is_called():
    with pytest.raises(ConfigurationError, match="connect_timeout"):
        McpClientSource.connect("http://127.0.0.1:1/mcp", connect_timeout=0)
    with pytest.raises(ValueError, match="mode"):
        McpClientSource.connect("http://127.0.0.1:1/mcp", mode="1999-01-01")


@pytest.mark.parametrize(
    ("server", "identity"),
    [
        ("http://user:secret@127.0.0.1:8000/mcp", "http://127.0.0.1:8000/mcp"),
        (STDIO, f"stdio:{sys.executable} {FIXTURES / 'sdk_server.py'} stdio"),
    ],
    ids=["url-without-credentials", "stdio-command-line"],
)
def test_the_identity_names_the_server_without_credentials(server, identity):
    assert McpClientSource.connect(server).identity == identity


async def test_an_unreachable_server_is_reported_not_raised():
    source = McpClientSource.connect("http://127.0.0.1:1/mcp", connect_timeout=5.0)
    try:
        info = await source.start()
        failed = await source.read_resource(URI, None)
        events = await events_until_end(source.listen(frozenset({URI}), True))
    finally:
        await source.aclose()
    assert info.reachable is False
    assert failed.kind == "unreachable"
    assert [type(e) for e in events] == [ListenStarted, StreamLost]


def test_freshcache_imports_and_names_the_install_command_without_the_sdk():
    code = (
        "import sys\n"
        "for name in ('mcp', 'mcp.client', 'mcp.client.subscriptions', 'mcp.shared.exceptions'):\n"
        "    sys.modules[name] = None\n"
        "import freshcache\n"
        "try:\n"
        "    freshcache.McpClientSource(object())\n"
        "except freshcache.MissingDependencyError as exc:\n"
        "    print('missing:', exc)\n"
        "try:\n"
        "    freshcache.McpClientSource.connect('http://127.0.0.1:1/mcp')\n"
        "except ImportError as exc:\n"
        "    print('import error:', type(exc).__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "missing: " in done.stdout
    assert "pip install '.[mcp]' (in a checkout of freshcache)" in done.stdout
    assert "import error: MissingDependencyError" in done.stdout
    assert issubclass(MissingDependencyError, ImportError)


async def test_a_server_without_listen_is_reported_as_such():
    async def read(ctx: Any, params: types.ReadResourceRequestParams) -> Any:
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=params.uri, text="v1")]
        )

    async with Client(Server("no-listen", on_read_resource=read)) as client:
        source = McpClientSource(client)
        info = await source.start()
        events = await events_until_end(source.listen(frozenset({URI}), True))
        async with FreshCache(source, select=[URI]) as cache:
            first = await cache.read(URI)
            second = await cache.read(URI)
    assert (info.reachable, info.listen) == (True, False)
    assert [type(e) for e in events] == [ListenStarted, ListenUnsupported]
    assert cache.stream_status == "unsupported"
    assert first.server_read and second.server_read, "uncovered: read before each use"


async def test_a_client_that_is_not_open_is_unreachable_not_an_error():
    client = Client(_inproc_server()[0])  # never entered
    source = McpClientSource(client)
    info = await source.start()
    failed = await source.read_resource(URI, None)
    events = await events_until_end(source.listen(frozenset({URI}), True))
    assert info.reachable is False
    assert (failed.kind, "not open" in failed.detail) == ("unreachable", True)
    assert [type(e) for e in events] == [ListenStarted, StreamLost]
    assert "borrowed" in repr(source)
