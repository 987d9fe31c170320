"""A fleet of workers sharing one freshness view on Valkey / Redis (invariants 1, 4, 8).

``FreshCache(source, fleet="redis://127.0.0.1:6379/0")`` or
``FreshCache(source, fleet=Fleet(url, namespace="tenant-a"))`` (``Fleet`` is also
``freshcache.Fleet``). Needs the ``fleet``
extra (redis-py's asyncio client): ``pip install 'freshcache[fleet]'``. Importing
this module imports no redis; attaching a fleet to a cache does.

What is shared: entries (keyed by server identity, method, URI and partition; expiry
set by the store from ``ttlMs``), a generation per URI that fences writes, one
change channel per server, one listener lease per server and each worker's
selection. What never is: the hit path (each worker keeps its own index and never
asks the store on a hit), private entries of another partition, public entries
unless the policy shares them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._errors import ConfigurationError

if TYPE_CHECKING:
    from ._fleet._entry_store import ValkeyStore


@dataclass(frozen=True, slots=True)
class Fleet:
    """Where the fleet's shared view lives, and its timings (seconds)."""

    url: str
    """``redis://host:port/db`` (or ``rediss://``, ``unix://``, ``valkey://``) of the
    Valkey/Redis server, or ``valkey+cluster://h1:p1,h2:p2`` (``redis+cluster://``,
    ``rediss+cluster://``) of a Valkey / Redis Cluster, 7 or later, with redis-py 8 or
    later (`freshcache._fleet._cluster`)."""
    namespace: str = "freshcache"
    """Prefix of every key and channel: one per tenant (with its own ACL user)."""
    lease: float = 2.0
    """How long the listener's lease lasts unless renewed (renewed every third of it by
    the holder's heartbeat; a holder with no renewal landed for three quarters of it
    stops listening). Also how long a worker trusts a store that does not answer at all
    before it fails closed."""
    selection_ttl: float = 3.0
    """How long a worker's registered selection counts without a renewal."""
    fill_lock: float = 5.0
    """How long one worker may hold the fleet-wide single-flight lock of a read."""
    op_timeout: float = 0.5
    """Longest wait for one store command; a read whose command is slower goes to the
    server directly (it never waits longer, and never serves what it cannot prove)."""
    covered_entry_ttl: float = 300.0
    """Store expiry of an entry with ``ttlMs`` 0 while a fleet stream covers it."""
    key: str | bytes | None = field(default=None, repr=False)
    """The secret that binds each shared entry to its principal and scope (an HMAC in
    the entry, checked on every read: an entry found under another principal's key is
    refused). Give every worker the same secret, one the store never holds (from your
    secret manager). By default it is derived from ``namespace``: that catches entries
    copied under another key by mistake or by a process that does not know freshcache,
    not a writer that does (docs/architecture.md, "What the fleet trusts")."""

    @property
    def binding_key(self) -> bytes:
        """The HMAC key of entry bindings (``key``, or derived from ``namespace``)."""
        if isinstance(self.key, bytes):
            return self.key
        if isinstance(self.key, str):
            return self.key.encode()
        return hashlib.sha256(f"freshcache-fleet\x1f{self.namespace}".encode()).digest()

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or "://" not in self.url:
            raise ConfigurationError(
                f"Fleet url must look like redis://host:port/db, got {self.url!r}"
            )
        if not isinstance(self.namespace, str) or not self.namespace or ":" in self.namespace:
            raise ConfigurationError(
                f"Fleet namespace must be a non-empty string without ':', got {self.namespace!r}"
            )
        if self.key is not None and (not isinstance(self.key, (str, bytes)) or not self.key):
            raise ConfigurationError("Fleet key must be a non-empty str or bytes secret")
        for name in ("lease", "selection_ttl", "fill_lock", "op_timeout", "covered_entry_ttl"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value > 0:
                raise ConfigurationError(f"Fleet.{name} must be seconds > 0, got {value!r}")


def as_fleet(fleet: str | Fleet) -> Fleet:
    """``fleet=`` as given to `FreshCache`: a URL or a `Fleet`."""
    if isinstance(fleet, Fleet):
        return fleet
    if isinstance(fleet, str):
        return Fleet(fleet)
    raise ConfigurationError(f"fleet= takes a redis:// URL or a Fleet, got {fleet!r}")


def __getattr__(name: str) -> Any:
    # `ValkeyStore` lives with the fleet's machinery; this module stays a settings object.
    if name == "ValkeyStore":
        from ._fleet._entry_store import ValkeyStore

        return ValkeyStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Fleet", "ValkeyStore"]
