"""When subscription streams are opened, replaced and closed (DESIGN §4, §5 streams).

Sans-IO, like the engine: the middleware reports what happened to each stream
(`opened`, `acknowledged`, `ended`), what the agent wants (`want`) and the time
(`tick`); the supervisor answers with decisions (`OpenStream`, `CloseStream`) and
the time it wants to be woken at (`next_deadline`). It never sleeps.

One *primary* stream covers the selection, and the lists: it is wanted while a URI is
selected or a catalog was asked for (``lists``: a cache used only for tools, prompts or
templates listens for their changes too). Its lifecycle:

==============  ==========================================  ===========================
state           what moves it on                            to
==============  ==========================================  ===========================
idle            a non-empty selection, or lists, is wanted  opening (OpenStream)
opening         its acknowledgment                          live
opening         the ack deadline passes, or it ends         backing_off (CloseStream)
live            it ends (lost or closed by the server)      backing_off
live            the selection changes                       live, plus a replacement
backing_off     the retry time comes, or the selection      opening (OpenStream)
                changes
any             the server has no listen                    unsupported (final)
==============  ==========================================  ===========================

A *replacement* is opened for a new selection while the primary is live; the
primary is closed only once the replacement is acknowledged, so no change falls
between the two (invariant 4). A replacement that fails is closed and retried after
the backoff while the primary stays. Delays come from `ReconnectBudget`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ._backoff import ReconnectBudget

StreamOutcome = Literal["lost", "closed", "unsupported"]
SupervisorState = Literal["idle", "opening", "live", "backing_off", "unsupported"]


@dataclass(frozen=True, slots=True)
class OpenStream:
    """Open a ``subscriptions/listen`` stream for ``uris``; report on it as ``attempt``."""

    attempt: int
    uris: frozenset[str]


@dataclass(frozen=True, slots=True)
class CloseStream:
    """Close stream ``attempt`` (it is no longer needed, or took too long to ack)."""

    attempt: int


StreamDecision = OpenStream | CloseStream


@dataclass(slots=True)
class _Attempt:
    number: int
    uris: frozenset[str]
    ack_deadline: float
    acknowledged: bool = False


@dataclass(slots=True)
class ListenSupervisor:
    """Decides the lifecycle of the subscription streams of one cache."""

    budget: ReconnectBudget
    ack_timeout: float
    wanted: frozenset[str] = frozenset()
    lists: bool = False
    """A catalog was asked for: a stream is wanted for the lists' changes even with
    nothing selected."""
    retry_at: float | None = None
    """When the next attempt is due while backing off."""
    unsupported: bool = False
    _primary: _Attempt | None = None
    _replacement: _Attempt | None = None
    _attempts: int = 0
    _closed: set[int] = field(default_factory=set)
    acknowledged_once: bool = False

    @property
    def state(self) -> SupervisorState:
        if self.unsupported:
            return "unsupported"
        if self._primary is not None:
            return "live" if self._primary.acknowledged else "opening"
        return "backing_off" if self.retry_at is not None else "idle"

    @property
    def attempts(self) -> int:
        """Streams opened so far."""
        return self._attempts

    def awaits_ack(self, uri: str | None = None) -> int | None:
        """Before the first acknowledgment: the number of the stream still opening whose
        ack will cover ``uri`` (``None``: any URI, the resource list), else ``None``.

        A read sent now would be repeated once that ack comes (invariant 4: only a read
        sent after it makes ``uri`` subscription-backed fresh), so a caller waits for
        it and the read the ack asks for is its read (DESIGN §8: one read per selected
        URI at start). A caller waits for one attempt only: if it fails, the next is
        not waited for. Once a stream was acknowledged (a reconnect, a new selection)
        a read is sent at once: a live cache does not hold its callers behind a
        re-listen's backoff.
        """
        if self.acknowledged_once:
            return None
        if uri is None:  # (a live primary already covers the list)
            primary = self._primary
            return None if primary is None or primary.acknowledged else primary.number
        for attempt in (self._primary, self._replacement):
            if attempt is not None and not attempt.acknowledged and uri in attempt.uris:
                return attempt.number
        return None

    def next_deadline(self) -> float | None:
        """The earliest time `tick` has something to do, or ``None``."""
        times = [a.ack_deadline for a in self._open() if not a.acknowledged]
        if self.retry_at is not None:
            times.append(self.retry_at)
        return min(times, default=None)

    # ------------------------------------------------------------------ facts in

    def want(
        self, uris: frozenset[str], now: float, *, lists: bool | None = None
    ) -> list[StreamDecision]:
        """The selection is now ``uris``; ``lists``: whether the lists are wanted (``None``:
        as before)."""
        changed, self.wanted = uris != self.wanted, uris
        if lists is not None:
            changed, self.lists = changed or lists != self.lists, lists
        active = bool(uris) or self.lists
        if self.unsupported:
            return []
        primary, replacement = self._primary, self._replacement
        if primary is None:
            if self.retry_at is not None and not changed:
                return []  # the same selection waits out its backoff
            # A new selection does not wait out a backoff meant for the old one.
            self.retry_at = None
            return self._open_primary(now) if active else []
        if not primary.acknowledged:
            if primary.uris == uris:
                return []
            return [*self._close(primary), *self._open_primary(now)]
        decisions: list[StreamDecision] = []
        if replacement is not None:
            if replacement.uris == uris:
                return []
            decisions += self._close(replacement)
        if primary.uris == uris:
            return decisions
        if not active:
            return [*decisions, *self._close(primary)]
        self._replacement = self._attempt(uris, now)
        return [*decisions, OpenStream(self._replacement.number, uris)]

    def acknowledged(self, attempt: int, now: float) -> list[StreamDecision]:
        """Stream ``attempt`` was acknowledged."""
        self.acknowledged_once = True
        if self._primary is not None and self._primary.number == attempt:
            self._primary.acknowledged = True
            self.budget.acknowledged(now)
            return []
        if self._replacement is not None and self._replacement.number == attempt:
            old, self._primary, self._replacement = self._primary, self._replacement, None
            self._primary.acknowledged = True
            self.budget.acknowledged(now)
            decisions = [] if old is None else self._close(old)
            if self._primary.uris != self.wanted:
                decisions += self.want(self.wanted, now)
            return decisions
        return []

    def ended(self, attempt: int, outcome: StreamOutcome, now: float) -> list[StreamDecision]:
        """Stream ``attempt`` ended by itself (not by a `CloseStream`)."""
        if attempt in self._closed:
            self._closed.discard(attempt)
            return []
        if outcome == "unsupported":
            self.unsupported = True
            decisions: list[StreamDecision] = [
                CloseStream(a.number) for a in self._open() if a.number != attempt
            ]
            self._primary = self._replacement = None
            self.retry_at = None
            return decisions
        for gone in self._open():
            if gone.number == attempt:
                self._lose(gone, now)
        return []

    def tick(self, now: float) -> list[StreamDecision]:
        """Time passed: close streams past their ack deadline, start due retries."""
        decisions: list[StreamDecision] = []
        for late in [a for a in self._open() if not a.acknowledged and now >= a.ack_deadline]:
            decisions.append(CloseStream(late.number))
            self._closed.add(late.number)
            self._lose(late, now)  # no acknowledgment in time: a failed attempt
        if self.retry_at is not None and now >= self.retry_at:
            self.retry_at = None
            if self._primary is None and (self.wanted or self.lists) and not self.unsupported:
                decisions += self._open_primary(now)
            elif self._primary is not None and self._primary.uris != self.wanted:
                decisions += self.want(self.wanted, now)
        return decisions

    # ------------------------------------------------------------------ internals

    def _lose(self, attempt: _Attempt, now: float) -> None:
        """``attempt`` is gone without being asked to go: schedule what comes next."""
        if attempt is self._replacement:
            self._replacement = None
            self.retry_at = now + self.budget.delay_after_failure()
            return
        self._primary = None
        if self._replacement is not None:
            # The replacement, still opening, takes over as the primary.
            self._primary, self._replacement = self._replacement, None
            return
        self.retry_at = now + (
            self.budget.delay_after_end(now)
            if attempt.acknowledged
            else self.budget.delay_after_failure()
        )

    def _open(self) -> list[_Attempt]:
        return [a for a in (self._primary, self._replacement) if a is not None]

    def _attempt(self, uris: frozenset[str], now: float) -> _Attempt:
        self._attempts += 1
        return _Attempt(self._attempts, uris, now + self.ack_timeout)

    def _open_primary(self, now: float) -> list[StreamDecision]:
        self._primary = self._attempt(self.wanted, now)
        return [OpenStream(self._primary.number, self.wanted)]

    def _close(self, attempt: _Attempt) -> list[StreamDecision]:
        """Close ``attempt`` on purpose (no backoff follows)."""
        if self._primary is attempt:
            self._primary = None
        if self._replacement is attempt:
            self._replacement = None
        self._closed.add(attempt.number)
        return [CloseStream(attempt.number)]
