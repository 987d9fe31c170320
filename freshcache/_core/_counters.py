"""`Tally`: the one shape of every set of running totals in freshcache.

The engine's `Counters`, `HttpStats`, `StdioCounters` and `FleetCounters` are each a
slots dataclass of whole numbers that only ever grow, bumped in place on hot paths
(``counters.server_reads += 1``: an attribute, never a dict lookup). They share this
base, and with it how they are read as a whole: `as_dict` for status output and
`snapshot` for a copy that later bumps do not change (tests compare two of them).
"""

from __future__ import annotations

from typing import Any

from typing_extensions import Self


class Tally:
    """Running totals (see the module docstring); subclasses are ``@dataclass(slots=True)``."""

    __slots__ = ()

    def as_dict(self) -> dict[str, int]:
        """Every total by name, in the order the fields are declared."""
        names: dict[str, Any] = getattr(type(self), "__dataclass_fields__", {})
        return {name: getattr(self, name) for name in names}

    def snapshot(self) -> Self:
        """A copy of the totals now."""
        copied = object.__new__(type(self))
        for name, value in self.as_dict().items():
            object.__setattr__(copied, name, value)
        return copied


__all__ = ["Tally"]
