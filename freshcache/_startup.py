"""The command line's first moments: a Ctrl-C that comes while Python is still
importing freshcache is held until `freshcache._cli.main` runs, which then ends with
one line and exit 130 instead of a traceback from inside an import.

Only for the program (`freshcache`, or ``python -m freshcache._cli``): a program that
imports freshcache as a library keeps its own Ctrl-C handling untouched.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
from types import FrameType

held: list[int] = []
"""The signals that came while held (``SIGINT``)."""


def _hold(signum: int, frame: FrameType | None) -> None:
    held.append(signum)


def is_the_program() -> bool:
    """Whether this process is freshcache's command line (its console script, or
    ``python -m freshcache._cli``)."""
    argv = getattr(sys, "orig_argv", [])
    as_module = any(a == "-m" and b == "freshcache._cli" for a, b in itertools.pairwise(argv))
    return as_module or os.path.basename(sys.argv[0]) == "freshcache"


def hold_ctrl_c() -> None:
    """Hold SIGINT until `release` (only when Python's own handler is in place)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _hold)


def release() -> bool:
    """Give SIGINT back to Python; whether a Ctrl-C came while it was held."""
    if signal.getsignal(signal.SIGINT) is _hold:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return bool(held)
