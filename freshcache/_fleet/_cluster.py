"""The fleet's client: one Valkey / Redis server, or a Valkey / Redis Cluster.

``redis://``, ``rediss://``, ``unix://`` (and ``valkey://``, ``valkeys://``): one server.
``valkey+cluster://h1:p1,h2:p2/`` or ``redis+cluster://...`` (``rediss+cluster://``,
``valkeys+cluster://`` with TLS): a cluster, on redis-py's `RedisCluster`, started
from any of the listed nodes (it learns the rest from the cluster itself).

Key layout on a cluster: every key of one MCP server carries the same hash tag
(``namespace:{hmac}:...``, `SharedStore.prefix`), so the whole server's share of
the fleet lives in one slot and every script keeps running atomically; different
servers spread over the cluster. The change channel is plain pub/sub (a `PUBLISH`
inside a script reaches the subscribers of every node).

What fails closed: redis-py follows `MOVED` / `ASK` by itself; a command that still
fails (a primary down, a slot migrating under a script: ``TRYAGAIN``, ``CLUSTERDOWN``)
makes the read go to the server directly and, if it is the registry tick or the
channel, the worker fails closed (drops its local index, loses coverage). On a
cluster a worker that comes back starts a new *epoch* for its server's slot
(`new_epoch`): a replica promoted by a failover may miss the last writes of its
primary (replication is asynchronous), so nothing stored before the failure is
served until it is re-proven.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from .._errors import ConfigurationError

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
        # The channel's subscription checks its connection this often when quiet.
        "health_check_interval": config.lease / 2,
        "decode_responses": True,
    }
    url = config.url
    scheme = url.split("://", 1)[0].lower()
    if scheme in CLUSTER_SCHEMES:
        from redis.asyncio.cluster import ClusterNode, RedisCluster
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        real, nodes, auth = cluster_nodes(url)
        return RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in nodes],
            ssl=real == "rediss",
            # A failed command is an answer here (the read goes to the server, the
            # worker fails closed); do not hold a read for a long retry schedule.
            retry=Retry(NoBackoff(), 1),
            **auth,
            **common,
        )
    from redis.asyncio import Redis

    if scheme in SINGLE_SCHEMES:
        url = SINGLE_SCHEMES[scheme] + url[len(scheme) :]
    return Redis.from_url(url, **common)
