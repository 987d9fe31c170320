"""The shared view on Valkey/Redis: keys, the server-side scripts, the channel.

Every rule that must hold across processes runs inside one script, so no other
worker's command can fall between its steps (Valkey runs a script atomically):

- `PEEK`: the store's epoch and the URI's generation, the entry if it is current
  (stored under ``epoch:generation|``: one left from an older epoch or generation is
  as good as none), and (when there is none) the fleet-wide single-flight lock for
  this generation;
- `FILL`: write an entry only if epoch and generation are still the ones read when
  the server read was *sent* (invariant 1 across processes: a slow worker cannot
  write old text over a newer change);
- `INVALIDATE`: bump the generation, delete the URI's entries and publish, with the
  channel's next sequence number (a gap in them tells a worker it missed something);
  a list's change (``tools``, ``prompts``, ``resources``: a ``*/list_changed`` the
  listener heard) goes through the same script under the list's own keys;
- `ANNOUNCE`: the listener's coverage;
- `BEAT`: a worker's heartbeat: its selection, and the lease's renewal by its holder.

The *epoch* is a random value witnessed by the store's script cache (`_epoch`): a
store that restarted, with its data (RDB, AOF) or without, starts a new one at the
first `PEEK`, so nothing stored before the restart is current and no fill read
before it can land (`FILL` checks the epoch). On
a cluster the epoch also names the primary that serves the server's slot
(``node/random``, `PEEK` and `MINT` ask ``CLUSTER MYID``): a primary that finds an
epoch set under another node (its replica was promoted, or the slot was migrated to
it) starts a new one, atomically, so the first worker's `PEEK` there starts it and
every other worker adopts it: one new epoch, and one server read per URI,
fleet-wide. A ``CLUSTER MYID`` that fails inside a script fails it (never an epoch
that names no node and so never changes): the worker takes it as a store that does
not answer and reads the server itself.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from .._core import Partition, ReadReply, ResourceContents
from ._epoch import WitnessedPeek, register

PEEK = """
-- `witness` (set above this line) is the epoch this copy of the script vouches for
local node = ''
if ARGV[6] == '1' then
  local id = redis.pcall('CLUSTER', 'MYID')
  if type(id) ~= 'string' then
    return redis.error_reply('freshcache PEEK: CLUSTER MYID failed, no epoch can name its primary')
  end
  node = id .. '/'
