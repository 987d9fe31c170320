"""`ValkeyStore`: the engine's `Store` contract (the one `MemoryStore` keeps) on
Valkey / Redis, for a process whose entries should live outside its own memory.

One store is one process's entries (the fleet's *shared* view is `SharedStore`):
bounded by entries and bytes, least recently used first out, every eviction reported.
All bookkeeping runs in server-side scripts over four keys that share one hash tag
(``{...}``), so the same scripts run on one Valkey, Redis 7 or a cluster slot.

What the store may see: key names are keyed hashes (HMAC) of the entry key, never a
URI or a principal; values are the entries, each signed with an HMAC under the
store's own key (a random one per instance unless given) and refused when the
signature does not verify. A command that fails makes a miss (``get``) and never
an old hit: a key whose ``discard`` could not be confirmed is not served again
until a later ``put`` or ``discard`` of it succeeds (fail closed).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import pickle
import secrets
from collections.abc import Callable
from typing import Any

from .._core import Entry, EntryKey
from .._errors import ConfigurationError

# KEYS: lru (zset field -> tick), sizes (hash), data (hash), bytes, tick.
# ARGV: field, blob, size, max entries, max bytes. Returns {too_large, evicted...}.
_PUT = """
local f, size = ARGV[1], tonumber(ARGV[3])
local maxe, maxb = tonumber(ARGV[4]), tonumber(ARGV[5])
local old = redis.call('HGET', KEYS[2], f)
if old then
  redis.call('DECRBY', KEYS[4], tonumber(old))
  redis.call('HDEL', KEYS[2], f)
  redis.call('HDEL', KEYS[3], f)
  redis.call('ZREM', KEYS[1], f)
end
if size > maxb then return {1} end
local tick = redis.call('INCR', KEYS[5])
redis.call('ZADD', KEYS[1], tick, f)
redis.call('HSET', KEYS[2], f, size)
redis.call('HSET', KEYS[3], f, ARGV[2])
redis.call('INCRBY', KEYS[4], size)
local out = {0}
while redis.call('ZCARD', KEYS[1]) > maxe or tonumber(redis.call('GET', KEYS[4]) or '0') > maxb do
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
  local held = redis.call('HGET', KEYS[2], oldest) or '0'
  redis.call('DECRBY', KEYS[4], tonumber(held))
  redis.call('HDEL', KEYS[2], oldest)
  redis.call('HDEL', KEYS[3], oldest)
  redis.call('ZREM', KEYS[1], oldest)
  out[#out + 1] = oldest
end
return out
"""

# KEYS: lru, data, tick; ARGV: field. The entry, and it becomes the most recent.
_GET = """
local blob = redis.call('HGET', KEYS[2], ARGV[1])
if blob then redis.call('ZADD', KEYS[1], redis.call('INCR', KEYS[3]), ARGV[1]) end
return blob
"""

# KEYS: lru, sizes, data, bytes; ARGV: field.
_DISCARD = """
local old = redis.call('HGET', KEYS[2], ARGV[1])
if old then redis.call('DECRBY', KEYS[4], tonumber(old)) end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
"""


class ValkeyStore:
    """A `Store` on Valkey / Redis (``redis://``), bounded by entries and bytes."""

    def __init__(
        self,
        url_or_client: str | Any,
        *,
        max_entries: int = 10_000,
        max_bytes: int = 64 * 1024 * 1024,
        namespace: str = "freshcache",
        key: bytes | None = None,
    ) -> None:
        if max_entries < 1:
            raise ConfigurationError(f"max_entries must be >= 1, got {max_entries!r}")
        if max_bytes < 1:
            raise ConfigurationError(f"max_bytes must be >= 1, got {max_bytes!r}")
        if isinstance(url_or_client, str):
            from redis import Redis

            self._redis: Any = Redis.from_url(url_or_client)
        else:
            self._redis = url_or_client
        self._key = key if key is not None else secrets.token_bytes(32)
        self.max_entries, self.max_bytes = max_entries, max_bytes
        tag = hmac.new(self._key, b"store", hashlib.sha256).hexdigest()[:24]
        base = f"{namespace}:ls:{{{tag}}}"
        self._lru, self._sizes, self._data = f"{base}:lru", f"{base}:size", f"{base}:data"
        self._bytes, self._tick = f"{base}:bytes", f"{base}:tick"
        self._put = self._redis.register_script(_PUT)
        self._get = self._redis.register_script(_GET)
        self._discard = self._redis.register_script(_DISCARD)
        self._names: dict[str, EntryKey] = {}
        self._unsure: set[str] = set()
        """Fields whose removal was not confirmed: never served (fail closed)."""
        self._listener: Callable[[EntryKey], None] | None = None

    def _field(self, key: EntryKey) -> str:
        return hmac.new(self._key, json.dumps(list(key)).encode(), hashlib.sha256).hexdigest()

    def _sign(self, blob: bytes) -> bytes:
        return hmac.new(self._key, blob, hashlib.sha256).digest() + blob

    def _verified(self, signed: bytes) -> Entry | None:
        mac, blob = signed[:32], signed[32:]
        if not hmac.compare_digest(mac, hmac.new(self._key, blob, hashlib.sha256).digest()):
            return None  # not written by this store: never unpickled, never served
        entry = pickle.loads(blob)  # verified above, written by this store
        return entry if isinstance(entry, Entry) else None

    def get(self, key: EntryKey) -> Entry | None:
        field = self._field(key)
        if field in self._unsure:
            return None
        try:
            signed = self._get(keys=[self._lru, self._data, self._tick], args=[field])
        except Exception:  # a store that does not answer is a miss
            return None
        return None if signed is None else self._verified(bytes(signed))

    def put(self, key: EntryKey, entry: Entry) -> None:
        field = self._field(key)
        blob = self._sign(pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL))
        try:
            out = self._put(
                keys=[self._lru, self._sizes, self._data, self._bytes, self._tick],
                args=[field, blob, entry.size, self.max_entries, self.max_bytes],
            )
        except Exception:  # the entry may or may not be there: distrust it
            self._unsure.add(field)
            return
        self._unsure.discard(field)
        too_large = int(out[0])
        evicted = [f.decode() if isinstance(f, bytes) else str(f) for f in out[1:]]
        if too_large:
            self._names.pop(field, None)
            self._report(key)
            return
        self._names[field] = key
        for gone in evicted:
            name = self._names.pop(gone, None)
            if name is not None:
                self._report(name)

    def discard(self, key: EntryKey) -> None:
        field = self._field(key)
        try:
            self._discard(keys=[self._lru, self._sizes, self._data, self._bytes], args=[field])
        except Exception:  # not confirmed gone: never served again
            self._unsure.add(field)
            return
        self._unsure.discard(field)
        self._names.pop(field, None)

    def _report(self, key: EntryKey) -> None:
        if self._listener is not None:
            self._listener(key)

    def set_eviction_listener(self, listener: Callable[[EntryKey], None]) -> None:
        self._listener = listener

    @property
    def entry_count(self) -> int:
        return int(self._redis.zcard(self._lru))

    @property
    def bytes_held(self) -> int:
        return int(self._redis.get(self._bytes) or 0)

    def clear(self) -> None:
        """Drop every entry of this store (no evictions reported)."""
        self._redis.delete(self._lru, self._sizes, self._data, self._bytes, self._tick)
        self._names.clear()

    def close(self) -> None:
        self._redis.close()

    def __repr__(self) -> str:
        return f"ValkeyStore(max_entries={self.max_entries}, max_bytes={self.max_bytes})"
