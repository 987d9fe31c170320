"""Per-URI records of the engine, bounded (DESIGN §2 invariant 10).

A record holds a URI's generation, why it is not fresh, whether it is selected, the
reads in flight and the partitions that hold an entry. Generations come from one
counter for all records, so they never restart: the record of a URI that holds no
entry, is not selected and has no read in flight is dropped, and a reply to a read
sent before that still finds a different generation when it lands.

With a store that keeps objects in process (`ObjectStore`, the default `MemoryStore`),
the record *is* also the stored entry of the URI for the engine's default partition and
that entry's time-bounded hit row: one object per cached URI, stored under the bare URI.
Its entry fields (`value` ... `flags`) are empty while it holds no such entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._entries import Partition
from ._model import ReadResult, Reason, ResourceContents

_DEFAULT_ONLY: tuple[Partition, ...] = (None,)
_INF = float("inf")

REMEMBERED_IDLE = 1024
"""Records of URIs that hold nothing but a failure or an invalidation reason, kept
for `status` (oldest dropped first)."""

ENTRY_OVERHEAD = 256
"""Rough bytes of bookkeeping per entry beyond the contents (the store's byte bound)."""

HINTLESS = 1
PUSHED = 2


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
    invalid_reason: Reason = "not_cached"
    """What status says when no entry is at `generation`: why it was invalidated, or
    ``not_cached`` when nothing was read since (or the entry was evicted)."""
    selected: bool = False
    reads_in_flight: int = 0
    partitions: tuple[Partition, ...] = ()
    """Partitions that hold an entry for this URI in the store (usually one)."""
    problems: dict[Partition, tuple[int, ReadResult]] | None = None
    """Latest failed outcome per partition, with the generation it happened at.
    Made on first use: most URIs never fail (an empty dict costs ~200 bytes)."""
    # The entry held in the record itself (see the module docstring); `value` is None
    # when there is none. The same fields as `Entry`, so the record stands in for one.
    value: ReadResult | None = None
    held_generation: int = 0
    """`Entry.generation` of the held entry: the very int object `generation` was when
    the reply was stored (so it costs no object of its own)."""
    expires_at: float = 0.0
    ttl: float = 0.0
    """The entry's freshness window, in seconds: ``received_at`` is derived from it (the
    engine passes one shared float per distinct window, so a record keeps one clock
    float, ``expires_at``, not two)."""
    flags: int = 0
    """`HINTLESS` | `PUSHED` (a small int: no object per record). Its scope is not
    kept: nothing asks a read entry for it once stored (the partition says it)."""

    # ------------------------------------------------------------------ as an entry

    @property
    def hintless(self) -> bool:
        return bool(self.flags & HINTLESS)

    @property
    def pushed(self) -> bool:
        return bool(self.flags & PUSHED)

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
        self.held_generation = self.generation
        self.ttl = ttl
        self.flags = flags
        self.expires_at = expires_at

    def let_go(self) -> None:
        """Hold no entry any more (dropped or evicted). The value goes first (see `hold`)."""
        self.value = None
        self.held_generation = 0
        self.expires_at = self.ttl = 0.0
        self.flags = 0

    @property
    def idle(self) -> bool:
        """Nothing depends on it: no entry, not selected, no read in flight."""
        return not self.selected and not self.partitions and self.reads_in_flight == 0

    def problem(self, partition: Partition) -> tuple[int, ReadResult] | None:
        return None if self.problems is None else self.problems.get(partition)

    def set_problem(self, partition: Partition, result: ReadResult) -> None:
        if self.problems is None:
            self.problems = {}
        self.problems[partition] = (self.generation, result)

    def clear_problem(self, partition: Partition) -> None:
        if self.problems is not None:
            self.problems.pop(partition, None)

    def add_partition(self, partition: Partition) -> None:
        if partition not in self.partitions:
            if not self.partitions and partition is None:
                self.partitions = _DEFAULT_ONLY
            else:
                self.partitions = (*self.partitions, partition)

    def drop_partition(self, partition: Partition) -> None:
        if partition in self.partitions:
            self.partitions = tuple(p for p in self.partitions if p != partition)


class UriRecords:
    """The records of one engine, with one generation counter for all of them."""

    def __init__(self) -> None:
        self._records: dict[str, UriRecord] = {}
        self._generations = 0
        self._remembered: dict[str, None] = {}
        """Idle records kept for what `status` says of them, oldest first (bounded)."""

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, uri: object) -> bool:
        return uri in self._records

    def get(self, uri: str) -> UriRecord | None:
        return self._records.get(uri)

    def of(self, uri: str) -> UriRecord:
        """``uri``'s record, made (with a new generation) if there is none."""
        record = self._records.get(uri)
        if record is None:
            record = self._records[uri] = UriRecord(self.new_generation())
        return record

    def new_generation(self) -> int:
        self._generations += 1
        return self._generations

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
                    del self._records[oldest]
        else:
            del self._records[uri]
            self._remembered.pop(uri, None)
