"""`Negotiation`: which revision a source speaks, for `HttpSource` and `StdioSource`.

It is settled by the first ``server/discover`` the server itself answers
(`freshcache._protocol._client.discovery_unanswered`): a 2026 answer, or a refusal that
makes the source ``initialize`` in 2025-11-25. Until then each request negotiates first:
sent in the wrong revision it is refused for good (a 2025 server refuses every 2026
request), so a server slow or down when the source started would stay unusable.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

import anyio

from .._core import RequestFailed

_CUT_OFF = RequestFailed("timeout", "server/discover: cut off before an answer")


class Negotiation:
    """One source's negotiation state (module docstring); ``start`` runs a discovery."""

    def __init__(self, start: Callable[[], Awaitable[object]]) -> None:
        self._start = start
        self._running: anyio.Event | None = None
        self._unsettled: RequestFailed | None = None

    @contextmanager
    def running(self) -> Iterator[Negotiation]:
        """Around one discovery: requests wait for it; one cut off settles nothing, one
        that raised (no revision in common, not an MCP endpoint) is the server's word."""
        self._running = running = anyio.Event()
        self._unsettled = _CUT_OFF
        try:
            yield self
        except Exception:
            self.settled()
            raise
        finally:
            running.set()

    def settled(self, unanswered: RequestFailed | None = None) -> None:
        """The discovery is over: the server's word, or why there was none."""
        self._unsettled = unanswered

    async def before(self, method: str, limit: float) -> RequestFailed | None:
        """Before ``method`` is sent: wait (up to ``limit`` seconds) for a discovery under
        way, and run one again if it was cut off; or run one if the last got no answer.
        Why not to send, if that got none either."""
        if method in ("server/discover", "initialize"):
            return None
        running, waited = self._running, False
        if running is not None and not running.is_set():
            waited = True
            with anyio.move_on_after(limit):
                await running.wait()
        idle = self._running is None or self._running.is_set()
        if idle and self._unsettled is not None and (not waited or self._unsettled is _CUT_OFF):
            # (`running` is entered before the first wait: one discovery at a time)
            await self._start()  # the last got no answer, or its caller left
        failed = self._unsettled
        if failed is None:
            return None
        detail = f"{method}: not sent, no revision agreed: {failed.detail}"
        return replace(failed, detail=detail, hints=(), lost=False)


__all__ = ["Negotiation"]