end
local epoch = redis.call('GET', KEYS[1])
if epoch ~= node .. witness then
  if epoch and string.sub(epoch, 1, #node) ~= node then return {epoch, 'node'} end
  return {epoch or '', 'epoch'}
end
local started = 0
local gen = redis.call('GET', KEYS[2]) or '0'
local fence = epoch .. ':' .. gen .. '|'
local function current(k)
  local v = redis.call('GET', k)
  if v and string.sub(v, 1, #fence) == fence then return v end
  return false
end
local entry = current(KEYS[3])
local key = KEYS[3]
if (not entry) and KEYS[4] ~= KEYS[3] then entry = current(KEYS[4]); key = KEYS[4] end
local denied = redis.call('EXISTS', KEYS[5])
local public = (key == KEYS[4] and KEYS[4] ~= KEYS[3]) and 1 or 0
if entry then return {epoch, gen, entry, redis.call('PTTL', key), 0, public, denied, started} end
local got = 0
if ARGV[2] ~= '' and (ARGV[5] ~= '1' or redis.call('EXISTS', KEYS[6]) == 1) then
  if redis.call('SET', ARGV[2] .. epoch .. ':' .. gen, ARGV[3], 'NX', 'PX', ARGV[4]) then
    got = 1
  end
end
return {epoch, gen, false, 0, got, 0, denied, started}
"""

# KEYS: epoch, generation, entry, entry set, the fill lock; ARGV: epoch, generation,
# entry, expiry (ms), the lock's holder to release it for ('' keeps it). Written or
# fenced off, the filler's lock goes in the same step (one round trip, not two).
FILL = """
if ARGV[5] ~= '' and redis.call('GET', KEYS[5]) == ARGV[5] then redis.call('DEL', KEYS[5]) end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if (redis.call('GET', KEYS[2]) or '0') ~= ARGV[2] then return 0 end
redis.call('SET', KEYS[3], ARGV[1] .. ':' .. ARGV[2] .. '|' .. ARGV[3], 'PX', ARGV[4])
redis.call('SADD', KEYS[4], KEYS[3])
if redis.call('PTTL', KEYS[4]) < tonumber(ARGV[4]) then redis.call('PEXPIRE', KEYS[4], ARGV[4]) end
return 1
"""

# KEYS: seq, then (generation, entry set) per URI; ARGV: channel, origin, kind, sent
# at (ms), generation expiry (ms), then one URI per key pair.
INVALIDATE = """
local out = {}
for i = 1, (#KEYS - 1) / 2 do
  local g = redis.call('INCR', KEYS[2 * i])
  redis.call('PEXPIRE', KEYS[2 * i], ARGV[5])
  for _, k in ipairs(redis.call('SMEMBERS', KEYS[2 * i + 1])) do redis.call('DEL', k) end
  redis.call('DEL', KEYS[2 * i + 1])
  local s = redis.call('INCR', KEYS[1])
  redis.call('PUBLISH', ARGV[1], cjson.encode({s = s, k = ARGV[3], o = ARGV[2],
    u = ARGV[5 + i], t = tonumber(ARGV[4])}))
  out[i] = g
end
return out
"""

# A listener's loss, fenced once per listener term: KEYS: seq, then (generation, entry
# set, the term's marker) per URI; ARGV: channel, origin, sent at (ms), expiry (ms), then
# (URI, the generation this worker last filled it under, or '') per URI. The first
# worker to notice the loss of a term bumps every URI it covered; a later one bumps a
# URI only while its own fill may still be current (the generation it filled under is
# still the URI's): what it filled while it still believed in the lost term is fenced
# off, an entry re-proven since under the next term is not thrown away again.
LOST = """
local out = {}
for i = 1, (#KEYS - 1) / 3 do
  local first = redis.call('SET', KEYS[3 * i + 1], '1', 'NX', 'PX', ARGV[4])
  local mine = ARGV[4 + 2 * i]
  if first or (mine ~= '' and (redis.call('GET', KEYS[3 * i - 1]) or '0') == mine) then
    local g = redis.call('INCR', KEYS[3 * i - 1])
    redis.call('PEXPIRE', KEYS[3 * i - 1], ARGV[4])
    for _, k in ipairs(redis.call('SMEMBERS', KEYS[3 * i])) do redis.call('DEL', k) end
    redis.call('DEL', KEYS[3 * i])
    local s = redis.call('INCR', KEYS[1])
    redis.call('PUBLISH', ARGV[1], cjson.encode({s = s, k = 'lost', o = ARGV[2],
      u = ARGV[3 + 2 * i], t = tonumber(ARGV[3])}))
    out[i] = g
  else
    out[i] = 0
  end
end
return out
"""

# KEYS: seq, denial marker; ARGV: channel, origin, kind ('denied' | 'allowed'), uri,
# partition tag, marker expiry (ms). The marker and its announcement, atomically.
DENY = """
if ARGV[3] == 'denied' then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[6])
else
  if redis.call('DEL', KEYS[2]) == 0 then return 0 end
end
local s = redis.call('INCR', KEYS[1])
redis.call('PUBLISH', ARGV[1], cjson.encode({s = s, k = ARGV[3], o = ARGV[2], u = ARGV[4],
  p = ARGV[5]}))
return s
"""

# KEYS: seq, live; ARGV: channel, origin, kind ('live' | 'down'), payload, px, term.
ANNOUNCE = """
local s = redis.call('INCR', KEYS[1])
if ARGV[3] == 'live' then
  redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])
else
  local cur = redis.call('GET', KEYS[2])
  if cur and cjson.decode(cur).term == ARGV[6] then redis.call('DEL', KEYS[2]) end
end
redis.call('PUBLISH', ARGV[1], cjson.encode({s = s, k = ARGV[3], o = ARGV[2], p = ARGV[4]}))
return s
"""

# KEYS: lease, live, the worker's selection, the live workers, the registry's version;
# ARGV: the lease holder to renew ('' renews nothing), lease expiry (ms), the selection
# (JSON), its expiry (ms), now (ms), the worker. The version is never a value seen
# before (the registering worker and the store's clock, not a counter): a version key
# that expired (a day after the last new selection) or a store restored from an older
# snapshot cannot hand back the version a listener already saw.
BEAT = """
local renewed = 0
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  renewed = 1
end
if redis.call('GET', KEYS[3]) ~= ARGV[3] then
  local t = redis.call('TIME')
  redis.call('SET', KEYS[5], ARGV[6] .. ':' .. t[1] .. '.' .. t[2], 'PX', 86400000)
end
redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[4])
redis.call('ZADD', KEYS[4], tonumber(ARGV[5]) + tonumber(ARGV[4]), ARGV[6])
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', ARGV[5])
return {redis.call('GET', KEYS[1]) or '', renewed, redis.call('GET', KEYS[5]) or '0'}
"""

RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

_GENERATION_TTL_MS = 24 * 3600 * 1000

_NAMES_KEPT = 4096
"""URIs (and partitions) whose keyed key names a `SharedStore` keeps computed."""

LIST_CHANGED = "list_changed"
"""The channel message kind of a list's change; its ``u`` names the list."""
LIST_FENCES = {"list_acknowledged": "acknowledged", "list_lost": "stream_lost"}
"""The channel message kinds of a list the listener fenced off (its new stream's
acknowledgment, its lost stream), by the engine's re-proof cause: the generation
moves as for a change, but nobody heard of one (`CatalogChange.reproof`)."""

