"""The tests' one way to wait for a fact: poll it against a deadline, never a bare sleep.

Async tests use `until` (the same `wait_for` the acceptance worlds use); tests on a
plain thread use `until_sync`. The default deadline is generous: the suite must pass
on a loaded 2-core machine, and a wait that is met returns at once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from freshcache.acceptance._settle import wait_for

DEADLINE = 30.0


def scaled(seconds: float) -> float:
    """``seconds`` stretched by how overloaded the machine is now (the load average per
    core, at least 1): a deadline for work that needs CPU time, such as a Python child
    process importing the SDK, which takes several times longer at load 9 on 2 cores."""
    try:
        per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:  # no load average on this platform
        per_core = 1.0
    return seconds * max(1.0, per_core)


def reads_done(cache: Any) -> bool:
    """No server read under way, and none decided and still queued (a notification's
    re-read waits for a re-reader's turn: `FreshCache.queued_reads`). Waiting on
    ``pending_reads`` alone returns in that turn, before the read it meant to wait for."""
    return bool(cache.pending_reads + cache.queued_reads == 0)


async def until(condition: Callable[[], object], timeout: float = DEADLINE) -> None:
    """Wait until ``condition()`` holds; `TimeoutError` after ``timeout`` seconds."""
    await wait_for(condition, limit=timeout, pause=0.005)


def until_sync(condition: Callable[[], object], timeout: float = DEADLINE) -> None:
    """`until` for a plain thread (the sync facade's tests)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"still waiting after {timeout} s")
        time.sleep(0.005)
