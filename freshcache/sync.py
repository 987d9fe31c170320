"""`SyncFreshCache`: `FreshCache` for code that is not async.

The cache runs on an event loop in a background thread (an anyio blocking portal on
asyncio); every method hands its work to that loop and waits for the answer, so the
results are exactly `FreshCache`'s. The one exception is a fresh hit: `read` looks it
up in the calling thread (the hit tables are plain dicts whose rows the loop thread
replaces whole, so a lookup sees an old row or a new one, never half of one), and only
a miss crosses to the loop; `status` of a fresh URI is answered the same way. Any
number of threads may call it at once: reads of the same URI still share one server
read. ``close()`` (or leaving the ``with`` block) stops the subscription stream, closes
the source and ends the thread.

    from freshcache import LoaderSource
    from freshcache.sync import SyncFreshCache

    with SyncFreshCache(LoaderSource(load), select=["guide://shipping/approval"]) as cache:
        result = cache.read("guide://shipping/approval")

Build sources as usual (``McpClientSource.connect(url)``, ``LoaderSource(...)``,
``HttpSource(url)``); an already entered ``mcp.Client`` belongs to another event loop
and cannot be used here.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import CancelledError
from contextlib import AbstractContextManager
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from anyio.from_thread import BlockingPortal, start_blocking_portal
from typing_extensions import Self

from ._core import Catalog, CatalogKind, ReadResult
from ._core._hits import NO_HITS, row_result
from ._errors import FreshCacheError
from ._middleware._cache import FreshCache, ListResult
from ._middleware._context import Context
from ._middleware._passthrough import CompletionResult, PromptResult
from ._middleware._tools import Seen, ToolCall, check_continuation, check_tool_call
from ._sources._source import ServerInfo, Source

T = TypeVar("T")

__all__ = ["SyncFreshCache"]


class SyncFreshCache:
    """A `FreshCache` driven from ordinary (non-async) code, safe to share between threads.

    Takes the same arguments as `FreshCache`. The cache starts at construction
    (its loop thread, then ``FreshCache.__aenter__``) and stops at `close`.
    """

    def __init__(self, source: Source, *, select: Iterable[str] = (), **options: Any) -> None:
        selection = list(select) if not isinstance(select, str) else select
        self._lock = threading.Lock()
        self._closed = False
        self._portal_cm: AbstractContextManager[BlockingPortal] = start_blocking_portal("asyncio")
        self._portal = self._portal_cm.__enter__()
        try:
            # Built on the loop thread: FreshCache makes anyio objects that need a loop.
            self._cache: FreshCache = self._portal.call(
                partial(FreshCache, source, select=selection, **options)
            )
            self._cache_cm = self._portal.wrap_async_context_manager(self._cache)
            self._cache_cm.__enter__()
            self._hits = self._cache.engine.hits
            self._hit_tables = self._cache.engine.hit_tables
            self._clock = self._cache.engine.clock
            self._catalog_book = self._cache.engine.catalogs
            # Hits that must be counted or traced go through the loop like misses.
            self._hits_in_thread = not (
                self._cache.telemetry.metering or self._cache.telemetry.trace_hits
            )
            self._thread_hits: Mapping[str, object] = (
                self._hits if self._hits_in_thread else NO_HITS
            )
            """The default partition's rows `read` looks up first (none once closed)."""
        except BaseException:
            self._portal_cm.__exit__(None, None, None)
            raise

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop the cache, close the source and end the loop thread. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._thread_hits = NO_HITS
        try:
            self._cache_cm.__exit__(None, None, None)
        finally:
            self._portal_cm.__exit__(None, None, None)

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------------ the cache

    if TYPE_CHECKING:

        def read(
            self, uri: str, *, timeout: float | None = None, principal: str | None = None
        ) -> ReadResult:
            """`FreshCache.read`: fresh text, or an explicit state saying why not."""
            ...

    else:

        def read(self, uri, timeout=None, principal=None):
            """`FreshCache.read`: fresh text, or an explicit state saying why not."""
            # The hit, as `FreshCache.read` has it: one dict lookup, then the row is
            # the result (no time bound) or holds it until ``expires_at``; its value
            # is read before and after the clock compare (`row_result` says why).
            # Plain defaults at run time: keyword-only defaults are filled from a dict
            # on every call. Everything else is `_read`.
            if principal is None:
                hit = self._thread_hits.get(uri)
                if hit is not None:
                    if hit.__class__ is ReadResult:
                        return hit
                    value = hit.value
                    if value is not None and self._clock() < hit.expires_at and hit.value is value:
                        return value
            return self._read(uri, timeout, principal)

    def _read(self, uri: str, timeout: float | None, principal: str | None) -> ReadResult:
        if self._hits_in_thread and not self._closed:
            hit = self._hit(uri, principal)
            if hit is not None:
                return hit
        return self._run(partial(self._cache.read, uri, timeout=timeout, principal=principal))

    def _hit(self, uri: str, principal: str | None) -> ReadResult | None:
        """A fresh row looked up in the calling thread (see the module docstring)."""
        table = self._hits if principal is None else self._hit_tables.get(principal, NO_HITS)
        return row_result(table.get(uri), self._clock())

    def context(
        self, uris: Iterable[str], *, timeout: float | None = None, principal: str | None = None
    ) -> Context:
        """`FreshCache.context`: a step's URIs read at once, fresh texts and withheld ones."""
        wanted = list(uris) if not isinstance(uris, str) else uris
        return self._run(partial(self._cache.context, wanted, timeout=timeout, principal=principal))

    def status(self, uri: str, *, principal: str | None = None) -> ReadResult:
        """`FreshCache.status`: what `read` would hand out now, without I/O."""
        # A fresh row answers in the calling thread, as a hit does; anything else is
        # judged on the loop thread, which owns the engine's records.
        if not self._closed:
            hit = self._hit(uri, principal)
            if hit is not None:
                return hit
        return self._call(partial(self._cache.status, uri, principal=principal))

    def list_resources(
        self, *, timeout: float | None = None, principal: str | None = None
    ) -> ListResult:
        """`FreshCache.list_resources`."""
        return self._run(partial(self._cache.list_resources, timeout=timeout, principal=principal))

    def select(self, uris: Iterable[str]) -> None:
        """`FreshCache.select`: replace the selected URIs."""
        chosen = list(uris) if not isinstance(uris, str) else uris
        self._call(partial(self._cache.select, chosen))

    # ------------------------------------------------------------------ catalogs

    def tools(self, *, timeout: float | None = None, principal: str | None = None) -> Catalog:
        """`FreshCache.tools`: the server's tools, ``fresh``, or an explicit state."""
        return self._catalog("tools", self._cache.tools, timeout, principal)

    def prompts(self, *, timeout: float | None = None, principal: str | None = None) -> Catalog:
        """`FreshCache.prompts`: the server's prompts (see `tools`)."""
        return self._catalog("prompts", self._cache.prompts, timeout, principal)

    def resource_templates(
        self, *, timeout: float | None = None, principal: str | None = None
    ) -> Catalog:
        """`FreshCache.resource_templates`: the server's resource templates (see `tools`)."""
        return self._catalog(
            "resource_templates", self._cache.resource_templates, timeout, principal
        )

    def catalog_status(self, kind: str, *, principal: str | None = None) -> Catalog:
        """`FreshCache.catalog_status`: what `tools` & co. would hand out now, no I/O."""
        return self._call(partial(self._cache.catalog_status, kind, principal=principal))

    def invalidate_catalog(self, kind: str) -> None:
        """`FreshCache.invalidate_catalog`: the next call of catalog ``kind`` lists it again."""
        self._call(partial(self._cache.invalidate_catalog, kind))

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        principal: str | None = None,
        seen: Seen = None,
        request_state: str | None = None,
        input_responses: Mapping[str, Any] | None = None,
    ) -> ToolCall:
        """`FreshCache.call_tool`: one ``tools/call``, never run twice; sent once more
        only after a refusal as an unknown tool, to a tool listed as the caller saw it."""
        check_tool_call(name, arguments)
        check_continuation(request_state, input_responses)
        return self._run(
            partial(
                self._cache.call_tool,
                name,
                arguments,
                timeout=timeout,
                principal=principal,
                seen=seen,
                request_state=request_state,
                input_responses=input_responses,
            )
        )

    def get_prompt(
        self,
        name: str,
        arguments: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,
        principal: str | None = None,
        request_state: str | None = None,
        input_responses: Mapping[str, Any] | None = None,
    ) -> PromptResult:
        """`FreshCache.get_prompt`: ``prompts/get`` passed through, never cached."""
        return self._run(
            partial(
                self._cache.get_prompt,
                name,
                arguments,
                timeout=timeout,
                principal=principal,
                request_state=request_state,
                input_responses=input_responses,
            )
        )

    def complete(
        self,
        ref: Mapping[str, Any],
        argument: Mapping[str, Any],
        context: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        principal: str | None = None,
    ) -> CompletionResult:
        """`FreshCache.complete`: ``completion/complete`` passed through, never cached."""
        return self._run(
            partial(
                self._cache.complete, ref, argument, context, timeout=timeout, principal=principal
            )
        )

    def _catalog(
        self,
        kind: CatalogKind,
        get: Callable[..., Awaitable[Catalog]],
        timeout: float | None,
        principal: str | None,
    ) -> Catalog:
        """A fresh catalog row looked up in the calling thread (as `read` does; the
        rows are replaced whole by the loop thread), else the call on the loop."""
        if self._hits_in_thread and not self._closed:
            partition = self._cache.principal if principal is None else principal
            hit = self._catalog_book.hit(kind, partition, self._clock())
            if hit is not None:
                return hit
        return self._run(partial(get, timeout=timeout, principal=principal))

    @property
    def selected(self) -> frozenset[str]:
        return self._call(lambda: self._cache.selected)

    @property
    def stream_status(self) -> str:
        return self._call(lambda: self._cache.stream_status)

    @property
    def server_info(self) -> ServerInfo | None:
        return self._call(lambda: self._cache.server_info)

    def describe(self) -> dict[str, Any]:
        """`FreshCache.describe`."""
        return self._call(self._cache.describe)

    def _run(self, func: Callable[[], Awaitable[T]]) -> T:
        """Await ``func()`` on the loop thread."""
        return self._guard(lambda: self._portal.call(func))

    def _call(self, func: Callable[[], T]) -> T:
        """Call ``func()`` on the loop thread."""
        return self._guard(lambda: self._portal.call(func))

    def _guard(self, call: Callable[[], T]) -> T:
        if self._closed:
            raise FreshCacheError("this SyncFreshCache is closed; make a new one")
        try:
            return call()
        except CancelledError as exc:  # a read running in the call's own task (`_Inline`)
            if self._closed:
                raise FreshCacheError("this SyncFreshCache was closed during the call") from exc
            raise
        except RuntimeError as exc:
            if self._closed or "not running" in str(exc):
                raise FreshCacheError("this SyncFreshCache was closed during the call") from exc
            raise
