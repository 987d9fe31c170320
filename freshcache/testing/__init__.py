"""Test doubles and test equipment: the public face of freshcache for tests.

For your own tests: `ReferenceServer`, an MCP server in memory with fault switches (hold
a read, fail it, deny a principal, drop or close the listen, change a resource, push a
body, ...), and `InMemorySource`, a `Source` wired straight to one, no transport::

    from freshcache import FreshCache
    from freshcache.testing import InMemorySource, ReferenceServer

    server = ReferenceServer()
    server.set("res://a", "v1")
    async with FreshCache(InMemorySource(server), select=["res://a"]) as cache:
        assert (await cache.read("res://a")).text == "v1"
        server.set("res://a", "v2", notify=True)  # the cache hears the change

The values the server is steered with (`Fault`, `Push`, `Resource`, `ReferenceCatalogs`)
and the readings of it that a server built on it needs (`push_event`, `call_tool`,
`push_body_raw`, `close_listens`) come with it: the acceptance tables' wire servers and
worlds (`freshcache.acceptance`) are built on this module and on `freshcache` alone
(`tests/test_acceptance_imports.py`), so a change inside the library cannot break them
unseen.

The sans-IO engine's own surface, for a world that carries out the engine's decisions
itself without I/O (the acceptance tables' bare-engine world): `FreshnessEngine`, its
`ReadTicket`, `ListWalk`, the decisions (`Decision`: `ReadResource`, `Relist`,
`Relisten`), `ListenSupervisor` and its `StreamDecision` (`OpenStream`, `CloseStream`),
`ReconnectBudget`, `problem_result`. Nothing else in the library is promised here.

The library never imports this package. `InMemorySource` loads when first asked for:
a stdio reference server process then loads the reference server and the core only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._core import (
    Decision,
    FreshnessEngine,
    ListWalk,
    ReadResource,
    ReadTicket,
    ReconnectBudget,
    Relist,
    Relisten,
    problem_result,
)
from .._core._streams import CloseStream, ListenSupervisor, OpenStream, StreamDecision
from ._reference import (
    Fault,
    Push,
    ReferenceServer,
    Resource,
    call_tool,
    close_listens,
    push_body_raw,
    push_event,
)
from ._reference_catalogs import ReferenceCatalogs

if TYPE_CHECKING:
    from ._memory import InMemorySource

__all__ = [
    "CloseStream",
    "Decision",
    "Fault",
    "FreshnessEngine",
    "InMemorySource",
    "ListWalk",
    "ListenSupervisor",
    "OpenStream",
    "Push",
    "ReadResource",
    "ReadTicket",
    "ReconnectBudget",
    "ReferenceCatalogs",
    "ReferenceServer",
    "Relist",
    "Relisten",
    "Resource",
    "StreamDecision",
    "call_tool",
    "close_listens",
    "problem_result",
    "push_body_raw",
    "push_event",
]


def __getattr__(name: str) -> Any:
    if name != "InMemorySource":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from ._memory import InMemorySource  # (the client's tool replies and wire rules)

    globals()[name] = InMemorySource
    return InMemorySource
