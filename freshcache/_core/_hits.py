"""The hit tables: what the fast path consults (DESIGN §8).

One dict per partition, keyed by the bare URI, holding a row for each entry whose
generation is current and that the rules let be served without a server read.
A `ReadResult` or `Entry` row is replaced whole; a `UriRecord` row is changed in
place, so the engine takes its row out first and puts it back once the record holds
its new entry: a reader in another thread sees an old row, a new one or none.

A row has one of two shapes, and which one is the whole of the hit's time rule:

- the `ReadResult` itself: an entry with **no time bound** (subscription-backed: it
  stays fresh until an *event* — a notification, a stream loss, coverage ending — and
  every such event removes or replaces the row before it returns). A hit on it reads
  no clock: one lookup and a type check.
- the stored entry (an `Entry`, or the URI's `UriRecord` holding it when the store
  keeps records as entries): an entry bounded by ``ttlMs``; a hit compares its
  ``expires_at`` against the clock, every time. Why not remove such rows with a timer
  at the deadline and skip the clock: a timer runs on the event loop, and a hit never
  yields to it. A task that blocks the loop (a synchronous call in async code) and
  then reads would be handed a row whose deadline passed while its timer waited
  behind that very task; a margin before the deadline only moves the problem. The
  clock compare is the only check that holds however late the loop is, so a
  time-bounded row always pays for it.
"""

from __future__ import annotations

from ._entries import Entry, Partition
from ._model import ReadResult
from ._records import UriRecord

Hit = ReadResult | Entry | UriRecord
"""A row of a partition's hit table: the result (no time bound), or the stored entry
or record holding it (fresh while the clock is before its ``expires_at``; its value
is a `ReadResult`)."""
HitTable = dict[str, Hit]

NO_HITS: HitTable = {}
"""Stands for the table of a partition that has none yet; never written to."""


def row_result(hit: Hit | None, now: float) -> ReadResult | None:
    """The result a row hands out at ``now`` (monotonic), or ``None``.

    Safe in a thread other than the engine's: a record row (`UriRecord`) is changed in
    place when its URI holds a new entry or lets one go, so its value is read before
    and after its deadline and handed out only if it did not change in between
    (`UriRecord.hold` closes the deadline before it changes the value).
    """
    if hit is None:
        return None
    if isinstance(hit, ReadResult):
        return hit  # no time bound
    value = hit.value
    if value is not None and now < hit.expires_at and hit.value is value:
        assert isinstance(value, ReadResult)
        return value
    return None


class HitTables:
    """Every partition's hit table."""

    def __init__(self) -> None:
        self.tables: dict[Partition, HitTable] = {}
        """Partition -> its hit table (made on first use; never replaced)."""

    def table(self, partition: Partition) -> HitTable:
        table = self.tables.get(partition)
        if table is None:
            table = self.tables[partition] = {}
        return table

    def fresh(self, uri: str, partition: Partition, now: float) -> ReadResult | None:
        hit = self.tables.get(partition, NO_HITS).get(uri)
        if hit is None or hit.__class__ is ReadResult:
            return hit  # none, or no time bound
        # An entry row's value is a ReadResult (`put` checks it).
        return hit.value if now < hit.expires_at else None  # type: ignore[union-attr,return-value]

    def put(self, uri: str, partition: Partition, row: Hit) -> None:
        assert isinstance(row, ReadResult) or isinstance(row.value, ReadResult)
        self.table(partition)[uri] = row

    def pop(self, uri: str, partition: Partition) -> None:
        table = self.tables.get(partition)
        if table is not None:
            table.pop(uri, None)
