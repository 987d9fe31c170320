"""Sending 2025-11-25 subscribe/unsubscribe requests in the order the ledger recorded them.

The I/O half of `freshcache._core._subscribe_order`: the ledger decides what covers a
URI and when a request may go out; this sends each request once the requests recorded
before it for the same URI have been answered, and tells the ledger how it was
answered. `LegacyHttp` and `StdioSource` (2025) both use it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import anyio

from .._core._subscribe_order import SUBSCRIBE, OpKind
from .._protocol._legacy import LegacySession

Call = Callable[[str], Awaitable[bool | None]]
"""Send the request for a URI: ``True`` answered with success, ``False`` refused,
``None`` no answer (timeout, connection lost)."""


class InOrder:
    """One source's 2025 subscribe/unsubscribe sender (module docstring)."""

    def __init__(self) -> None:
        self._answered = anyio.Event()

    async def send(
        self, session: LegacySession, uri: str, kind: OpKind, call: Call, wait: float
    ) -> bool | None:
        """Send the oldest recorded ``kind`` request for ``uri`` once its turn came (at
        most ``wait`` seconds; after that it goes out anyway and ``uri`` stays uncovered)."""
        ledger = session.ledger
        op = ledger.next_op(uri, kind)
        if op is None:
            return None
        ok: bool | None = None
        try:
            with anyio.move_on_after(wait):
                while not ledger.may_send(op):
                    await self._answered.wait()
            ok = await call(uri)
        finally:
            ledger.settle(op, ok)
            self._answered.set()
            self._answered = anyio.Event()
        return ok

    async def subscribe(
        self,
        session: LegacySession,
        uris: frozenset[str],
        needed: list[str],
        call: Call,
        wait: float,
    ) -> None:
        """What a virtual subscription for ``uris`` sends before its acknowledgment:
        ``resources/subscribe`` for ``needed`` (what `LegacySession.to_subscribe` recorded
        for it), then, for the rest of ``uris``, the answers to the subscribes another
        subscription sent (one closed while they were in flight: its ack deadline passed
        on a loaded machine, the selection changed). An acknowledgment counted before
        them would leave those URIs uncovered for this subscription's whole life; one of
        them that was never answered or was refused is sent again, once, for this one.
        At most ``wait`` seconds of waiting on others (then their URIs stay uncovered)."""
        for uri in needed:
            await self.send(session, uri, SUBSCRIBE, call, wait)
        ledger = session.ledger
        theirs = [uri for uri in sorted(uris) if uri not in needed and not ledger.answered([uri])]
        if not theirs:
            return
        with anyio.move_on_after(wait):
            while not ledger.answered(theirs):
                await self._answered.wait()
        for uri in session.to_subscribe(theirs):
            await self.send(session, uri, SUBSCRIBE, call, wait)

    def abandon(self, session: LegacySession, uris: Iterable[str], kind: OpKind) -> None:
        """Recorded requests that will not be sent (the channel went, the close ran out of
        time): the ledger counts them as never answered."""
        for uri in uris:
            op = session.ledger.next_op(uri, kind)
            if op is not None:
                session.ledger.settle(op, None)
        self._answered.set()
        self._answered = anyio.Event()


__all__ = ["InOrder"]
