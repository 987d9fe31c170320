"""What each part of a fleet worker may ask of the worker: narrow interfaces.

`FleetWorker` (`_worker`) builds its parts (`ChangeChannel`, `ListenerLease`,
`FollowerStreams`, `SharedReads`, `SharedCatalogs`, `HintOutbox`) and hands each one
itself, but a part knows the worker only as the `Protocol` below that names what it
uses, so no part imports `_worker` (and `_worker` importing every part makes no
circle). The counters and the cache's `Binding` live here because every part shares
them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .._core import Decision, FreshnessEngine
from .._core._counters import Tally
from .._core._sharing import Standing
from ._store import SharedStore
from ._telemetry import FleetTelemetry

if TYPE_CHECKING:
    from anyio.abc import TaskGroup
    from redis.asyncio import Redis

    from ..fleet import Fleet


@dataclass(slots=True)
class FleetCounters(Tally):
    """Running totals of one worker's fleet traffic."""

    store_replies: int = 0
    """Reads answered from the shared store (no server read): store hits."""
    server_reads: int = 0
    """Reads this worker sent to the server (to fill the store, or directly)."""
    refused_copies: int = 0
    """Shared copies the engine would not let serve the principal (denied, unbound)."""
    fills: int = 0
    fenced_writes: int = 0
    """Fills the generation fence refused (the URI changed while they were read)."""
    fill_waits: int = 0
    """Reads that waited for another worker's fill."""
    proof_waits: int = 0
    """Reads that, after a gap or a takeover, waited to be covered again and then took
    the fleet's path instead of reading the server (`SharedReads.expect_proof`)."""
    direct_reads: int = 0
    """Server reads that bypassed the store (uncovered URI, store down, pending hint)."""
    remote_invalidations: int = 0
    new_epochs: int = 0
    """Epochs this worker started on a cluster: its `PEEK` found the epoch of another
    node (a failover or a moved slot) and replaced it (once fleet-wide)."""
    gaps: int = 0
    channel_losses: int = 0
    lease_changes: int = 0
    published: int = 0
    catalog_takes: int = 0
    """Catalogs taken from the store: another worker's walk, no walk of this one's."""
    catalog_fills: int = 0
    """Complete public walks this worker stored for the others."""


@dataclass(slots=True)
class Binding:
    """What the worker needs of the cache it serves."""

    engine: FreshnessEngine
    carry_out: Callable[[list[Decision]], None]
    want_stream: Callable[[frozenset[str]], None]
    share_public: bool
    subscription_backed: bool
    max_ttl_ms: float
    selected: Callable[[], frozenset[str]] = field(default=frozenset)


class ChannelState(Protocol):
    """What the other parts read of the channel."""

    @property
    def usable(self) -> bool: ...

    @property
    def applying_remote(self) -> bool: ...

    @property
    def breaks(self) -> int: ...


class Followers(Protocol):
    def notify(self, kind: str, detail: Any) -> None: ...

    def acknowledged_id(self) -> str | None: ...


class LeaseState(Protocol):
    @property
    def leader(self) -> str | None: ...

    async def try_lead(self) -> bool: ...


class Outbox(Protocol):
    def pending(self, uri: str) -> bool: ...


class Proofs(Protocol):
    """What the other parts ask of the fleet's reads after a gap or a lost listener."""

    def expect_proof(self, *, outage: bool = False) -> None: ...

    def took_over(self, holder: str) -> None: ...

    def heard_remote(self, uri: str) -> None: ...

    async def fence_lost(self, uris: list[str], term: str) -> None: ...


class _Worker(Protocol):
    """What every part uses: the worker's id, settings and the shared store."""

    @property
    def id(self) -> str: ...

    @property
    def config(self) -> Fleet: ...

    @property
    def shared(self) -> SharedStore: ...


class Publishes(_Worker, Protocol):
    async def publish(self, uris: list[str], kind: str) -> None: ...

    async def publish_lists(self, names: list[str], kind: str = ...) -> None: ...

    async def attempt(self, action: Awaitable[None]) -> str | None: ...


class ChannelWorker(_Worker, Protocol):
    """What `ChangeChannel` uses."""

    @property
    def redis(self) -> Redis: ...

    @property
    def channel_redis(self) -> Redis | None: ...

    @property
    def counters(self) -> FleetCounters: ...

    @property
    def telemetry(self) -> FleetTelemetry: ...

    @property
    def bound(self) -> Binding | None: ...

    @property
    def followers(self) -> Followers: ...

    @property
    def reads(self) -> Proofs: ...

    def heard_denial(self, uri: str, tag: str, *, denied: bool) -> None: ...

    def store_answered(self) -> None: ...


class LeaseWorker(Publishes, Protocol):
    """What `ListenerLease` uses."""

    @property
    def counters(self) -> FleetCounters: ...

    @property
    def telemetry(self) -> FleetTelemetry: ...

    @property
    def tg(self) -> TaskGroup | None: ...

    @property
    def reads(self) -> Proofs: ...

    def store_answered(self) -> None: ...


class FollowWorker(Publishes, Protocol):
    """What `FollowerStreams` uses."""

    @property
    def channel(self) -> ChannelState: ...

    @property
    def lease(self) -> LeaseState: ...

    @property
    def reads(self) -> Proofs: ...


class OutboxWorker(Publishes, Protocol):
    """What `HintOutbox` uses."""

    @property
    def channel(self) -> ChannelState: ...


class ReadsWorker(Publishes, Protocol):
    """What `SharedReads` and `SharedCatalogs` use."""

    @property
    def standing(self) -> Standing: ...

    @property
    def counters(self) -> FleetCounters: ...

    @property
    def telemetry(self) -> FleetTelemetry: ...

    @property
    def bound(self) -> Binding | None: ...

    @property
    def channel(self) -> ChannelState: ...

    @property
    def outbox(self) -> Outbox: ...

    def store_answered(self) -> None: ...
