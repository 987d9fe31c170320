"""The hit tables: what the fast path consults (DESIGN §6).

One dict per partition, keyed by the bare URI, holding ``(fresh until, result)`` for
entries whose generation is current and that the rules let be served without a
server read. A hit is one dict lookup and one clock comparison, for every partition;
rows are replaced whole, so a reader in another thread sees an old row or a new one.
"""

from __future__ import annotations

from ._entries import Partition
from ._model import ReadResult

Hit = tuple[float, ReadResult]
"""(fresh until, result) in a partition's hit table."""
HitTable = dict[str, Hit]

NO_HITS: HitTable = {}
"""Stands for the table of a partition that has none yet; never written to."""


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
        return hit[1] if hit is not None and now < hit[0] else None

    def put(self, uri: str, partition: Partition, until: float, result: ReadResult) -> None:
        self.table(partition)[uri] = (until, result)

    def pop(self, uri: str, partition: Partition) -> None:
        table = self.tables.get(partition)
        if table is not None:
            table.pop(uri, None)