LIST_NAMES = ("tools", "prompts", "resources")
"""The lists a ``list_changed`` message may name (templates change with ``resources``)."""

CATALOG_LISTS = {"tools": "tools", "prompts": "prompts", "resource_templates": "resources"}
"""The list whose generation fences each catalog's shared walk."""


def catalog_lists(catalogs: frozenset[str]) -> list[str]:
    """The lists whose generations fence ``catalogs``' shared walks."""
    return sorted({CATALOG_LISTS[kind] for kind in catalogs if kind in CATALOG_LISTS})


def _digest(*parts: str, key: bytes | None = None) -> str:
    """A name part: a keyed hash (HMAC-SHA256, 128 bits) of ``parts``. Key names and
    channel names hold only these, never a URI, a principal or a server's identity:
    without the fleet's key, a user who can list keys cannot tell whose or which
    resource a key holds, nor confirm a guess."""
    message = "\x1f".join(parts).encode()
    if key is None:
        return hashlib.sha256(message).hexdigest()[:32]
    return hmac.new(key, message, hashlib.sha256).hexdigest()[:32]


def name_key(key: bytes) -> bytes:
    """The key of key names, derived from the fleet's key (apart from entry bindings)."""
    return hmac.new(key, b"freshcache-fleet key names", hashlib.sha256).digest()


def partition_tag(partition: Partition, key: bytes | None = None) -> str:
    """A partition's part of a key (``None``, the default partition, is its own): keyed
    with ``key`` (`SharedStore.tag` passes the fleet's name key)."""
    return "-" if partition is None else _digest("p", partition, key=key)


@dataclass(frozen=True, slots=True)
class Peeked:
    """What `PEEK` found."""

    epoch: str
    generation: str
    reply: ReadReply | None
    """The current entry as a reply (a shared copy): the engine decides whether it may
    serve the principal (`FreshnessEngine.may_share`)."""
    locked: bool
    """This worker now holds the single-flight lock of (uri, partition, generation)."""
    bound: bool = False
    """The entry's binding (its keyed HMAC) names the key it was found under: this
    partition (or the public one) and its scope. An entry copied under another key is
    not bound."""
    public: bool = False
    """The entry was found under the public key (the shared public copy)."""
    denied: bool = False
    """Some worker's own server read for this principal was refused, and none of its
    reads has succeeded since (the fleet-wide denial)."""
    started: bool = False
    """This `PEEK` replaced an epoch another cluster node had set (a failover or a
    moved slot): nothing stored before is current."""


