"""The default store: a cachetools LRU cache bounded by entries *and* bytes (invariant 7).

Keys are ``(server identity, method, parameter, partition)``; the engine decides what
may be served, the store only keeps entries within bounds and reports what it drops.
"""

from __future__ import annotations

from collections.abc import Callable

from cachetools import LRUCache

from .._core import Entry, EntryKey
from .._errors import ConfigurationError


class _BoundedLRU(LRUCache[EntryKey, Entry]):
    """An LRU cache whose ``maxsize`` counts bytes, with a second bound on entries."""

    def __init__(self, max_bytes: int, max_entries: int) -> None:
        super().__init__(maxsize=max_bytes, getsizeof=_entry_size)
        self.max_entries = max_entries
        self.on_evict: Callable[[EntryKey], None] | None = None

    def __setitem__(self, key: EntryKey, value: Entry) -> None:
        super().__setitem__(key, value)
        while len(self) > self.max_entries:
            self.popitem()

    def popitem(self) -> tuple[EntryKey, Entry]:
        key, value = super().popitem()
        if self.on_evict is not None:
            self.on_evict(key)
        return key, value


def _entry_size(entry: Entry) -> int:
    return entry.size


class MemoryStore:
    """In-process store on `cachetools.LRUCache`, bounded by entries and bytes."""

    def __init__(self, *, max_entries: int = 10_000, max_bytes: int = 64 * 1024 * 1024) -> None:
        if max_entries < 1:
            raise ConfigurationError(f"max_entries must be >= 1, got {max_entries!r}")
        if max_bytes < 1:
            raise ConfigurationError(f"max_bytes must be >= 1, got {max_bytes!r}")
        self._cache = _BoundedLRU(max_bytes, max_entries)

    def get(self, key: EntryKey) -> Entry | None:
        return self._cache.get(key)

    def put(self, key: EntryKey, entry: Entry) -> None:
        if entry.size > self._cache.maxsize:
            # Larger than the whole store: keeping it would evict everything else.
            self.discard(key)
            if self._cache.on_evict is not None:
                self._cache.on_evict(key)
            return
        self._cache[key] = entry

    def discard(self, key: EntryKey) -> None:
        self._cache.pop(key, None)

    def set_eviction_listener(self, listener: Callable[[EntryKey], None]) -> None:
        self._cache.on_evict = listener

    @property
    def entry_count(self) -> int:
        return len(self._cache)

    @property
    def bytes_held(self) -> int:
        return int(self._cache.currsize)

    def __repr__(self) -> str:
        return (
            f"MemoryStore(entries={self.entry_count}/{self._cache.max_entries}, "
            f"bytes={self.bytes_held}/{self._cache.maxsize})"
        )
