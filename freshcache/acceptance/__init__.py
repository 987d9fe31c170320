"""The acceptance equipment behind ``freshcache acceptance`` (DESIGN §3).

The reference server with its fault switches (`_reference`) and `InMemorySource`
over it (`_memory`): the test doubles, exported here for users' own tests. The table
format (`_format`), the step vocabulary (`_steps`), the runner and the
engine world (`_runner`), the reference server's JSON-RPC protocol (`_protocol`), the
fault-injecting HTTP and stdio servers (`_http_server`, `_stdio_server`), the worlds
that play rows over them (`_http_world`, `_stdio_world`; `_fleet_world` for the fleet
rows, on Valkey/Redis through `_store_proxy` relays, `_valkey` starting one) and the command itself
(`_command`). The library never imports this package; the command line imports it
when the ``acceptance`` command runs. The HTTP worlds (and h11) load only when asked.
"""

from __future__ import annotations

from typing import Any

from .._errors import TableError
from ._format import Case, CaseRow, load_cases, parse_text, table_files
from ._memory import InMemorySource
from ._reference import ReferenceServer
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
    if name == "ReferenceProtocol":
        from ._protocol import ReferenceProtocol

        return ReferenceProtocol
    if name == "HttpWorld":
        from ._http_world import HttpWorld

        return HttpWorld
    if name == "FleetWorld":
        from ._fleet_world import FleetWorld

        return FleetWorld
    if name == "StdioWorld":
        from ._stdio_world import StdioWorld

        return StdioWorld
    raise AttributeError(f"module 'freshcache.acceptance' has no attribute {name!r}")
