"""An agent step's view of the cache: `Context` (what a prompt may quote) and `StateChanges`.

`FreshCache.context` reads a step's URIs at once and splits the answers: the ``fresh``
ones go in the prompt, every other one is *withheld* with its state and reason (the
prompt names it, never quotes an old copy). The split is one snapshot, judged by the
engine as a whole when it is handed out (`read_all`, invariant 13). `FreshCache.changes` hands out
`StateChange` items for agents that re-inject context when a resource changes.

**What changes cost.** Nothing while nobody iterates: the cache asks
`ChangeFeed.active` (one attribute read) on an invalidation and when a read lands,
never on the hit path. Each subscriber has a bounded queue; a consumer that falls
``max_pending`` items behind loses the backlog and receives one `ChangesDropped`
marker instead (after it, re-read what you rely on: `context` again).

**What counts as a change.** A URI's (state, version) as the default partition sees
it: an invalidation (fresh → awaiting, ``invalidated`` or ``stream_lost``), a read
that lands (awaiting → fresh with a new version, or → ``denied``/``not_found``). A
re-read that brings the same version back is a change too (awaiting → fresh); a
hit is not. Reads of other principals are not reported.
"""

from __future__ import annotations

import html
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import anyio
from typing_extensions import Self

from .._core import FRESH, CatalogChange, ReadResult
from .._core._model import REPROOF_CAUSES, Reason, State, moved

_MIN_BOUND = 2048
"""Records the feed keeps before it first asks the engine what it still remembers."""

__all__ = ["ChangeFeed", "ChangesDropped", "Context", "StateChange", "StateChanges"]


@dataclass(frozen=True, slots=True)
class Context:
    """The answers of one `FreshCache.context` call, split for a prompt."""

    fresh: tuple[ReadResult, ...]
    """``fresh`` results, in the order their URIs were asked for."""
    withheld: tuple[ReadResult, ...]
    """Every other result (``awaiting_fresh_source``, ``denied``, ``not_found``): no text."""

    @property
    def ok(self) -> bool:
        """True when every URI asked for is fresh."""
        return not self.withheld

    @property
    def text(self) -> str:
        """`prompt` with no preamble."""
        return self.prompt(preamble=None)

    def prompt(self, preamble: str | None = "Use only these documents.") -> str:
        """The fresh texts as ``<document>`` blocks, then one line per withheld URI.

        A URI is an attribute value, so it is escaped (a ``"`` in it cannot end the
        attribute); the text goes in as the server gave it."""
        parts = [] if preamble is None else [preamble]
        for result in self.fresh:
            parts.append(
                f'<document uri="{html.escape(result.uri)}">\n{result.text or ""}\n</document>'
            )
        for result in self.withheld:
            # Named, never quoted: the copy we had may be out of date (or not ours to see).
            parts.append(f"(Not available: {result.uri} is {result.state} ({result.reason}).)")
        return "\n\n".join(parts)


class SnapshotJudge(Protocol):
    """What `read_all` asks the engine (`FreshnessEngine.snapshot_mark` / ``_changed``)."""

    def snapshot_mark(self, uri: str) -> int | None: ...

    def snapshot_changed(self, marks: Mapping[str, int | None]) -> list[str]: ...

    def status(self, uri: str, partition: str | None = None) -> ReadResult: ...


async def read_all(
    read: Callable[..., Awaitable[ReadResult]],
    uris: Iterable[str],
    timeout: float,
    principal: str | None,
    judge: SnapshotJudge,
    partition: str | None,
) -> Context:
    """Read ``uris`` at once through ``read`` (single flight), all within ``timeout``; a
    URI asked for twice is read once; results keep the order asked in.

    Every text in the `Context` is fresh at the moment it is returned (invariant 13):
    each result is marked with its URI's generation the moment it is handed out, and
    the engine checks every mark at once (`SnapshotJudge.snapshot_changed`). A URI that
    changed while others were read is read again within the deadline; one still
    changed at the end is withheld with its state now."""
    wanted = list(dict.fromkeys(uris))
    results: dict[str, ReadResult] = {}
    marks: dict[str, int | None] = {}
    deadline = anyio.current_time() + timeout

    async def one(uri: str) -> None:
        remaining = max(0.0, deadline - anyio.current_time())
        result = await read(uri, timeout=remaining, principal=principal)
        results[uri] = result  # no await between the result and its mark
        marks[uri] = judge.snapshot_mark(uri)

    async def read_each(batch: Iterable[str]) -> None:
        async with anyio.create_task_group() as tg:
            for uri in batch:
                tg.start_soon(one, uri)

    def changed() -> list[str]:
        fresh = {uri: marks[uri] for uri in wanted if results[uri].state == FRESH}
        return judge.snapshot_changed(fresh)

    await read_each(wanted)
    while (again := changed()) and anyio.current_time() < deadline:
        await read_each(again)
    for uri in changed():  # the one check, with nothing awaited before the return
        results[uri] = judge.status(uri, partition)
    return split_results([results[uri] for uri in wanted])


def split_results(results: list[ReadResult]) -> Context:
    """A `Context` from results in request order."""
    return Context(
        fresh=tuple(r for r in results if r.state == FRESH),
        withheld=tuple(r for r in results if r.state != FRESH),
    )


