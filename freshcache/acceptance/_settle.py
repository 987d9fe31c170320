"""The one way a world waits: poll a "what is still busy" look against a deadline.

Every world (engine, bare engine, HTTP, stdio, the SDK and MCP-client worlds in the
tests) settles with `settle`, and every bounded wait on a fact goes through `wait_for`;
a world only says what *busy* means for it. Nothing here sleeps without a deadline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel

Look = Callable[[], Awaitable[str | None]]


LONGEST_PAUSE = 0.02
"""The longest pause between two looks: a wait that lasts (a deadline a row sits out)
is looked at 50 times a second, not 500, so waiting worlds leave the CPU to the others
(several wires play at once in one process)."""

PROGRESS_ALLOWANCE = 4
"""How many times its ``limit`` a `settle` that keeps making progress may wait in all."""


async def settle(
    look: Look,
    *,
    limit: float,
    pause: float,
    turns: int = 20,
    progress: Callable[[], object] | None = None,
) -> str | None:
    """Poll ``look`` until it answers ``None`` (nothing busy) or ``limit`` seconds pass
    without progress.

    Progress is a look that answers something other than the look before it (frames
    taken in), or a new value of ``progress()`` (reads landed): each one gives the wait
    ``limit`` seconds more, up to `PROGRESS_ALLOWANCE` times ``limit`` in all, so a
    loaded machine still working through a flood is waited for, and a stuck one is not.
    Before each look the event loop gets ``turns`` checkpoints (background tasks take
    what was sent to them); between looks the poller pauses ``pause`` seconds at first,
    half as long again after each busy look, up to `LONGEST_PAUSE`. Returns ``None``
    when settled, otherwise what the last look still found busy.
    """
    longest = max(pause, LONGEST_PAUSE)
    start = anyio.current_time()
    give_up, cap = start + limit, start + PROGRESS_ALLOWANCE * limit
    busy: str | None = None
    mark = progress() if progress is not None else None
    while True:
        for _ in range(turns):
            await anyio.lowlevel.checkpoint()
        seen: str | None = busy or "not looked at yet"
        with anyio.move_on_after(max(give_up - anyio.current_time(), 0.0)):
            seen = await look()
            if seen is None:
                return None
        now = anyio.current_time()
        last_mark, mark = mark, progress() if progress is not None else None
        if (busy is not None and seen != busy) or mark != last_mark:
            give_up = min(now + limit, cap)
        busy = seen
        if now >= give_up:
            return busy
        await anyio.sleep(min(pause, give_up - now))
        pause = min(pause * 1.5, longest)


async def wait_for(
    condition: Callable[[], object], *, limit: float, pause: float = 0.002, what: str = ""
) -> None:
    """Wait until ``condition()`` is true; `TimeoutError` after ``limit`` seconds."""

    async def look() -> str | None:
        return None if condition() else (what or "the condition")

    busy = await settle(look, limit=limit, pause=pause, turns=0)
    if busy is not None:
        raise TimeoutError(f"still waiting after {limit} s on {busy}")
