"""The acceptance equipment behind ``freshcache acceptance`` (DESIGN §3).

The test doubles `ReferenceServer` and `InMemorySource` live in `freshcache.testing`
(also named here, where earlier releases documented them). This package imports
`freshcache` and `freshcache.testing` only, never a private module of the library
(`tests/test_acceptance_imports.py`). The table
format (`_format`), the step vocabulary (`_steps`), the runner and the
engine world (`_runner`), the reference server's JSON-RPC protocol (`_protocol`), the
fault-injecting HTTP and stdio servers (`_http_server`, `_stdio_server`; `_serve`, the
``freshcache serve`` command, beside them), the worlds
that play rows over them (`_http_world`, `_stdio_world`; `_fleet_world` for the fleet
rows, on Valkey/Redis through `_store_proxy` relays, `_valkey` starting one) and the command itself
(`_command`). The library never imports this package; the command line imports it
when the ``acceptance`` command runs. Every name here loads with its module when first
asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from freshcache import TableError
    from freshcache.testing import InMemorySource, ReferenceServer

    from ._fleet_world import FleetWorld
    from ._format import Case, CaseRow, load_cases, parse_text, table_files
    from ._http_world import HttpWorld
    from ._protocol import ReferenceProtocol
    from ._runner import (
        CaseReport,
        EngineWorld,
        Setup,
        VirtualClock,
        World,
        describe,
        is_fleet_row,
        play,
    )
    from ._stdio_world import StdioWorld

_WHERE = {
    "TableError": "freshcache",
    "Case": "._format",
    "CaseRow": "._format",
    "load_cases": "._format",
    "parse_text": "._format",
    "table_files": "._format",
    "InMemorySource": "freshcache.testing",
    "ReferenceServer": "freshcache.testing",
    "ReferenceProtocol": "._protocol",
    "CaseReport": "._runner",
    "EngineWorld": "._runner",
    "Setup": "._runner",
    "VirtualClock": "._runner",
    "World": "._runner",
    "describe": "._runner",
    "is_fleet_row": "._runner",
    "play": "._runner",
    "HttpWorld": "._http_world",
    "FleetWorld": "._fleet_world",
    "StdioWorld": "._stdio_world",
}
"""Every name loads with its module on first use: the stdio server process (a
submodule) then pays for none of the runner, the cache or the HTTP worlds."""

__all__ = [
    "Case",
    "CaseReport",
    "CaseRow",
    "EngineWorld",
    "FleetWorld",
    "HttpWorld",
    "InMemorySource",
    "ReferenceProtocol",
    "ReferenceServer",
    "Setup",
    "StdioWorld",
    "TableError",
    "VirtualClock",
    "World",
    "describe",
    "is_fleet_row",
    "load_cases",
    "parse_text",
    "play",
    "table_files",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'freshcache.acceptance' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
