"""Which URIs changed since a source last proved it saw them (the "cannot tell" rule).

A source that cannot say whether an answer came from the server (a user's loader
that may answer from a copy of its own: ``ReadReply.from_server is None``) is
trusted for a URI **until a change to that URI has been heard of**, and from then on
only an answer that says it came from the server proves anything, until one does.
Before any change was heard, nothing the loader returns can be older than the newest
change heard of; after one, an answer of unknown origin may be the very copy that
change made stale (invariant 1, seed case 3).

The memory is bounded (invariant 10): past `MAX_REMEMBERED` changed URIs it counts
*every* URI as changed (it fails closed) and remembers the URIs cleared since.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_REMEMBERED = 10_000
"""Changed (or cleared) URIs remembered one by one before the memory fails closed."""


@dataclass(slots=True)
class ChangesHeard:
    """Bounded memory of changes heard of, per URI or for everything at once."""

    count: int = 0
    """Bumped on every change heard of: a read that saw it move cannot clear a URI."""
    everything: bool = False
    """Every URI counts as changed, except those in `_cleared`."""
    _changed: set[str] = field(default_factory=set)
    _cleared: set[str] = field(default_factory=set)

    def note(self, uri: str) -> None:
        """A change of ``uri`` was heard of."""
        self.count += 1
        self._cleared.discard(uri)
        if self.everything:
            return
        if len(self._changed) >= MAX_REMEMBERED:
            self.note_everything()  # bounded: fail closed rather than grow
            return
        self._changed.add(uri)

    def note_everything(self) -> None:
        """Changes may have been missed for every URI (a lost feed or stream)."""
        self.count += 1
        self.everything = True
        self._changed.clear()
        self._cleared.clear()

    def proved(self, uri: str, count_when_sent: int) -> None:
        """An answer known to come from the server, for a read sent at ``count_when_sent``."""
        if count_when_sent != self.count:
            return  # something changed while it loaded: it may not have seen that
        self._changed.discard(uri)
        if self.everything:
            if len(self._cleared) >= MAX_REMEMBERED:
                self._cleared.clear()  # fail closed: forget what was cleared
            self._cleared.add(uri)

    def changed(self, uri: str) -> bool:
        """Whether a change of ``uri`` was heard of since an answer last proved it."""
        return uri in self._changed or (self.everything and uri not in self._cleared)

    @property
    def remembered(self) -> int:
        """URIs held one by one now (bounded by `MAX_REMEMBERED` each)."""
        return len(self._changed) + len(self._cleared)
