"""The default store: an LRU dict bounded by entries *and* bytes (invariant 7).

Keys are ``(server identity, method, parameter, partition)`` tuples, except a URI's
read for the engine's default partition, held under the bare URI (see the end); the
engine decides what may be served, the store only keeps entries within bounds and
reports what it drops.

One plain dict holds the entries in use order (least recent first: a use moves an
entry to the end by taking it out and putting it back); an entry's size is its own
``size``, summed as entries come and go. That is one table slot per entry (38 B at
100k entries), where an `OrderedDict` adds a link (~55 B) and `cachetools.LRUCache`
keeps three tables (data, sizes, order).

A plain dict leaves a hole where an entry was taken out, and finding its first entry
walks the holes at its front until the dict next compacts itself. Evicting one entry
per insertion from a large full store would walk thousands of them every time, so a
store bounded to `_BATCH_FROM` entries or more evicts in batches: when a bound is passed
it evicts down to 1/64 under it (the entry bound and the byte bound alike), one walk per
batch. A small store evicts exactly what the bounds require. Either way only entries
older than the one just put are evicted for it (a batch stops short of it); it goes
itself only if evicting all the others does not get under the bounds.

It is an `ObjectStore`: it keeps what it is given as is, under any hashable key, so
the engine stores a URI's record itself under the bare URI (one object per cached
URI, no key tuple, no separate `Entry`); such an entry's ``size`` is recomputed from
it when it leaves, so it must not change while stored (the engine discards first).

A store serves one cache: the engine that keeps its records in it claims it (`claim`),
and a second engine is refused (`ConfigurationError`). Two caches sharing one store
found each other's records under the same bare URI (of another server), and the store
reports what it drops to one listener.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

from .._core import Entry, EntryKey
from .._errors import ConfigurationError

_BATCH_FROM = 64
"""Stores bounded to at least this many entries evict in batches (see the docstring)."""


class MemoryStore:
    """In-process LRU store, bounded by entries and bytes."""

    keeps_objects = True
    """An `ObjectStore` (see the module docstring)."""

    def __init__(self, *, max_entries: int = 10_000, max_bytes: int = 64 * 1024 * 1024) -> None:
        if max_entries < 1:
            raise ConfigurationError(f"max_entries must be >= 1, got {max_entries!r}")
        if max_bytes < 1:
            raise ConfigurationError(f"max_bytes must be >= 1, got {max_bytes!r}")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: dict[Hashable, Any] = {}
        batched = max_entries >= _BATCH_FROM
        self._entries_after = max_entries - max_entries // 64 if batched else max_entries
        self._bytes_after = max_bytes - max_bytes // 64 if batched else max_bytes
        """What a batch evicts down to, once a bound is passed."""
        self._bytes = 0
        self._on_evict: Callable[[Any], None] | None = None
        self._owner: object | None = None
        """The engine that claimed the store (`claim`), if any."""
        self._on_evict_held: Callable[[Any, Any], None] | None = None
        """The owner's listener, told what was held too (in place of `_on_evict`)."""
        self.held: Mapping[Any, Any] = self._entries
        """What it holds now, by key (read only; reading it does not touch the use
        order): the owner finds its records here without a call."""

    def claim(self, owner: object, listener: Callable[[Any, Any], None]) -> None:
        """Be ``owner``'s store alone, and call ``listener(key, held)`` for every entry
        it drops on its own (in place of the `set_eviction_listener` listener)."""
        if self._owner is not None and self._owner is not owner:
            raise ConfigurationError(
                "this MemoryStore already keeps another cache's entries (a MemoryStore "
                "serves one cache: its entries are kept under the bare URI, and it tells "
                "one cache what it evicts); give each FreshCache its own MemoryStore"
            )
        self._owner = owner
        self._on_evict_held = listener

    def get(self, key: EntryKey) -> Entry | None:
        return self.get_object(key)  # type: ignore[no-any-return]

    def put(self, key: EntryKey, entry: Entry) -> None:
        self.put_object(key, entry)

    def discard(self, key: EntryKey) -> None:
        self.discard_object(key)

    def get_object(self, key: Hashable) -> Any:
        entries = self._entries
        entry = entries.pop(key, None)
        if entry is not None:
            entries[key] = entry  # now the most recently used
        return entry

    def put_object(self, key: Hashable, entry: Any) -> None:
        entries = self._entries
        old = entries.pop(key, None)
        if old is not None:
            self._bytes -= old.size  # replaced, not evicted
        size = entry.size
        if size > self.max_bytes:
            # Larger than the whole store: keeping it would evict everything else.
            self._evicted(key, entry)
            return
        entries[key] = entry
        self._bytes += size
        if self._bytes > self.max_bytes or len(entries) > self.max_entries:
            self._evict(key)

    def _evict(self, newest: Hashable) -> None:
        """Evict the least recently used entries down to the batch's bounds, but only
        entries older than ``newest`` (just put, at the back): it goes too only if all
        the others are not enough to get under the bounds themselves."""
        entries = self._entries
        over_entries = len(entries) - self.max_entries
        over_bytes = self._bytes - self.max_bytes
        excess = len(entries) - self._entries_after if over_entries > 0 else 0
        need_bytes = self._bytes - self._bytes_after if over_bytes > 0 else 0
        victims: list[Hashable] = []
        for key, entry in entries.items():  # one walk over the front's holes
            if excess <= 0 and need_bytes <= 0:
                break
            if key is newest:
                if over_entries > 0 or over_bytes > 0:
                    victims.append(key)  # the older ones were not enough
                break
            victims.append(key)
            excess -= 1
            need_bytes -= entry.size
            over_entries -= 1
            over_bytes -= entry.size
        for key in victims:
            gone = entries.pop(key, None)
            if gone is None:
                continue  # a listener took it out meanwhile: not an eviction
            self._bytes -= gone.size  # (before the listener lets the entry go)
            self._evicted(key, gone)

    def _evicted(self, key: Hashable, gone: Any) -> None:
        if self._on_evict_held is not None:
            self._on_evict_held(key, gone)
        elif self._on_evict is not None:
            self._on_evict(key)

    def discard_object(self, key: Hashable) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old.size

    def set_eviction_listener(self, listener: Callable[[Any], None]) -> None:
        self._on_evict = listener

    @property
    def entry_count(self) -> int:
        return len(self._entries)

    @property
    def bytes_held(self) -> int:
        return self._bytes

    def __repr__(self) -> str:
        return (
            f"MemoryStore(entries={self.entry_count}/{self.max_entries}, "
            f"bytes={self.bytes_held}/{self.max_bytes})"
        )
