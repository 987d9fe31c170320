"""Per-URI records of the engine, bounded (DESIGN §2 invariant 10).

A record holds a URI's generation, why it is not fresh, whether it is selected, the
reads in flight and the partitions that hold an entry. Each record counts its own
generations (small ints, which CPython shares: no int object per record), and they
never restart for a URI: the record of a URI that holds no entry, is not selected and
has no read in flight is dropped, and a record made again starts above every
generation any dropped record had (`UriRecords`), so a ticket or a snapshot mark taken
from a dropped record never matches the one made after it.

With a store that keeps objects in process (`ObjectStore`, the default `MemoryStore`),
the record *is* also the stored entry of the URI for the engine's default partition and
that entry's time-bounded hit row: one object per cached URI, stored under the bare URI.
Its entry fields (`value` ... `flags`) are empty while it holds no such entry. The
store's dict is then also where the engine finds it (`UriRecords`): the records of
URIs that hold no such entry are kept apart, so a cached URI has one table slot for
its record, not two. The engine claims the store (`ObjectStore.claim`): a second
engine finding the first one's records under the same bare URIs would serve another
server's text.

A record is six slots (80 B): what is rare or small shares a slot with something else.
Why it is invalid is four bits of `flags` (a small int with no read in flight); the
failures per partition share a slot with the held entry's window (`_Failed`, made on
the first failure and gone with the last); a URI held by one partition shares the
tuple `(partition,)` with every record of that partition (`alone`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._entries import Partition
from ._model import REASONS, ReadResult, Reason, ResourceContents

_ALONE: dict[Partition, tuple[Partition, ...]] = {}
"""One shared ``(partition,)`` per partition, for records whose URI only that partition
holds (most: a tuple per record was 48 B each for a cache with a ``principal``)."""
_ALONE_MAX = 256
_INF = float("inf")

REMEMBERED_IDLE = 1024
"""Records of URIs that hold nothing but a failure or an invalidation reason, kept
for `status` (oldest dropped first)."""

ENTRY_OVERHEAD = 256
"""Rough bytes of bookkeeping per entry beyond the contents (the store's byte bound)."""

HINTLESS = 1
PUSHED = 2
CURRENT = 4
"""The held entry is at the record's generation (set by `UriRecord.hold`, cleared by
`UriRecord.new_generation`): no int of its own for the generation it was stored at."""
SELECTED = 8
"""The agent relies on the URI (`UriRecord.selected`): kept whether or not an entry is."""
_ENTRY_FLAGS = HINTLESS | PUSHED | CURRENT
_REASONS: tuple[Reason, ...] = ("not_cached", *(r for r in REASONS if r != "not_cached"))
"""`UriRecord.invalid_reason` is the index in this of the bits `_WHY` of `flags`."""
_WHY = 0xF0
_WHY_BITS: dict[Reason, int] = {reason: n << 4 for n, reason in enumerate(_REASONS)}
assert len(_REASONS) <= 16
_READ = 256
"""`UriRecord.reads_in_flight` is counted in the bits of `flags` from this one up: with
no read in flight, ``flags`` stays below 256, an int CPython shares."""


class _Failed:
    """`UriRecord.problems` and the held entry's window, for the rare record with a
    failure (the others keep only the window float)."""

    __slots__ = ("problems", "ttl")

    def __init__(self, ttl: float, problems: dict[Partition, tuple[int, ReadResult]]) -> None:
        self.ttl = ttl
        self.problems = problems


def size_of(uri: str, contents: tuple[ResourceContents, ...]) -> int:
    """Approximate bytes a read entry holds, for the store's byte bound."""
    size = ENTRY_OVERHEAD + len(uri)
    for item in contents:
        size += len(item.uri) + len(item.text or "") + len(item.blob or "") + 64
    return size


@dataclass(slots=True)
class UriRecord:
    """What the engine knows of one URI."""

    generation: int
    partitions: tuple[Partition, ...] = ()
    """Partitions that hold an entry for this URI in the store (usually one)."""
    # The entry held in the record itself (see the module docstring); `value` is None
    # when there is none. The same fields as `Entry`, so the record stands in for one.
    value: ReadResult | None = None
    expires_at: float = 0.0
    window: float | _Failed = 0.0
    """The held entry's freshness window, in seconds (`ttl`), or, while a failure is
    recorded, a `_Failed` holding it and the `problems` (one slot for both)."""
    flags: int = 0
    """`SELECTED`, the held entry's `HINTLESS` | `PUSHED` | `CURRENT`, `invalid_reason`
    (bits `_WHY`), and the reads in flight counted in units of `_READ` (a small int: no
    object, and one slot, per record). The entry's scope is not kept: nothing asks a
    read entry for it once stored (the partition says it)."""

    @property
    def invalid_reason(self) -> Reason:
        """What status says when no entry is at `generation`: why it was invalidated,
        or ``not_cached`` when nothing was read since (or the entry was evicted)."""
        return _REASONS[(self.flags & _WHY) >> 4]

    @invalid_reason.setter
    def invalid_reason(self, reason: Reason) -> None:
        self.flags = self.flags & ~_WHY | _WHY_BITS[reason]

    @property
    def ttl(self) -> float:
        """The entry's freshness window, in seconds: ``received_at`` is derived from it
        (the engine passes one shared float per distinct window, so a record keeps one
        clock float, ``expires_at``, not two)."""
        window = self.window
        return window.ttl if isinstance(window, _Failed) else window

    @property
    def problems(self) -> dict[Partition, tuple[int, ReadResult]] | None:
        """Latest failed outcome per partition, with the generation it happened at;
        ``None`` when there is none (most URIs never fail)."""
        window = self.window
        return window.problems if window.__class__ is _Failed else None

    @property
    def reads_in_flight(self) -> int:
        """Server reads of the URI sent and not yet judged or abandoned."""
        return self.flags // _READ

    @reads_in_flight.setter
    def reads_in_flight(self, reads: int) -> None:
        self.flags = self.flags % _READ + max(0, reads) * _READ

    def read_sent(self) -> None:
        """A server read of the URI was sent (`reads_in_flight` += 1)."""
        self.flags += _READ

    def read_done(self) -> None:
        """A server read of the URI was judged or abandoned (`reads_in_flight` -= 1)."""
        if self.flags >= _READ:
            self.flags -= _READ

    @property
    def selected(self) -> bool:
        """Whether the agent relies on the URI (`FreshnessEngine.select`)."""
        return bool(self.flags & SELECTED)

    @selected.setter
    def selected(self, selected: bool) -> None:
        self.flags = self.flags | SELECTED if selected else self.flags & ~SELECTED

    # ------------------------------------------------------------------ as an entry

    @property
    def hintless(self) -> bool:
        return bool(self.flags & HINTLESS)

    @property
    def pushed(self) -> bool:
        return bool(self.flags & PUSHED)

    @property
    def held_generation(self) -> int:
        """`Entry.generation` of the held entry: the record's generation while it is
        `CURRENT`, else -1 (older; no generation is negative)."""
        return self.generation if self.flags & CURRENT else -1

    def new_generation(self, reason: Reason) -> None:
        """The URI changed: a new generation, the held entry (if any) is older, and
        ``reason`` is why (`invalid_reason`; one call for both, on every change)."""
        self.flags = self.flags & ~(CURRENT | _WHY) | _WHY_BITS[reason]
        self.generation += 1

    def answered(self, partition: Partition) -> None:
        """A reply for ``partition`` landed at the current generation: its failure (if
        any) is over, and what status says if the entry it makes is evicted is
        ``not_cached`` (one call for both, on every reply)."""
        self.flags &= ~_WHY
        window = self.window
        if window.__class__ is _Failed:
            self.clear_problem(partition)

    @property
    def received_at(self) -> float:
        """Monotonic clock reading when the held entry's reply arrived (`Entry.received_at`)."""
        ttl = self.ttl
        return self.expires_at - ttl if ttl < _INF else self.expires_at  # (never expires)

    @property
    def size(self) -> int:
        """Bytes of the held entry, recomputed from it (the store keeps only the sum)."""
        value = self.value
        return 0 if value is None else size_of(value.uri, value.contents)

    def hold(self, value: ReadResult, expires_at: float, ttl: float, flags: int) -> None:
        """Hold ``value`` as this URI's entry at the current generation, fresh for
        ``ttl`` seconds until ``expires_at``.

        The record may be a hit row another thread is reading (`row_result`): the
        deadline is closed first and set last, so a reader that sees the new value
        with a deadline sees the new one (it reads the value again after the deadline)."""
        self.expires_at = 0.0
        self.value = value
        window = self.window
        if window.__class__ is _Failed:
            window.ttl = ttl
        else:
            self.window = ttl
        self.flags = (self.flags & ~_ENTRY_FLAGS) | flags | CURRENT
        self.expires_at = expires_at

    def let_go(self) -> None:
        """Hold no entry any more (dropped or evicted). The value goes first (see `hold`)."""
        self.value = None
        self.expires_at = 0.0
        window = self.window
        if window.__class__ is _Failed:
            window.ttl = 0.0
        else:
            self.window = 0.0
        self.flags &= ~_ENTRY_FLAGS

    @property
    def idle(self) -> bool:
        """Nothing depends on it: no entry, not selected, no read in flight."""
        # no read, not selected
        return self.flags & ~(_ENTRY_FLAGS | _WHY) == 0 and not self.partitions

    def problem(self, partition: Partition) -> tuple[int, ReadResult] | None:
        window = self.window
        return window.problems.get(partition) if window.__class__ is _Failed else None

    def set_problem(self, partition: Partition, result: ReadResult) -> None:
        window = self.window
        if not isinstance(window, _Failed):
            window = self.window = _Failed(window, {})
        window.problems[partition] = (self.generation, result)

    def clear_problem(self, partition: Partition) -> None:
        window = self.window
        if isinstance(window, _Failed):
            window.problems.pop(partition, None)
            if not window.problems:
                self.window = window.ttl  # the failures are gone: the window alone

    def add_partition(self, partition: Partition) -> None:
        if partition not in self.partitions:
            self.partitions = (*self.partitions, partition) if self.partitions else alone(partition)

    def drop_partition(self, partition: Partition) -> None:
        if partition in self.partitions:
            left = tuple(p for p in self.partitions if p != partition)
            self.partitions = alone(left[0]) if len(left) == 1 else left


def alone(partition: Partition) -> tuple[Partition, ...]:
    """The shared ``(partition,)`` (see `_ALONE`; it starts over past `_ALONE_MAX`)."""
    single = _ALONE.get(partition)
    if single is None:
        if len(_ALONE) >= _ALONE_MAX:
            _ALONE.clear()
        single = _ALONE[partition] = (partition,)
    return single


class UriRecords:
    """The records of one engine. A record made for a URI starts its generations above
    every generation a dropped record had (`dropped_above`), so a URI's generation never
    restarts while a reply or a snapshot mark taken from its earlier record is about.

    With an `ObjectStore`, a record that holds its URI's entry is kept in the store's
    own dict (``stored``: the store's `held`, in use order) and not here: one table slot
    per cached URI, not two. The engine moves a record here when it lets its entry go
    (`returned`) and out when the store takes it (`leaving`).
    """

    def __init__(self, stored: Mapping[Any, Any] | None = None) -> None:
        self._records: dict[str, UriRecord] = {}
        """Records of URIs that hold no entry in ``stored``."""
        self._stored: Mapping[Any, Any] = stored if stored is not None else {}
        """The store's entries: under a bare URI, its record (see the class)."""
        self.dropped_above = 0
        """No dropped record had a generation above this (the start of a new record)."""
        self._remembered: dict[str, None] = {}
        """Idle records kept for what `status` says of them, oldest first (bounded)."""

    def __len__(self) -> int:
        stored = sum(1 for key in self._stored if key.__class__ is str)
        return len(self._records) + stored

    def __contains__(self, uri: object) -> bool:
        return uri in self._stored or uri in self._records

    def get(self, uri: str) -> UriRecord | None:
        record: UriRecord | None = self._stored.get(uri)
        return record if record is not None else self._records.get(uri)

    def of(self, uri: str) -> UriRecord:
        """``uri``'s record, made (above every dropped generation) if there is none."""
        record: UriRecord | None = self._stored.get(uri)
        if record is None:
            record = self._records.get(uri)
            if record is None:
                record = self._records[uri] = UriRecord(self.dropped_above + 1)
        return record

    def leaving(self, uri: str) -> None:
        """``uri``'s record is about to be put in the store (as its URI's entry)."""
        self._records.pop(uri, None)

    def returned(self, uri: str, record: UriRecord) -> None:
        """``record`` left the store (its entry dropped or evicted): kept here again."""
        self._records[uri] = record

    def _drop(self, uri: str, record: UriRecord) -> None:
        del self._records[uri]
        if record.generation > self.dropped_above:
            self.dropped_above = record.generation

    def forget_if_idle(self, uri: str, record: UriRecord, *, keep_a_while: bool = False) -> None:
        """Drop the record of a URI nothing depends on any more.

        A record that still says something (a failure, why it was invalidated), or
        one whose reply was just handed out (``keep_a_while``), is kept a while,
        among the last `REMEMBERED_IDLE` such records.
        """
        if not record.idle or self._records.get(uri) is not record:
            return
        if keep_a_while or record.problems or record.invalid_reason != "not_cached":
            self._remembered[uri] = None
            while len(self._remembered) > REMEMBERED_IDLE:
                oldest = next(iter(self._remembered))
                del self._remembered[oldest]
                gone = self._records.get(oldest)
                if gone is not None and gone.idle:
                    self._drop(oldest, gone)
        else:
            self._drop(uri, record)
            self._remembered.pop(uri, None)