class Registry:
    """The workers' registry, `SharedStore`'s base: each worker's selection (with an
    expiry) and the set of live workers, their union, and the heartbeat."""

    redis: Redis
    prefix: str
    workers_key: str
    lease_key: str
    live_key: str
    registry_key: str
    _beat: Any

    def selection_key(self, worker: str) -> str:
        return f"{self.prefix}:sel:{worker}"

    async def register(self, worker: str, uris: frozenset[str], px: int, now_ms: int) -> None:
        """Register ``worker``'s selection (a `beat` that renews nothing)."""
        await self.beat(worker, uris, px, now_ms)

    async def beat(
        self,
        worker: str,
        uris: frozenset[str],
        px: int,
        now_ms: int,
        renew: str = "",
        lease_px: int = 0,
        client: Redis | None = None,
    ) -> tuple[str | None, bool, str]:
        """A worker's heartbeat in one script (`BEAT`): register its selection, renew
        the lease if ``renew`` holds it, and read the lease holder and the registry's
        version (it moves when a worker registers a selection it had not). A quiet
        worker's only store round trip: the listener reads the union of the selections
        again only when the version moved."""
        holder, renewed, version = await self._beat(
            keys=self.beat_keys(worker),
            args=[renew, lease_px, json.dumps(sorted(uris)), px, now_ms, worker],
            client=client,
        )
        return (str(holder) or None), bool(int(renewed)), str(version)

    def beat_keys(self, worker: str) -> list[str]:
        """`BEAT`'s keys for ``worker`` (`beat`, and the heartbeat's `BeatLine`)."""
        return [
            self.lease_key,
            self.live_key,
            self.selection_key(worker),
            self.workers_key,
            self.registry_key,
        ]

    async def unregister(self, worker: str) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(self.selection_key(worker))
            pipe.zrem(self.workers_key, worker)
            await pipe.execute()

    async def union(self, now_ms: int) -> frozenset[str]:
        """The union of every live worker's selection."""
        return await self._selections(
            await self.redis.zrangebyscore(self.workers_key, now_ms, "+inf")
        )

    async def _selections(self, workers: list[Any]) -> frozenset[str]:
        if not workers:
            return frozenset()
        raws = await self.redis.mget([self.selection_key(str(w)) for w in workers])
        uris: set[str] = set()
        for raw in raws:
            if raw is not None:
                uris.update(json.loads(raw))
        return frozenset(uris)


