"""Per-URI records of the engine, bounded (DESIGN §2 invariant 10).

A record holds a URI's generation, why it is not fresh, whether it is selected, the
reads in flight and the partitions that hold an entry. Generations come from one
counter for all records, so they never restart: the record of a URI that holds no
entry, is not selected and has no read in flight is dropped, and a reply to a read
sent before that still finds a different generation when it lands.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._entries import Partition
from ._model import ReadResult, Reason

_DEFAULT_ONLY: tuple[Partition, ...] = (None,)

REMEMBERED_IDLE = 1024
"""Records of URIs that hold nothing but a failure or an invalidation reason, kept
for `status` (oldest dropped first)."""


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
