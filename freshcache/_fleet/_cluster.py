"""The fleet's client: one Valkey / Redis server, or a Valkey / Redis Cluster.

``redis://``, ``rediss://``, ``unix://`` (and ``valkey://``, ``valkeys://``): one server.
``valkey+cluster://h1:p1,h2:p2/`` or ``redis+cluster://...`` (``rediss+cluster://``,
``valkeys+cluster://`` with TLS): a cluster, on redis-py's `RedisCluster` (redis-py 8 or
later: its asyncio cluster client has pub/sub from 8.0), started from any of the listed
nodes (it learns the rest from the cluster itself).

Key layout on a cluster: every key of one MCP server carries the same hash tag
(``namespace:{hmac}:...``, `SharedStore.prefix`), so the whole server's share of
the fleet lives in one slot and every script keeps running atomically; different
servers spread over the cluster. The change channel carries the same hash tag and is a
*shard channel* (``SPUBLISH`` inside the scripts, ``SSUBSCRIBE`` here): a change goes
to the slot's primary only, not to every node of the cluster.

What fails closed: redis-py follows `MOVED` / `ASK` by itself; a command that still
fails (a primary down, a slot migrating under a script: ``TRYAGAIN``, ``CLUSTERDOWN``)
makes the read go to the server directly and, if it is the heartbeat or the
channel, the worker fails closed (drops its local index, loses coverage). A shard
channel whose slot moves or whose primary fails is ended by the server (an
``sunsubscribe``) or by the broken connection: the worker fails closed and subscribes
again where the slot lives now (`ChannelSubscription`). The epoch names the slot's
primary (`SharedStore`, ``PEEK``): a promoted replica (which may miss its primary's
last writes: replication is asynchronous) or the slot's new owner starts one new
epoch, so nothing stored before is served until it is re-proven.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from .._errors import ConfigurationError, MissingDependencyError

if TYPE_CHECKING:
    from ..fleet import Fleet

CLUSTER_SCHEMES = {
    "valkey+cluster": "redis",
    "redis+cluster": "redis",
    "valkeys+cluster": "rediss",
    "rediss+cluster": "rediss",
}
SINGLE_SCHEMES = {"valkey": "redis", "valkeys": "rediss"}


def is_cluster(url: str) -> bool:
    return url.split("://", 1)[0].lower() in CLUSTER_SCHEMES


def cluster_nodes(url: str) -> tuple[str, list[tuple[str, int]], dict[str, Any]]:
    """(scheme for redis-py, startup nodes, connection options) of a cluster URL."""
    scheme, rest = url.split("://", 1)
    netloc = rest.split("/", 1)[0].split("?", 1)[0]
    options: dict[str, Any] = {}
    if "@" in netloc:
        auth, netloc = netloc.rsplit("@", 1)
        user, _, password = auth.partition(":")
        if user:
            options["username"] = unquote(user)
        if password:
            options["password"] = unquote(password)
    nodes: list[tuple[str, int]] = []
    for part in netloc.split(","):
        parsed = urlsplit(f"//{part}")
        if not parsed.hostname:
            raise ConfigurationError(f"Fleet cluster url names no host: {url!r}")
        nodes.append((parsed.hostname, parsed.port or 6379))
    return CLUSTER_SCHEMES[scheme.lower()], nodes, options


def connect(config: Fleet) -> Any:
    """The asyncio client of ``config.url`` (a `Redis` or a `RedisCluster`)."""
    common: dict[str, Any] = {
        "socket_timeout": config.op_timeout,
        "socket_connect_timeout": config.op_timeout,
        "decode_responses": True,
    }
    url = config.url
    scheme = url.split("://", 1)[0].lower()
    if scheme in CLUSTER_SCHEMES:
        from redis.asyncio.cluster import ClusterNode, RedisCluster
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        if not hasattr(RedisCluster, "pubsub"):
            raise MissingDependencyError(
                "a Valkey / Redis Cluster fleet needs redis-py 8 or later (its asyncio "
                "cluster client has pub/sub from 8.0): pip install 'redis>=8'"
            )
        real, nodes, auth = cluster_nodes(url)
        return RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in nodes],
            ssl=real == "rediss",
            # A failed command is an answer here (the read goes to the server, the
            # worker fails closed); do not hold a read for a long retry schedule.
            retry=Retry(NoBackoff(), 1),
            # Its shard subscription checks its connection this often when quiet (on
            # one server the channel has a client of its own: `subscriber`).
            health_check_interval=config.lease / 2,
            **auth,
            **common,
        )
    from redis.asyncio import Redis

    # No health check: a command on a connection quiet for a while would first cost a
    # PING round trip (every store command is bounded by `Fleet.op_timeout` anyway).
    return Redis.from_url(_single(url), **common)


def _single(url: str) -> str:
    scheme = url.split("://", 1)[0].lower()
    return SINGLE_SCHEMES[scheme] + url[len(scheme) :] if scheme in SINGLE_SCHEMES else url


def subscriber(config: Fleet) -> Any:
    """On one server, the client of the channel's subscription alone: its reads wait on
    the socket with no timeout and no health-check ``PING`` (a quiet worker does not
    wake for it). A connection the store closes or resets ends the wait at once; one
    left half-open (a peer gone without a word) is found by TCP keepalive, in the
    kernel, within about a lease and three seconds; a store that stops answering, or a
    path that stops carrying the subscription's replies (a proxy in between), is found
    by the worker's heartbeat and its probe (`FleetWorker`, `ChangeChannel.probe`),
    which fail closed and cancel the wait. ``None`` on a cluster: its shard
    subscription goes through the cluster client (`ChannelSubscription` waits with a
    timeout there)."""
    if is_cluster(config.url):
        return None
    import socket

    from redis.asyncio import Redis

    options: dict[int, int] = {}
    # macOS has no TCP_KEEPIDLE: its idle time is TCP_KEEPALIVE (0x10 in <netinet/tcp.h>,
    # which not every Python build names).
    idle = getattr(socket, "TCP_KEEPIDLE", None)
    if idle is None and sys.platform == "darwin":
        idle = getattr(socket, "TCP_KEEPALIVE", 0x10)
    if idle is not None:
        options[idle] = max(1, round(config.lease))
    for name, value in (("TCP_KEEPINTVL", 1), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, name):
            options[getattr(socket, name)] = value
    return Redis.from_url(
        _single(config.url),
        socket_timeout=None,
        socket_connect_timeout=config.op_timeout,
        socket_keepalive=True,
        socket_keepalive_options=options,
        health_check_interval=0,
        decode_responses=True,
    )


def shard_channels(client: Any) -> bool:
    """Whether the fleet's channel is a shard channel on ``client``: a cluster client
    whose asyncio pub/sub can ``SSUBSCRIBE`` (redis-py 8's `ClusterPubSub`)."""
    if not hasattr(client, "nodes_manager"):
        return False  # one server: plain pub/sub (a shard channel buys nothing there)
    from redis.asyncio import cluster

    pubsub = getattr(cluster, "ClusterPubSub", None)
    return hasattr(pubsub, "ssubscribe") and hasattr(pubsub, "get_sharded_message")


class ChannelMoved(Exception):
    """The shard channel was unsubscribed or subscribed again under us (its slot moved,
    or redis-py moved the subscription): messages may have fallen in between."""


async def _no_reconciliation() -> None:
    """Stands in for redis-py's `ClusterPubSub.on_slots_changed` (see `ChannelSubscription`)."""


class ChannelSubscription:
    """The fleet channel's subscription, plain (``SUBSCRIBE``) or sharded
    (``SSUBSCRIBE``): subscribe, then the data of each change message."""

    def __init__(self, client: Any, channel: str, *, sharded: bool) -> None:
        self.sharded = sharded
        self._channel = channel
        self._pubsub = client.pubsub()
        self.probes = 0
        """Probes sent on this subscription's connection (`probe`)."""
        self.answered = 0
        """The last probe it answered (answers come back in order)."""
        self.heard = 0
        """Replies read on its connection so far (messages, pongs, anything)."""
        self._marks = (0, 0)
        """`heard` when the probe before the last one, and the last one, was sent."""
        if sharded and hasattr(self._pubsub, "on_slots_changed"):
            # redis-py 8's `ClusterPubSub` moves shard subscriptions by itself after a
            # slots-cache refresh (`on_slots_changed` starts a background
            # `reinitialize_shard_subscriptions`). The fleet does that itself: a moved
            # slot is a break (`ChannelMoved`), the worker fails closed and subscribes
            # again on the new owner. Both at once race on the connection this reader
            # waits on ("read() called while another coroutine is already waiting"),
            # can leave a per-node pubsub subscribed after `aclose` and its socket
            # never closed (an unclosed `StreamWriter`), or the channel never back.
            self._pubsub.on_slots_changed = _no_reconciliation

    async def subscribe(self) -> None:
        """Subscribe and wait for the server's confirmation."""
        if self.sharded:
            await self._pubsub.ssubscribe(self._channel)
        else:
            await self._pubsub.subscribe(self._channel)
        confirmed = "ssubscribe" if self.sharded else "subscribe"
        while True:
            message = await self._get(0.2)
            if message is not None and message["type"] == confirmed:
                return

    async def next_message(self, timeout: float | None) -> str | None:
        """The data of the next change message, or ``None`` after ``timeout`` (``None``:
        wait on the socket as long as it takes); `ChannelMoved` when the subscription
        itself changed."""
        message = await self._get(timeout)
        if message is None:
            if self.sharded and not self._pubsub.shard_channels:
                raise ChannelMoved("the shard channel has no subscription left")
            return None
        kind = message["type"]
        if kind in ("message", "smessage"):
            return str(message["data"])
        if kind == "pong" and str(message["data"]).isdigit():
            self.answered = int(message["data"])
            return None
        if self.sharded and kind in ("ssubscribe", "sunsubscribe"):
            raise ChannelMoved(f"the shard channel saw {kind} (its slot moved?)")
        return None

    async def probe(self) -> None:
        """Send the next ``PING`` on the subscription's own connection, without waiting:
        its answer comes back in order with the channel's messages (`answered`), so it
        proves the whole path from the store to this reader, whatever sits between."""
        connection = self._pubsub.connection
        if connection is None or not connection.is_connected:
            # Never let the write reconnect (and silently subscribe again): a break.
            raise ConnectionError("the fleet channel's connection is gone")
        self.probes += 1
        self._marks = (self._marks[1], self.heard)
        token = b"%d" % self.probes
        await connection.send_packed_command(
            b"*2\r\n$4\r\nPING\r\n$%d\r\n%s\r\n" % (len(token), token), check_health=False
        )

    def stalled(self) -> bool:
        """The probe before the last one is unanswered and nothing at all came on the
        connection since it was sent. A reader behind a backlog (a big fan-out) still
        reads: progress, even while its pong waits behind the messages."""
        return self.answered < self.probes - 1 and self.heard == self._marks[0]

    async def _get(self, timeout: float | None) -> dict[str, Any] | None:
        if self.sharded:
            got = await self._pubsub.get_sharded_message(timeout=timeout)
        else:
            got = await self._pubsub.get_message(timeout=timeout)
        if got is None:
            return None
        self.heard += 1
        return dict(got)

    async def aclose(self) -> None:
        await self._pubsub.aclose()
