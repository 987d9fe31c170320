"""The heartbeat's duties on one server, on a real Valkey: the end-to-end probe of the
channel's subscription (through a TCP forwarder of our own that goes silent on the
store's side while it keeps ours open), and the registry's version, which a listener
must never see come back after it moved on."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from anyio.abc import SocketStream

from freshcache import FRESH, FreshCache
from freshcache.acceptance import InMemorySource, ReferenceServer
from freshcache.fleet import Fleet
from tests.polling import scaled
from tests.polling import until as eventually
from tests.valkey_support import Valkey

pytestmark = pytest.mark.anyio

URI = "doc://a"
OTHER = "doc://b"
LEASE = 1.5
OP_TIMEOUT = 0.3


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py's client is asyncio only


class Forwarder:
    """A TCP forwarder on loopback to ``port``: the fault injector. `freeze` makes every
    connection open now silent from the store's side (nothing it sends is passed on,
    nothing is passed to it) while the client's socket stays open, as a proxy does
    whose upstream died without a word; connections made later are forwarded."""

    def __init__(self, port: int) -> None:
        self.upstream = port
        self.port = 0
        self._open: list[anyio.Event] = []

    def freeze(self) -> None:
        for frozen in self._open:
            frozen.set()
        self._open = []

    async def serve(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with listener:
            task_status.started()
            await listener.serve(self._one)

    async def _one(self, client: SocketStream) -> None:
        frozen = anyio.Event()
        self._open.append(frozen)
        async with client, await anyio.connect_tcp("127.0.0.1", self.upstream) as store:

            async def pipe(source: SocketStream, sink: SocketStream) -> None:
                with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    async for chunk in source:
                        if frozen.is_set():
                            return
                        await sink.send(chunk)

            async with anyio.create_task_group() as tg:
                tg.start_soon(pipe, client, store)
                tg.start_soon(pipe, store, client)
                await frozen.wait()
                # Silent both ways from now on, the client's socket left open.
                tg.cancel_scope.cancel()
            await anyio.sleep_forever()


def _fleet(url: str) -> Fleet:
    return Fleet(url, namespace="probe", lease=LEASE, op_timeout=OP_TIMEOUT)


@asynccontextmanager
async def _worker(
    server: ReferenceServer, url: str, select: list[str]
) -> AsyncIterator[FreshCache]:
    cache = FreshCache(InMemorySource(server), select=select, fleet=_fleet(url), read_timeout=2.0)
    async with cache:
        await eventually(lambda: cache.stream_status == "live")
        yield cache


async def test_a_channel_silent_behind_a_proxy_is_lost_within_a_beat_or_two(
    valkey: Valkey,
) -> None:
    """A follower reaches the store through a forwarder that goes silent on the store's
    side and keeps the follower's socket open: TCP keepalive sees a live peer, the
    channel's wait has no timeout. The heartbeat's probe (a PING on the subscription's
    connection) finds it within about two beats; the follower fails closed, subscribes
    again (through new connections) and serves the change it missed, never the old text.
    Before the probe the follower stayed "up" and served v1 as fresh."""
    server = ReferenceServer()
    server.set(URI, "v1", ttl_ms=60_000)
    forwarder = Forwarder(valkey.port)
    async with anyio.create_task_group() as tg:
        await tg.start(forwarder.serve)
        async with _worker(server, valkey.url, [URI]) as lead:
            await eventually(lambda: lead.describe()["fleet"]["leading"])
            behind = f"redis://127.0.0.1:{forwarder.port}/0"
            async with _worker(server, behind, [URI]) as follower:
                fleet = follower._fleet
                assert fleet is not None and not follower.describe()["fleet"]["leading"]
                assert (await follower.read(URI)).text == "v1"
                losses = fleet.counters.channel_losses
                forwarder.freeze()
                frozen_at = anyio.current_time()
                server.set(URI, "v2", notify=True, ttl_ms=60_000)
                await eventually(lambda: lead.status(URI).text == "v2")
                # A beat that times out on its frozen connection, then one more beat.
                period = LEASE / 3
                await eventually(
                    lambda: fleet.counters.channel_losses > losses,
                    scaled(max(period, 3 * OP_TIMEOUT) + 2 * period + 2.0),
                )
                assert anyio.current_time() - frozen_at < scaled(10.0)
                # From the loss on, v1 is never handed out as fresh.
                seen: list[tuple[str | None, str]] = []

                async def back() -> bool:
                    status = follower.status(URI)
                    seen.append((status.text, status.state))
                    return status.text == "v2" and status.state == FRESH

                deadline = anyio.current_time() + scaled(20.0)
                while not await back():
                    assert anyio.current_time() < deadline, seen[-3:]
                    with contextlib.suppress(Exception):
                        await follower.read(URI)
                    await anyio.sleep(0.02)
                assert ("v1", FRESH) not in seen
                assert (await follower.read(URI)).text == "v2"
        tg.cancel_scope.cancel()


async def test_a_new_selection_reaches_the_listener_after_the_registry_version_expired(
    valkey: Valkey,
) -> None:
    """The registry's version key expires a day after the last new selection (a steady
    fleet does not move it). A worker registering right after it expired must still
    widen the listener's stream: with a counter, the version came back as the very
    value the listener had seen ("1") and the new selection was skipped for good."""
    from redis.asyncio import Redis

    server = ReferenceServer()
    server.set(URI, "v1", ttl_ms=60_000)
    server.set(OTHER, "o1", ttl_ms=60_000)
    async with _worker(server, valkey.url, [URI]) as lead:
        fleet = lead._fleet
        assert fleet is not None
        await eventually(lambda: fleet.lease.leading_uris == frozenset({URI}))
        # The listener has compared its stream with the registry at this version.
        await eventually(lambda: fleet._union_seen is not None)
        admin = Redis.from_url(valkey.url)
        try:
            # As if the day passed: the version key expires, and a new worker
            # registers before the listener's next beat.
            await admin.delete(fleet.shared.registry_key)
            await fleet.shared.register("newcomer", frozenset({OTHER}), 60_000, _now_ms())
        finally:
            await admin.aclose()
        await eventually(lambda: OTHER in fleet.lease.leading_uris, scaled(10.0))


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)


async def test_the_heartbeat_loads_its_script_again_after_the_store_forgot_it(
    valkey: Valkey,
) -> None:
    """The heartbeat writes `BEAT` as packed bytes on a connection of its own
    (`BeatLine`); a store that lost its scripts (``SCRIPT FLUSH``, as after a restart)
    answers ``NOSCRIPT``, and the beat loads the script through redis-py and lands: the
    listener keeps its lease and its beats keep answering."""
    from redis.asyncio import Redis

    server = ReferenceServer()
    server.set(URI, "v1", ttl_ms=60_000)
    async with _worker(server, valkey.url, [URI]) as lead:
        fleet = lead._fleet
        assert fleet is not None
        await eventually(lambda: lead.describe()["fleet"]["leading"])
        admin = Redis.from_url(valkey.url)
        try:
            await admin.script_flush()
            flushed = anyio.current_time()
            await eventually(lambda: fleet._answered_at > flushed + LEASE, scaled(10.0))
            assert await admin.script_exists(fleet.shared._beat.sha) == [True]
        finally:
            await admin.aclose()
        assert lead.describe()["fleet"]["leading"]


def test_the_channels_keepalive_idle_time_has_its_macos_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """macOS has no ``TCP_KEEPIDLE``: the idle time before keepalive probes is
    ``TCP_KEEPALIVE`` (0x10) there, set by number when Python does not name it."""
    import socket
    import sys

    from freshcache._fleet._cluster import subscriber

    monkeypatch.delattr(socket, "TCP_KEEPIDLE", raising=False)
    monkeypatch.delattr(socket, "TCP_KEEPALIVE", raising=False)
    monkeypatch.setattr(sys, "platform", "darwin")
    client = subscriber(Fleet("redis://127.0.0.1:1/0", lease=4.0))
    options = client.connection_pool.connection_kwargs["socket_keepalive_options"]
    assert options[0x10] == 4


async def test_a_beat_connection_the_store_dropped_is_opened_again_without_failing_closed(
    valkey: Valkey,
) -> None:
    """The store drops the heartbeat's idle connection (``CLIENT KILL TYPE normal``: the
    worker's command connections, not its subscription): the next beat finds it
    closed before writing, connects again and lands, as redis-py's client would retry.
    The channel still vouches for the worker: no loss, no re-proof."""
    from redis.asyncio import Redis

    server = ReferenceServer()
    server.set(URI, "v1", ttl_ms=60_000)
    async with _worker(server, valkey.url, [URI]) as lead:
        fleet = lead._fleet
        assert fleet is not None
        await eventually(lambda: lead.describe()["fleet"]["leading"])
        breaks = fleet.channel.breaks
        admin = Redis.from_url(valkey.url)
        try:
            await admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
            killed = anyio.current_time()
            await eventually(lambda: fleet._answered_at > killed + LEASE, scaled(10.0))
        finally:
            await admin.aclose()
        assert fleet.channel.breaks == breaks
        assert lead.describe()["fleet"]["leading"]


async def test_a_channel_reader_behind_a_backlog_is_not_declared_lost(
    valkey: Valkey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A big fan-out puts the channel's reader several beats behind: the pong of a
    probe waits behind the messages while the next beats' answers come back on their
    own connection. The reader still reads (progress), so the channel is not lost: no
    failing closed, no re-proof. Before, the beat after next judged the pong missing
    and failed closed at the worst moment."""
    from freshcache._fleet._cluster import ChannelSubscription

    slow = ChannelSubscription.next_message

    async def slow_reader(self: ChannelSubscription, timeout: float | None) -> str | None:
        data = await slow(self, timeout)
        if data is not None and "burst" in data:  # (cjson escapes "/")
            await anyio.sleep(0.03)  # a reader busy with each message of the fan-out
        return data

    monkeypatch.setattr(ChannelSubscription, "next_message", slow_reader)
    server = ReferenceServer()
    server.set(URI, "v1", ttl_ms=60_000)
    async with _worker(server, valkey.url, [URI]) as lead:
        fleet = lead._fleet
        assert fleet is not None
        await eventually(lambda: lead.describe()["fleet"]["leading"])
        breaks, losses = fleet.channel.breaks, fleet.counters.channel_losses
        # About 3 s of reading (six beats) behind at the end of the burst.
        await fleet.publish([f"doc://burst/{i}" for i in range(100)], "hint")
        last = await fleet.shared.sequence()
        await eventually(lambda: fleet.channel.seq >= last, scaled(20.0))
        # And one beat more, judged after the backlog.
        answered = anyio.current_time()
        await eventually(lambda: fleet._answered_at > answered, scaled(5.0))
        assert fleet.channel.breaks == breaks
        assert fleet.counters.channel_losses == losses
        assert lead.describe()["fleet"]["store"] == "up"


