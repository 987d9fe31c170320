"""freshcache: a client-side cache for MCP resources that never hands a model stale text.

The one promise: the text a read returns is never older than the newest change the
client has heard of; when that cannot be proven, the result says so with an explicit
state (``awaiting_fresh_source``, ``denied``, ``not_found``) instead of old text.

The surface, by who needs it:

- everyone: `FreshCache` (and `freshcache.sync.SyncFreshCache`), `ReadResult` and the
  state names, `Policy`, `MemoryStore`, the errors under `FreshCacheError`;
- an agent step: `Context` (from `FreshCache.context`), `StateChanges` of `StateChange`
  items and `ChangesDropped` markers (from `FreshCache.changes`);
- reaching a server: `HttpSource`, `StdioSource`, `McpClientSource`, `LoaderSource`;
- writing a `Source`: the replies (`ReadReply`, `ListReply`, `RequestFailed`) and the
  stream events it yields (`ListenStarted`, `ListenAcknowledged`, `ResourceUpdated`,
  `ResourceListChanged`, `StreamClosed`, `StreamLost`, `ListenUnsupported`,
  `UntrustedMessage`, `ChangesMissed`), `ServerInfo`, `Partition` (the ``principal``
  each call is made for), and `SourceWrapper` for a source that wraps another one;
- a fleet of workers sharing one freshness view on Valkey/Redis: `Fleet` (``fleet=``).

Test doubles for your own tests (`InMemorySource` over a `ReferenceServer` with its
fault switches, no I/O) live in `freshcache.acceptance`, which this package never imports.
"""

import importlib
from typing import TYPE_CHECKING, Any

from ._core import (
    AWAITING_FRESH_SOURCE,
    DENIED,
    FRESH,
    NOT_FOUND,
    STALE,
    ChangesMissed,
    FailureKind,
    ListenAcknowledged,
    ListenStarted,
    ListenUnsupported,
    ListReply,
    Partition,
    Policy,
    ReadReply,
    ReadResult,
    RequestFailed,
    ResourceContents,
    ResourceInfo,
    ResourceListChanged,
    ResourceUpdated,
    StreamClosed,
    StreamEvent,
    StreamLost,
    UntrustedMessage,
)
from ._core._backoff import BackoffSettings
from ._errors import (
    ConfigurationError,
    FreshCacheError,
    HeaderMismatchError,
    MissingDependencyError,
    ProtocolError,
    ResourceWithheldError,
    TableError,
    UnsupportedVersionError,
)
from .fleet import Fleet  # imports no redis: attaching a fleet to a cache does

if TYPE_CHECKING:  # loaded on first use (`__getattr__`): httpx, pydantic, the transports
    from ._cache import FreshCache, ListResult
    from ._context import ChangesDropped, Context, StateChange, StateChanges
    from ._http import HttpSource
    from ._loader import Loaded, LoaderSource
    from ._mcp_client import McpClientSource
    from ._source import PROTOCOL_VERSION, ServerInfo, Source, SourceWrapper
    from ._stdio import StdioSource
    from ._store import MemoryStore
    from ._wire import ClientIdentity, DenialRules

_ON_FIRST_USE = {
    "FreshCache": "._cache",
    "ListResult": "._cache",
    "ChangesDropped": "._context",
    "Context": "._context",
    "StateChange": "._context",
    "StateChanges": "._context",
    "HttpSource": "._http",
    "Loaded": "._loader",
    "LoaderSource": "._loader",
    "McpClientSource": "._mcp_client",
    "PROTOCOL_VERSION": "._source",
    "ServerInfo": "._source",
    "Source": "._source",
    "SourceWrapper": "._source",
    "StdioSource": "._stdio",
    "MemoryStore": "._store",
    "ClientIdentity": "._wire",
    "DenialRules": "._wire",
}
"""Public names whose modules load when first asked for: ``import freshcache`` stays
light (the core, the errors, `Fleet`), and the first ``freshcache.FreshCache`` pays for
the cache, the transports and the wire models."""

__version__ = "0.1.0"

__all__ = [
    "AWAITING_FRESH_SOURCE",
    "DENIED",
    "FRESH",
    "NOT_FOUND",
    "PROTOCOL_VERSION",
    "STALE",
    "BackoffSettings",
    "ChangesDropped",
    "ChangesMissed",
    "ClientIdentity",
    "ConfigurationError",
    "Context",
    "DenialRules",
    "FailureKind",
    "Fleet",
    "FreshCache",
    "FreshCacheError",
    "HeaderMismatchError",
    "HttpSource",
    "ListReply",
    "ListResult",
    "ListenAcknowledged",
    "ListenStarted",
    "ListenUnsupported",
    "Loaded",
    "LoaderSource",
    "McpClientSource",
    "MemoryStore",
    "MissingDependencyError",
    "Partition",
    "Policy",
    "ProtocolError",
    "ReadReply",
    "ReadResult",
    "RequestFailed",
    "ResourceContents",
    "ResourceInfo",
    "ResourceListChanged",
    "ResourceUpdated",
    "ResourceWithheldError",
    "ServerInfo",
    "Source",
    "SourceWrapper",
    "StateChange",
    "StateChanges",
    "StdioSource",
    "StreamClosed",
    "StreamEvent",
    "StreamLost",
    "TableError",
    "UnsupportedVersionError",
    "UntrustedMessage",
    "__version__",
]


def _from_freshcache(value: object) -> None:
    # Public classes say where users import them from (as httpx does): `freshcache.X`.
    if isinstance(value, type):
        value.__module__ = __name__


def __getattr__(name: str) -> Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    _from_freshcache(value)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


for _name in __all__:
    if _name not in _ON_FIRST_USE:
        _from_freshcache(globals()[_name])
del _name
