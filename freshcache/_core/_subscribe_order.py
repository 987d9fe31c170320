"""2025-11-25 subscriptions: which URIs a ``resources/subscribe`` covers, in the order sent.

MCP 2025-11-25 has no acknowledgment: a URI is covered by a successful
``resources/subscribe`` on the live channel (DESIGN §6). But subscribe and unsubscribe
for one URI can be in flight at once (a selection that leaves U and comes back to it),
and a server may finish them in any order: if the unsubscribe is processed last, U is
not subscribed on the server although its subscribe succeeded. Counting U covered
then keeps an old copy "fresh until notified" while no notification will ever come.

The rule, decided here and nowhere else:

- A URI is **covered** only when the last subscribe/unsubscribe recorded for it is a
  subscribe, that subscribe has been answered with success, every request recorded
  before it has been answered, and none of them was given up unanswered since the
  channel began (`SubscribeLedger.covers`).
- Requests for one URI go out **one at a time, in the order recorded**
  (`SubscribeLedger.may_send`): a subscribe recorded while an unsubscribe is pending
  waits for that answer, so the server sees them in order. An *unsubscribe* whose
  answer never came (a timeout, a cancelled close), or a request answered while an
  unsubscribe recorded before it was still unanswered, leaves the server's state
  unknown: that unsubscribe may take effect after any later subscribe, so the URI
  stays uncovered (read before use) until the channel ends.
- A *subscribe* whose answer never came (its listen was closed at its ack deadline
  on a loaded machine, a timeout) only leaves the URI uncovered until a later
  subscribe is answered: whenever the server acts on it, it can only add the
  subscription, never take one away (`SubscribeLedger.settle`).
- When the channel ends (`ended`) nothing is covered and nothing pending matters: the
  next channel is a new session (a request still answering on the old one is ignored:
  its `Op` names the old epoch).

Sans-IO: the transports record, wait on `may_send`, send, and `settle`.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

OpKind = Literal["subscribe", "unsubscribe"]
SUBSCRIBE: OpKind = "subscribe"
UNSUBSCRIBE: OpKind = "unsubscribe"


@dataclass(eq=False, slots=True)
class Op:
    """One subscribe or unsubscribe the client decided to send for ``uri``."""

    uri: str
    kind: OpKind
    epoch: int
    sent: bool = False


@dataclass(slots=True)
class _UriOps:
    queue: deque[Op] = field(default_factory=deque)
    """Recorded and not yet answered, oldest first."""
    last: OpKind = UNSUBSCRIBE
    """The kind of the last request recorded (what the client wants the server to hold)."""
    last_ok: bool = False
    """Whether the last request recorded was answered with success."""
    unsure: bool = False
    """A request was given up unanswered: the server's state is unknown."""

    @property
    def idle(self) -> bool:
        return not self.queue and self.last == UNSUBSCRIBE and not self.unsure


class SubscribeLedger:
    """Per URI: the 2025 subscribe/unsubscribe requests recorded, sent and answered."""

    def __init__(self) -> None:
        self._uris: dict[str, _UriOps] = {}
        self._epoch = 0

    def __len__(self) -> int:
        return len(self._uris)

    # ------------------------------------------------------------------ queries

    def covers(self, uri: str) -> bool:
        """Whether a successful subscribe, answered in order, covers ``uri`` now."""
        ops = self._uris.get(uri)
        return (
            ops is not None
            and not ops.queue
            and not ops.unsure
            and ops.last == SUBSCRIBE
            and ops.last_ok
        )

    @property
    def covered(self) -> frozenset[str]:
        return frozenset(uri for uri in self._uris if self.covers(uri))

    def answered(self, uris: Iterable[str]) -> bool:
        """Whether every request recorded for ``uris`` on this channel has been answered
        (or given up): what covers them is decided (`covers`)."""
        return not any(uri in self._uris and self._uris[uri].queue for uri in uris)

    def wants(self, uri: str) -> bool:
        """Whether the last request recorded for ``uri`` is a subscribe that has not
        failed (sent, answered or about to be)."""
        ops = self._uris.get(uri)
        return ops is not None and ops.last == SUBSCRIBE and (bool(ops.queue) or ops.last_ok)

    @property
    def wanted(self) -> frozenset[str]:
        return frozenset(uri for uri in self._uris if self.wants(uri))

    def may_send(self, op: Op) -> bool:
        """Whether ``op`` may go out now: every request recorded before it for the same
        URI has been answered (or ``op`` belongs to an ended channel: nothing to wait for)."""
        ops = self._uris.get(op.uri)
        if op.epoch != self._epoch or ops is None or not ops.queue:
            return True
        return ops.queue[0] is op

    # ------------------------------------------------------------------ facts

    def record(self, uris: Iterable[str], kind: OpKind) -> list[Op]:
        """The client decided to send ``kind`` for each of ``uris`` (in this order)."""
        recorded: list[Op] = []
        for uri in uris:
            ops = self._uris.setdefault(uri, _UriOps())
            op = Op(uri, kind, self._epoch)
            ops.queue.append(op)
            ops.last, ops.last_ok = kind, False
            recorded.append(op)
        return recorded

    def next_op(self, uri: str, kind: OpKind) -> Op | None:
        """The oldest recorded, unsent ``kind`` request for ``uri``; marked sent."""
        ops = self._uris.get(uri)
        if ops is None:
            return None
        for op in ops.queue:
            if op.kind == kind and not op.sent:
                op.sent = True
                return op
        return None

    def settle(self, op: Op, ok: bool | None) -> None:
        """``op`` was answered: with success (``ok``), with a refusal (``False``), or never
        (``None``: a timeout, a cancelled or unsent request; the server's state is unknown)."""
        ops = self._uris.get(op.uri)
        if op.epoch != self._epoch or ops is None or op not in ops.queue:
            return  # an answer from an ended channel, or settled already
        if ok is None:
            # Never answered: the server may still act on it, after anything sent later.
            # Only an unsubscribe can undo a later subscribe; a late subscribe only adds.
            ops.unsure = ops.unsure or op.kind == UNSUBSCRIBE
        elif ops.queue[0] is not op:
            # Answered ahead of requests recorded before it: an unsubscribe among them
            # may still be processed after it.
            ahead = itertools.takewhile(lambda earlier: earlier is not op, ops.queue)
            ops.unsure = ops.unsure or any(earlier.kind == UNSUBSCRIBE for earlier in ahead)
        ops.queue.remove(op)
        if not ops.queue:
            ops.last_ok = ok is True and ops.last == op.kind
        if ops.idle:
            del self._uris[op.uri]

    def settle_oldest(self, uri: str, kind: OpKind, ok: bool) -> None:
        """``settle`` the oldest pending ``kind`` request for ``uri``; with none recorded,
        record one and settle it (a caller that sends without recording first)."""
        ops = self._uris.get(uri)
        pending = next((op for op in ops.queue if op.kind == kind), None) if ops else None
        if pending is None:
            pending = self.record([uri], kind)[0]
        pending.sent = True
        self.settle(pending, ok)

    def ended(self) -> None:
        """The channel (and its session) is gone: nothing is covered, nothing pending counts."""
        self._uris.clear()
        self._epoch += 1


__all__ = ["SUBSCRIBE", "UNSUBSCRIBE", "Op", "OpKind", "SubscribeLedger"]