async def test_a_beat_cancelled_before_its_answer_leaves_no_reply_for_the_next(
    valkey: Valkey,
) -> None:
    """The heartbeat's bound cancels a beat after it was written and before its answer
    was read (here: in the channel's probe). The answer must not be left on the beat's
    connection: the next command there would read it as its own, and every later beat
    the one before's. Before, the line stayed connected with that reply unread."""
    from freshcache._fleet._worker import FleetWorker

    worker = FleetWorker(_fleet(valkey.url), "probe-server")
    line = worker.beat_line
    assert line is not None
    try:
        await worker._beat(None)  # loads the script; the line is connected
        held = anyio.Event()

        async def hang() -> None:
            held.set()
            await anyio.sleep_forever()

        worker.channel.probe = hang  # type: ignore[method-assign]
        with anyio.move_on_after(scaled(5.0)) as cancelled:
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker._beat, None)
                await held.wait()
                tg.cancel_scope.cancel()
        assert not cancelled.cancelled_caught
        del worker.channel.probe
        await worker._beat(None)
        # The next command on the line reads its own answer.
        connection = line._connection
        await connection.send_command("ECHO", "mine")
        assert await connection.read_response() == "mine"
    finally:
        worker.outbox.close()
        await worker.redis.aclose()
        await line.aclose()
        if worker.channel_redis is not None:
            await worker.channel_redis.aclose()


async def test_a_worker_whose_store_client_fails_to_close_still_closes_its_other_lines(
    valkey: Valkey,
) -> None:
    """Closing a worker closes its store client, its heartbeat's line and its channel's
    client each on its own: one close that fails does not leave the others' sockets
    open. Before, a failing first close skipped the other two."""
    server = ReferenceServer()
    server.set(URI, "v1", ttl_ms=60_000)
    async with _worker(server, valkey.url, [URI]) as lead:
        fleet = lead._fleet
        assert fleet is not None and fleet.beat_line is not None
        assert fleet.channel_redis is not None
        line, channel_pool = fleet.beat_line._connection, fleet.channel_redis.connection_pool
        await eventually(lambda: line.is_connected and fleet.usable)
        close = fleet.redis.aclose

        async def broken() -> None:
            raise ConnectionError("the close failed")

        fleet.redis.aclose = broken  # type: ignore[method-assign]
    try:
        assert not line.is_connected
        opened = [*channel_pool._available_connections, *channel_pool._in_use_connections]
        assert not [c for c in opened if c.is_connected]
    finally:
        await close()
