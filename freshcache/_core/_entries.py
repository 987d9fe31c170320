"""Stored entries and the small `Store` protocol the engine keeps them in (DESIGN §4).

The engine decides *whether* an entry may be served; the store only holds entries
within its bounds. An entry the store evicts is simply a miss (invariant 7).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ._events import ListReply
from ._model import CacheScope, ReadResult
from ._slots import filled_by_slots

Principal = str | None
"""Who a call is made for: the ``principal=`` of `FreshCache.read` and its siblings and
the ``principal`` argument of every `Source` method. ``None`` is the cache's anonymous
default (``FreshCache(principal=...)``). Each principal sees its own slice of the cache:
its entries, hit table and denials are kept apart (a *partition*)."""

Partition = Principal
"""The same type under the engine's name for it: the slice of the cache one principal
sees (`Principal`). Every public signature names the argument ``principal``."""

PUBLIC = "\x00public"
"""Partition of ``public`` entries shared by all principals (only with ``share_public``)."""

EntryKey = tuple[str, str, str, Partition]
"""(server identity, method, the parameter that varies the result, partition)."""


@filled_by_slots
@dataclass(frozen=True, slots=True)
class Entry:
    """One cached result: a read's contents or one page of a list."""

    value: ReadResult | ListReply
    generation: int
    """The URI's (or list's) generation when the read that produced it was *sent*."""
    received_at: float
    """Monotonic clock reading when the reply arrived."""
    expires_at: float
    """``received_at + ttl``: the end of the server's freshness window."""
    scope: CacheScope
    size: int
    """Approximate bytes held, for the store's byte bound."""
    hintless: bool = False
    """From a revision without caching hints: subscription-backed while covered."""
    pushed: bool = False
    """A pushed body (`ResourceUpdated.contents`): fresh while the stream that sent it
    covers the URI, until the next change heard of; its TTL is 0 otherwise."""


class Store(Protocol):
    """Where entries live. Implementations bound memory and report evictions."""

    def get(self, key: EntryKey) -> Entry | None:
        """The entry under ``key``, or ``None``."""
        ...

    def put(self, key: EntryKey, entry: Entry) -> None:
        """Store ``entry`` (evicting others as the bounds require)."""
        ...

    def discard(self, key: EntryKey) -> None:
        """Remove ``key`` if present."""
        ...

    def set_eviction_listener(self, listener: Callable[[EntryKey], None]) -> None:
        """Call ``listener(key)`` whenever the store drops an entry on its own."""
        ...

    @property
    def entry_count(self) -> int:
        """Entries held now."""
        ...

    @property
    def bytes_held(self) -> int:
        """Approximate bytes held now."""
        ...


class ObjectStore(Store, Protocol):
    """A `Store` that keeps what it is given, as is, in this process, under any hashable
    key, and asks an entry only for its ``size`` (`MemoryStore`).

    With one, the engine stores a URI's record itself under the bare URI as the entry
    of its default partition (`UriRecord`), rather than an `Entry` under a key tuple:
    one object per cached URI, found by the engine in `held` (the store's own dict
    holds the records of URIs that hold such an entry). So the engine claims the store
    (`claim`): one engine per store, told what each eviction dropped.
    """

    keeps_objects: bool
    """True: entries are kept as given, keys may be any hashable (see the class)."""

    held: Mapping[Any, Any]
    """What it holds now, by key; reading it does not touch the use order."""

    def claim(self, owner: object, listener: Callable[[Any, Any], None]) -> None:
        """Serve ``owner`` alone (a second owner is refused with a `ConfigurationError`
        that says what to do), and call ``listener(key, held)`` for every entry it
        drops on its own, in place of the `set_eviction_listener` listener."""
        ...

    def get_object(self, key: Any) -> Any:
        """What was put under ``key`` (touching it, as `get` does), or ``None``."""
        ...

    def put_object(self, key: Any, held: Any) -> None:
        """`put` for any hashable key and any object with a ``size``."""
        ...

    def discard_object(self, key: Any) -> None:
        """`discard` for any hashable key."""
        ...
