"""Sending 2025-11-25 subscribe/unsubscribe requests in the order the ledger recorded them.

The I/O half of `freshcache._core._subscribe_order`: the ledger decides what covers a
URI and when a request may go out; this sends each request once the requests recorded
before it for the same URI have been answered, and tells the ledger how it was
answered. `LegacyHttp` and `StdioSource` (2025) both use it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import anyio

from .._core._subscribe_order import OpKind
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