@dataclass(frozen=True, slots=True)
class StateChange:
    """A URI moved from one (state, version) to another, or a change of it was heard of
    while it was not fresh again yet after a re-proof (`reproof`)."""

    uri: str
    old_state: State | None
    """``None`` when this feed had not seen the URI before."""
    old_version: str | None
    new_state: State
    new_version: str | None
    reason: Reason | None = None
    """The new result's reason (``invalidated``, ``stream_lost``, ...); ``None`` if fresh."""
    cause: str | None = None
    """What invalidated it, for a move an invalidation made: ``resources/updated`` (a
    change heard of), ``acknowledged`` (a new stream re-proves what was read before it:
    nothing is known to have changed), ``stream_lost``, ``left_list``; else ``None``."""

    @property
    def reproof(self) -> bool:
        """Whether an invalidation made this move only to re-prove what was read before
        (`REPROOF_CAUSES`: an acknowledgment, a lost stream), not for a change heard."""
        return self.cause in REPROOF_CAUSES


@dataclass(frozen=True, slots=True)
class ChangesDropped:
    """The consumer fell behind: ``count`` changes were dropped. Re-read what you rely on."""

    count: int


class StateChanges:
    """One subscriber's iterator over `StateChange` items (and `ChangesDropped` markers).

    Subscribed from the moment `FreshCache.changes` returns; iteration ends when the
    cache closes or `aclose` is called (``async with`` does that).
    """

    def __init__(self, feed: ChangeFeed, max_pending: int) -> None:
        self._feed = feed
        self._max_pending = max_pending
        self._items: deque[StateChange | CatalogChange] = deque()
        self._dropped = 0
        self._wake = anyio.Event()
        self.closed = False

    def _put(self, change: StateChange | CatalogChange) -> None:
        if len(self._items) >= self._max_pending:
            # The backlog is useless to a consumer this far behind: it must re-read anyway.
            self._dropped += len(self._items) + 1
            self._items.clear()
        else:
            self._items.append(change)
        self._wake.set()

    def _end(self) -> None:
        self.closed = True
        self._wake.set()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> StateChange | CatalogChange | ChangesDropped:
        while True:
            if self._dropped:
                count, self._dropped = self._dropped, 0
                return ChangesDropped(count)
            if self._items:
                return self._items.popleft()
            if self.closed:
                raise StopAsyncIteration
            self._wake = anyio.Event()
            await self._wake.wait()

    async def aclose(self) -> None:
        """Stop receiving changes."""
        self._feed.unsubscribe(self)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class ChangeFeed:
    """Fans state changes out to `StateChanges` subscribers; idle while there are none."""

    def __init__(
        self,
        status: Callable[[str], ReadResult],
        known: Callable[[], Iterable[str]],
        remembers: Callable[[str], bool] = lambda uri: True,
    ) -> None:
        self._status = status
        self._known = known
        self._remembers = remembers
        """The engine's answer to "is this URI still remembered?" (`FreshnessEngine.
        remembers`): the feed forgets what the engine forgot, so it is bounded alike."""
        self._subscribers: set[StateChanges] = set()
        self._last: dict[str, tuple[State, str | None, bool]] = {}
        """URI -> the (state, version) last reported, and whether a change heard of
        made it (an invalidation whose cause is no re-proof)."""
        self._bound = _MIN_BOUND
        self.active = False
        """Whether anyone listens: the cache checks this before doing any work."""
        self._closed = False

    def subscribe(self, max_pending: int) -> StateChanges:
        subscriber = StateChanges(self, max_pending)
        if self._closed:
            subscriber._end()
            return subscriber
        if not self._subscribers:
            # The first subscriber's "old" side: what the selected URIs are now.
            for uri in self._known():
                result = self._status(uri)
                self._last[uri] = (result.state, result.version, False)
        self._subscribers.add(subscriber)
        self.active = True
        return subscriber

    def unsubscribe(self, subscriber: StateChanges) -> None:
        self._subscribers.discard(subscriber)
        subscriber._end()
        if not self._subscribers:
            self.active = False
            self._last.clear()  # nobody remembers: the next subscriber starts afresh

    def invalidated(self, uri: str, cause: str) -> None:
        """An invalidation landed (the engine has already bumped the generation)."""
        self.observe(self._status(uri), cause)

    def observe(self, result: ReadResult, cause: str | None = None) -> None:
        """A result was settled for ``result.uri`` in the default partition (or, with
        ``cause``, an invalidation made it what it is). Reported when its (state,
        version) moved, or when a change is heard of while it is not fresh again yet for
        another reason (the re-read of a lost stream or an acknowledgment under way: a
        re-proof was no change; this is). A burst of changes heard is one report."""
        before = self._last.get(result.uri)
        now = moved(before, result.state, result.version, cause)
        if now is None:
            return
        self._last[result.uri] = now
        if len(self._last) > self._bound:
            self._forget()
        change = StateChange(
            uri=result.uri,
            old_state=None if before is None else before[0],
            old_version=None if before is None else before[1],
            new_state=result.state,
            new_version=result.version,
            reason=result.reason,
            cause=cause,
        )
        for subscriber in tuple(self._subscribers):
            subscriber._put(change)

    def publish(self, change: CatalogChange) -> None:
        """A catalog moved (`Lister.observe` decides when)."""
        for subscriber in tuple(self._subscribers):
            subscriber._put(change)

    def _forget(self) -> None:
        """Drop what the engine no longer remembers (amortized: the bound doubles with
        what is kept). A URI seen again after that reports ``old_state`` ``None``."""
        self._last = {uri: seen for uri, seen in self._last.items() if self._remembers(uri)}
        self._bound = max(_MIN_BOUND, 2 * len(self._last))

    def close(self) -> None:
        """The cache is closing: every iteration ends."""
        self._closed = True
        for subscriber in tuple(self._subscribers):
            self.unsubscribe(subscriber)
