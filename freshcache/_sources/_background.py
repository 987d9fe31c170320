"""A task a source keeps running between the calls `FreshCache` makes into it.

The `Source` protocol hands a source no task group: `FreshCache` calls ``start``,
``read_resource``, ``list_resources`` and ``listen`` from its own tasks and ``aclose``
at the end. Two sources must keep something alive in between: `McpClientSource.connect`
holds the official SDK client's connection (entered in a task of its own, so that the
SDK's habit of cancelling whoever entered a client whose HTTP server refused a
connection, python-sdk#3560, hits only that task), and `LoaderSource` reads one change
feed that several subscription streams share (a feed read from a stream's task would
be cancelled, and broken, whenever that stream is closed).

`BackgroundTask` is that one task: started on first need, stopped by ``aclose``. It
runs on the asyncio event loop (the backend the official SDK and `freshcache.sync`
use); it logs and swallows what its body raises, so nothing it does reaches a caller.
`Inbox` is how such a task hands events to the stream that consumes them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import anyio

from .._errors import ConfigurationError

log = logging.getLogger("freshcache")

T = TypeVar("T")


class Inbox(Generic[T]):
    """Events for one consumer, in order, at most ``limit`` waiting; a final one always
    fits (so a stream that cannot keep up still hears that it ended)."""

    def __init__(self, limit: int) -> None:
        self.items: deque[T] = deque()
        self.limit = limit
        self.closed = False
        self._wakeup = anyio.Event()

    def put(self, event: T, *, final: bool = False) -> bool:
        """Queue ``event``; ``False`` when it does not fit (the caller decides what then)."""
        if self.closed:
            return True
        if not final and len(self.items) >= self.limit:
            return False
        self.items.append(event)
        self.closed = final
        self._wakeup.set()
        return True

    async def get(self) -> T:
        while not self.items:
            if self._wakeup.is_set():
                self._wakeup = anyio.Event()
            await self._wakeup.wait()
        return self.items.popleft()


class BackgroundTask:
    """One long-lived task outside the caller's task group, stopped by `stop`."""

    def __init__(self, name: str, body: Callable[[], Awaitable[None]]) -> None:
        self.name = name
        self._body = body
        self._task: asyncio.Task[None] | None = None
        self._scope: anyio.CancelScope | None = None
        self._done: anyio.Event | None = None

    @property
    def started(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        """Start the task now (from inside the event loop); a no-op when started."""
        if self._task is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise ConfigurationError(
                f"{self.name} runs a background task and needs the asyncio event loop "
                "(anyio's default backend); it was used outside one"
            ) from None
        self._scope = anyio.CancelScope()
        self._done = anyio.Event()
        self._task = loop.create_task(self._main(self._scope, self._done), name=self.name)

    async def _main(self, scope: anyio.CancelScope, done: anyio.Event) -> None:
        try:
            with scope:
                await self._body()
        except Exception:  # the boundary: nothing the body does may reach a caller
            log.exception("freshcache background task %s failed", self.name)
        except BaseException:
            if not scope.cancel_called:
                raise  # the event loop itself is cancelling us: let it
            # Our own stop() raced an error group that carries a cancellation: done.
        finally:
            done.set()

    async def stop(self, timeout: float = 5.0) -> None:
        """Cancel the task and wait (at most ``timeout`` seconds) until it has ended."""
        scope, done = self._scope, self._done
        if scope is None or done is None:
            return
        scope.cancel()
        with anyio.move_on_after(timeout, shield=True):
            await done.wait()
        if not done.is_set():
            log.warning("background task %s did not stop within %.1fs", self.name, timeout)
