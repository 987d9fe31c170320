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


async def settle(look: Look, *, limit: float, pause: float, turns: int = 20) -> str | None:
    """Poll ``look`` until it answers ``None`` (nothing busy) or ``limit`` seconds pass.

    Before each look the event loop gets ``turns`` checkpoints (background tasks take
    what was sent to them); between looks the poller pauses ``pause`` seconds at first,
    half as long again after each busy look, up to `LONGEST_PAUSE`. Returns ``None``
    when settled, otherwise what the last look still found busy.
    """
    busy: str | None = "not looked at yet"
    longest = max(pause, LONGEST_PAUSE)
    with anyio.move_on_after(limit):
        while True:
            for _ in range(turns):
                await anyio.lowlevel.checkpoint()
            busy = await look()
            if busy is None:
                return None
            await anyio.sleep(pause)
            pause = min(pause * 1.5, longest)
    return busy


async def wait_for(
    condition: Callable[[], object], *, limit: float, pause: float = 0.002, what: str = ""
) -> None:
    """Wait until ``condition()`` is true; `TimeoutError` after ``limit`` seconds."""

    async def look() -> str | None:
        return None if condition() else (what or "the condition")

    busy = await settle(look, limit=limit, pause=pause, turns=0)
    if busy is not None:
        raise TimeoutError(f"still waiting after {limit} s on {busy}")
