"""The default store: an LRU dict bounded by entries *and* bytes (invariant 7).

Keys are ``(server identity, method, parameter, partition)``; the engine decides what
may be served, the store only keeps entries within bounds and reports what it drops.

One `OrderedDict` holds the entries in use order (least recent first); an entry's
size is its own ``size``, summed as entries come and go. That is one table slot and
one order link per entry, where `cachetools.LRUCache` keeps three tables (data, sizes,
order) per entry.

It is an `ObjectStore`: it keeps what it is given as is, under any hashable key, so
the engine stores a URI's record itself under the bare URI (one object per cached
URI, no key tuple, no separate `Entry`); such an entry's ``size`` is recomputed from
it when it leaves, so it must not change while stored (the engine discards first).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from .._core import Entry, EntryKey
from .._errors import ConfigurationError


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
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        self._bytes = 0
        self._on_evict: Callable[[Any], None] | None = None

    def get(self, key: EntryKey) -> Entry | None:
        return self.get_object(key)  # type: ignore[no-any-return]

    def put(self, key: EntryKey, entry: Entry) -> None:
        self.put_object(key, entry)

    def discard(self, key: EntryKey) -> None:
        self.discard_object(key)

    def get_object(self, key: Hashable) -> Any:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)  # now the most recently used
        return entry

    def put_object(self, key: Hashable, entry: Any) -> None:
        entries = self._entries
        old = entries.pop(key, None)
        if old is not None:
            self._bytes -= old.size  # replaced, not evicted
        size = entry.size
        if size > self.max_bytes:
            # Larger than the whole store: keeping it would evict everything else.
            if self._on_evict is not None:
                self._on_evict(key)
            return
        entries[key] = entry
        self._bytes += size
        while self._bytes > self.max_bytes or len(entries) > self.max_entries:
            evicted, gone = entries.popitem(last=False)  # the least recently used
            self._bytes -= gone.size
            if self._on_evict is not None:
                self._on_evict(evicted)

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
