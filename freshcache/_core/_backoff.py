"""When to re-listen after a stream ends: jittered backoff under a retry budget.

Sans-IO: the middleware reports what happened and asks how long to wait; the budget
never sleeps. Modelled on the reconnect rules of long-lived clients (browsers'
EventSource, gRPC's connection backoff): exponential delay with jitter for attempts
that fail, plus two guards against a server that accepts a stream and drops it at
once, again and again.

- ``max_quick_deaths`` streams in a row that die within ``quick_death`` seconds of
  their acknowledgment: give up for ``cooldown`` seconds.
- more than ``max_per_hour`` successful re-listens in the last hour: wait out the
  hour (``cooldown`` at most).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .._errors import ConfigurationError


@dataclass(frozen=True, slots=True)
class BackoffSettings:
    """Knobs of `ReconnectBudget`; all times in seconds."""

    base: float = 0.5
    """First delay after a failed attempt."""
    cap: float = 60.0
    """Longest delay between failed attempts."""
    quick_death: float = 10.0
    """A stream that dies sooner than this after its acknowledgment counts as a quick death."""
    max_quick_deaths: int = 3
    max_per_hour: int = 5
    cooldown: float = 2 * 3600.0
    """How long to wait once the budget is spent."""

    def __post_init__(self) -> None:
        for name in ("base", "cap", "quick_death", "cooldown"):
            if not getattr(self, name) >= 0:
                raise ConfigurationError(
                    f"BackoffSettings.{name} must be >= 0, got {getattr(self, name)!r}"
                )
        if self.max_quick_deaths < 1 or self.max_per_hour < 1:
            raise ConfigurationError(
                "BackoffSettings.max_quick_deaths and max_per_hour must be >= 1"
            )


class ReconnectBudget:
    """Decides the delay before the next ``subscriptions/listen`` attempt."""

    def __init__(
        self,
        settings: BackoffSettings | None = None,
        *,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.settings = settings if settings is not None else BackoffSettings()
        self._jitter = jitter
        self._failures = 0
        self._quick_deaths = 0
        self._opened_at: float | None = None
        self._reopens: deque[float] = deque()
        self.exhausted = False
        """True while the budget is spent and the cooldown runs."""

    def acknowledged(self, now: float) -> None:
        """A stream was opened and acknowledged at ``now``."""
        self._failures = 0
        self._opened_at = now
        self._reopens.append(now)

    def delay_after_end(self, now: float) -> float:
        """A stream that had been acknowledged ended at ``now``: seconds to wait."""
        s = self.settings
        opened, self._opened_at = self._opened_at, None
        if opened is not None and now - opened < s.quick_death:
            self._quick_deaths += 1
        else:
            self._quick_deaths = 0
        while self._reopens and now - self._reopens[0] >= 3600.0:
            self._reopens.popleft()
        if self._quick_deaths >= s.max_quick_deaths:
            self._quick_deaths = 0
            self.exhausted = True
            return s.cooldown
        if len(self._reopens) >= s.max_per_hour:
            self.exhausted = True
            return min(s.cooldown, 3600.0 - (now - self._reopens[0]))
        self.exhausted = False
        return self._jittered(s.base)

    def delay_after_failure(self) -> float:
        """An attempt failed before any acknowledgment: seconds to wait (exponential)."""
        self._failures += 1
        self.exhausted = False
        s = self.settings
        # The exponent is bounded: 2.0 ** 1024 overflows (a server down for hours).
        doublings = min(self._failures - 1, 64)
        return self._jittered(min(s.cap, s.base * 2.0**doublings))

    def _jittered(self, delay: float) -> float:
        # "Equal jitter": half fixed, half random, so a herd of clients spreads out
        # but no client retries sooner than half the nominal delay.
        return delay / 2.0 + self._jitter() * delay / 2.0