class SharedStore(Registry):
    """The keys and scripts of one server's share of the fleet."""

    def __init__(
        self,
        redis: Redis,
        namespace: str,
        server_id: str,
        key: bytes | None = None,
        *,
        cluster: bool = False,
        sharded: bool = False,
    ) -> None:
        self.redis = redis
        self.cluster = cluster
        """On a cluster: epochs name the primary that serves the slot (`PEEK`)."""
        self.sharded = sharded
        """The channel is a shard channel: the scripts ``SPUBLISH`` (Valkey / Redis 7+)."""
        self._key = key if key is not None else hashlib.sha256(namespace.encode()).digest()
        self._server_id = server_id
        self._names = name_key(self._key)
        self._bases: dict[str, str] = {}
        self._tags: dict[Partition, str] = {}
        # One hash tag per MCP server: all its keys share one cluster slot (the scripts
        # touch several of them at once), and a server's keys spread over a cluster.
        self.prefix = f"{namespace}:{{{_digest('s', server_id, key=self._names)}}}"
        self.channel = f"{self.prefix}:changes"
        self.seq_key = f"{self.prefix}:seq"
        self.epoch_key = f"{self.prefix}:epoch"
        self.lease_key = f"{self.prefix}:lease"
        self.live_key = f"{self.prefix}:live"
        self.workers_key = f"{self.prefix}:workers"
        self.registry_key = f"{self.prefix}:registry"
        self._peek = WitnessedPeek(redis, PEEK, self.epoch_key, cluster=cluster)
        self._fill = register(redis, FILL, sharded=sharded)
        self._invalidate = register(redis, INVALIDATE, sharded=sharded)
        self._announce = register(redis, ANNOUNCE, sharded=sharded)
        self._release = register(redis, RELEASE, sharded=sharded)
        self._deny = register(redis, DENY, sharded=sharded)
        self._lost = register(redis, LOST, sharded=sharded)
        self._beat = register(redis, BEAT)

    # ------------------------------------------------------------------ keys

    def tag(self, partition: Partition) -> str:
        """``partition``'s part of key names (and of denial announcements): keyed."""
        tag = self._tags.get(partition)
        if tag is None:
            tag = self._tags[partition] = partition_tag(partition, self._names)
            if len(self._tags) > _NAMES_KEPT:
                del self._tags[next(iter(self._tags))]
        return tag

    def _uri(self, uri: str) -> str:
        """``uri``'s key base. Its HMAC is kept (a few per `PEEK` otherwise: every
        worker takes one per change), oldest first out past `_NAMES_KEPT`."""
        base = self._bases.get(uri)
        if base is None:
            base = self._bases[uri] = f"{self.prefix}:u:{_digest('u', uri, key=self._names)}"
            if len(self._bases) > _NAMES_KEPT:
                del self._bases[next(iter(self._bases))]
        return base

    def entry_key(self, uri: str, partition: str) -> str:
        return f"{self._uri(uri)}:e:{partition}"

    def denial_key(self, uri: str, partition: Partition) -> str:
        return f"{self._uri(uri)}:d:{self.tag(partition)}"

    def binding(self, uri: str, where: str, scope: str, epoch: str, generation: str) -> str:
        """The keyed HMAC that ties an entry to the key it is stored under (`Fleet.key`)."""
        message = "\x1f".join((self._server_id, uri, where, scope, epoch, generation))
        return hmac.new(self._key, message.encode(), hashlib.sha256).hexdigest()

    def _list(self, name: str) -> str:
        """A list's keys (``tools``, ``prompts``, ``resources``): apart from every URI's."""
        return f"{self.prefix}:l:{name}"

    # ------------------------------------------------------------------ entries

    async def peek(
        self,
        uri: str,
        partition: Partition,
        *,
        share_public: bool,
        lock_for: str,
        lock_ms: int,
        need_live: bool = False,
    ) -> Peeked:
        """The current entry of ``uri`` for ``partition``, else maybe the fill lock.
        ``need_live``: the lock only while a listener's live stream is announced (a
        read sent while no listener vouches for the fleet, during a takeover, would be
        fenced off by the next listener's acknowledgment anyway: wait for that one)."""
        base = self._uri(uri)
        own = self.entry_key(uri, self.tag(partition))
        public = self.entry_key(uri, "public") if share_public else own
        lock_base = f"{base}:lock:{self.tag(partition)}:" if lock_for else ""
        epoch, generation, raw, pttl, got, in_public, denied, started = await self._peek(
            keys=[
                self.epoch_key,
                f"{base}:g",
                own,
                public,
                self.denial_key(uri, partition),
                self.live_key,
            ],
            args=[
                "",
                lock_base,
                lock_for,
                lock_ms,
                "1" if need_live else "",
                "1" if self.cluster else "",
            ],
        )
        epoch, generation = str(epoch), str(generation)
        reply, bound = None, False
        if raw:
            entry = json.loads(str(raw).split("|", 1)[1])
            if entry.get("epoch") == epoch and entry.get("generation") == generation:
                scope = entry.get("scope") or "private"
                where = "public" if int(in_public) else self.tag(partition)
                expected = self.binding(uri, where, scope, epoch, generation)
                bound = (where != "public" or scope == "public") and hmac.compare_digest(
                    str(entry.get("bind", "")), expected
                )
                ttl_ms = float(entry["ttl_ms"] or 0)
                reply = ReadReply(
                    contents=tuple(map(ResourceContents.from_mcp, entry["contents"])),
                    ttl_ms=min(ttl_ms, float(pttl)) if ttl_ms > 0 else ttl_ms,
                    cache_scope=entry["scope"],
                    from_server=True,
                    shared_copy=True,
                )
        public_copy = reply is not None and bool(int(in_public))
        return Peeked(
            epoch,
            generation,
            reply,
            bool(got),
            bound,
            public_copy,
            bool(int(denied)),
            bool(int(started)),
        )

    async def deny(self, uri: str, partition: Partition, origin: str) -> None:
        """``partition``'s own server read of ``uri`` was refused: fleet-wide, no shared
        copy serves it until one of its reads succeeds (`allow`). Marked in the store
        (`PEEK` reports it) and announced on the channel (every worker's engine hears
        of it before it serves its local public copy)."""
        await self._denial(uri, partition, origin, "denied")

    async def allow(self, uri: str, partition: Partition, origin: str) -> None:
        """``partition``'s own server read of ``uri`` succeeded: its denial is over."""
        await self._denial(uri, partition, origin, "allowed")

    async def _denial(self, uri: str, partition: Partition, origin: str, kind: str) -> None:
        await self._deny(
            keys=[self.seq_key, self.denial_key(uri, partition)],
            args=[self.channel, origin, kind, uri, self.tag(partition), _GENERATION_TTL_MS],
        )

    async def fill(
        self,
        uri: str,
        partition: Partition,
        fence: Peeked,
        reply: ReadReply,
        *,
        public: bool,
        expiry_ms: int,
        release: str = "",
    ) -> bool:
        """Store ``reply`` if the fence still holds; ``False``: fenced off. ``release``:
        the worker whose fill lock of this fence goes too, written or not (`unlock`)."""
        where = "public" if public else self.tag(partition)
        entry = {
            "epoch": fence.epoch,
            "generation": fence.generation,
            "ttl_ms": reply.ttl_ms,
            "scope": reply.cache_scope,
            "contents": [item.to_mcp() for item in reply.contents],
            "bind": self.binding(
                uri, where, reply.cache_scope or "private", fence.epoch, fence.generation
            ),
        }
        base = self._uri(uri)
        key = self.entry_key(uri, where)
        written = await self._fill(
            keys=[
                self.epoch_key,
                f"{base}:g",
                key,
                f"{base}:entries",
                self._lock(uri, partition, fence),
            ],
            args=[fence.epoch, fence.generation, json.dumps(entry), expiry_ms, release],
        )
        return bool(written)

    def _lock(self, uri: str, partition: Partition, fence: Peeked) -> str:
        """The fill lock of (uri, partition) under ``fence`` (as `PEEK` names it)."""
        return f"{self._uri(uri)}:lock:{self.tag(partition)}:{fence.epoch}:{fence.generation}"

    async def unlock(self, uri: str, partition: Partition, fence: Peeked, worker: str) -> None:
        await self._release(keys=[self._lock(uri, partition, fence)], args=[worker])

    async def lock_held(self, uri: str, partition: Partition, fence: Peeked) -> bool:
        return bool(await self.redis.exists(self._lock(uri, partition, fence)))

    async def invalidate(self, uris: list[str], origin: str, kind: str, sent_at_ms: int) -> None:
        """Bump, delete and publish for every URI of ``uris``, in one script."""
        if not uris:
            return
        keys = [self.seq_key]
        for uri in uris:
            base = self._uri(uri)
            keys += [f"{base}:g", f"{base}:entries"]
        await self._invalidate(
            keys=keys,
            args=[self.channel, origin, kind, sent_at_ms, _GENERATION_TTL_MS, *uris],
        )

    async def lists_changed(
        self, names: list[str], origin: str, sent_at_ms: int, kind: str = LIST_CHANGED
    ) -> None:
        """Bump and publish (message ``kind``: ``list_changed``, or a fence of
        `LIST_FENCES`) for every list of ``names`` (``tools``, ``prompts``,
        ``resources``): `INVALIDATE` under the lists' keys."""
        if not names:
            return
        keys = [self.seq_key]
        for name in names:
            base = self._list(name)
            keys += [f"{base}:g", f"{base}:entries"]
        await self._invalidate(
            keys=keys,
            args=[self.channel, origin, kind, sent_at_ms, _GENERATION_TTL_MS, *names],
        )

    # ------------------------------------------------------------------ catalogs

    def _catalog(self, kind: str) -> tuple[str, str]:
        """A catalog's list keys' base and its shared walk's key (public walks only)."""
        base = self._list(CATALOG_LISTS[kind])
        return base, f"{base}:c:{kind}"

    async def peek_catalog(
        self, kind: str, *, lock_for: str, lock_ms: int
    ) -> tuple[Peeked, list[Any] | None, float]:
        """`PEEK` for a catalog's shared walk: the fence, its items if one is current
        (and bound to its key), and the seconds its window has left; else maybe the
        fill lock of this generation (only while a listener's stream is announced)."""
        base, key = self._catalog(kind)
        epoch, generation, raw, pttl, got, _public, _denied, started = await self._peek(
            keys=[self.epoch_key, f"{base}:g", key, key, f"{base}:d", self.live_key],
            args=[
                "",
                f"{base}:lock:{kind}:",
                lock_for,
                lock_ms,
                "1",
                "1" if self.cluster else "",
            ],
        )
        epoch, generation = str(epoch), str(generation)
        fence = Peeked(epoch, generation, None, bool(got), started=bool(int(started)))
        if not raw:
            return fence, None, 0.0
        entry = json.loads(str(raw).split("|", 1)[1])
        expected = self.binding(kind, "catalog", "public", epoch, generation)
        if (
            entry.get("epoch") != epoch
            or entry.get("generation") != generation
            or not hmac.compare_digest(str(entry.get("bind", "")), expected)
            or not isinstance(entry.get("items"), list)
        ):
            return fence, None, 0.0
        return fence, entry["items"], max(0.0, float(pttl) / 1000.0)

    async def fill_catalog(self, kind: str, fence: Peeked, items: list[Any], ttl_ms: int) -> bool:
        """Store a complete public walk if the fence still holds; ``False``: fenced off."""
        base, key = self._catalog(kind)
        entry = {
            "epoch": fence.epoch,
            "generation": fence.generation,
            "items": items,
            "bind": self.binding(kind, "catalog", "public", fence.epoch, fence.generation),
        }
        written = await self._fill(
            keys=[
                self.epoch_key,
                f"{base}:g",
                key,
                f"{base}:entries",
                self._catalog_lock(kind, fence),
            ],
            args=[fence.epoch, fence.generation, json.dumps(entry), ttl_ms, ""],
        )
        return bool(written)

    def _catalog_lock(self, kind: str, fence: Peeked) -> str:
        base, _key = self._catalog(kind)
        return f"{base}:lock:{kind}:{fence.epoch}:{fence.generation}"

    async def unlock_catalog(self, kind: str, fence: Peeked, worker: str) -> None:
        await self._release(keys=[self._catalog_lock(kind, fence)], args=[worker])

    async def fence_lost(
        self, uris: list[str], origin: str, term: str, filled: dict[str, str], sent_at_ms: int
    ) -> int:
        """The listener of ``term`` is lost: fence off what it covered, once per term
        (`LOST`); ``filled``: the generation this worker last filled each URI under.
        An empty ``term`` (unknown) fences unconditionally. The URIs bumped."""
        if not uris:
            return 0
        marker = _digest("t", term, key=self._names) if term else secrets.token_hex(16)
        keys = [self.seq_key]
        args: list[str | int] = [self.channel, origin, sent_at_ms, _GENERATION_TTL_MS]
        for uri in uris:
            base = self._uri(uri)
            keys += [f"{base}:g", f"{base}:entries", f"{base}:lost:{marker}"]
            args += [uri, filled.get(uri, "")]
        out = await self._lost(keys=keys, args=args)
        return sum(1 for g in out if int(g))

    # ------------------------------------------------------------------ the listener

    def _seal(self, payload: dict[str, Any]) -> str:
        body = json.dumps({k: v for k, v in payload.items() if k != "sig"}, sort_keys=True)
        message = f"live\x1f{self._server_id}\x1f{body}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def sealed(self, payload: Any) -> dict[str, Any] | None:
        """``payload`` if it is a ``live`` announcement signed with the fleet's key for
        this server (else ``None``: a store writer's, or altered): only a signed one
        acknowledges a follower."""
        if not isinstance(payload, dict) or not isinstance(payload.get("sig"), str):
            return None
        return payload if hmac.compare_digest(payload["sig"], self._seal(payload)) else None

    async def announce(self, origin: str, kind: str, payload: dict[str, Any], px: int) -> None:
        if kind == "live":
            payload = {**payload, "sig": self._seal(payload)}
        await self._announce(
            keys=[self.seq_key, self.live_key],
            args=[self.channel, origin, kind, json.dumps(payload), px, payload.get("term", "")],
        )

    async def live(self) -> dict[str, Any] | None:
        """The stored ``live`` announcement, if signed (`sealed`)."""
        raw = await self.redis.get(self.live_key)
        return None if raw is None else self.sealed(json.loads(raw))

    async def take_lease(self, holder: str, px: int) -> bool:
        return bool(await self.redis.set(self.lease_key, holder, nx=True, px=px))

    async def release_lease(self, holder: str) -> None:
        await self._release(keys=[self.lease_key], args=[holder])

    async def lease_state(self) -> tuple[str | None, int]:
        """The lease holder and the lease's time to live (ms, negative when none): a
        time to live that grew between two looks proves a renewal in between."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(self.lease_key)
            pipe.pttl(self.lease_key)
            holder, pttl = await pipe.execute()
        return (None if holder is None else str(holder)), int(pttl)

    async def lease_holder(self) -> str | None:
        holder = await self.redis.get(self.lease_key)
        return None if holder is None else str(holder)

    async def sequence(self) -> int:
        return int(await self.redis.get(self.seq_key) or 0)
