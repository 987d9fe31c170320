"""freshcache: a client-side cache for MCP resources that never hands a model stale text.

The one promise: the text a read returns is never older than the newest change the
client has heard of; when that cannot be proven, the result says so with an explicit
state (``awaiting_fresh_source``, ``denied``, ``not_found``) instead of old text.

The surface, by who needs it:

- everyone: `FreshCache` (and `freshcache.sync.SyncFreshCache`), `ReadResult` and the
  state names, `Policy`, `MemoryStore`, the errors under `FreshCacheError`; `Principal`,
  the type of every ``principal=``;
- bringing your own store: the `Store` protocol, its `Entry` values and `EntryKey`;
- an agent step: `Context` (from `FreshCache.context`), `StateChanges` of `StateChange`
  and `CatalogChange` items and `ChangesDropped` markers (from `FreshCache.changes`);
- catalogs: `Catalog` (from `FreshCache.tools`, `prompts`, `resource_templates`,
  `catalog_status`) and its `CatalogKind`; `ToolCall` (from `FreshCache.call_tool`);
  `PromptResult` (from `FreshCache.get_prompt`) and `CompletionResult` (from
  `FreshCache.complete`), passed through, never cached;
- reaching a server: `HttpSource` (its ``auth=`` an `Auth`), `StdioSource`,
  `McpClientSource`, `LoaderSource`;
- writing a `Source`: the replies (`ReadReply`, `ListReply`, `RequestFailed`) and the
  stream events it yields (`ListenStarted`, `ListenAcknowledged`, `ResourceUpdated`,
  `ResourceListChanged`, `CatalogListChanged`, `StreamClosed`, `StreamLost`, `ListenUnsupported`,
  `UntrustedMessage`, `ChangesMissed`: the source may have missed changes, not to be
  confused with the consumer-side `ChangesDropped`), `ServerInfo`, `Partition` (the
  engine's name for `Principal`), and `SourceWrapper` for a source that wraps another one;
- a fleet of workers sharing one freshness view on Valkey/Redis: `Fleet` (``fleet=``).

Test doubles for your own tests (`InMemorySource` over a `ReferenceServer` with its
fault switches, no I/O) live in `freshcache.testing`, which this package never imports.
"""

import importlib
import sys
from typing import TYPE_CHECKING, Any

from . import _startup

if _startup.is_the_program():  # a Ctrl-C while the command line imports: one line, no traceback
    _startup.hold_ctrl_c()

from ._errors import (
    ConfigurationError,
    FreshCacheError,
    HeaderMismatchError,
    MethodNotFoundError,
    MissingDependencyError,
    ProtocolError,
    ResourceWithheldError,
    TableError,
    UnsupportedVersionError,
)

if TYPE_CHECKING:  # loaded on first use (`__getattr__`): the core, the cache, the transports
    from ._core import (
        AWAITING_FRESH_SOURCE,
        DENIED,
        FRESH,
        NOT_FOUND,
        STALE,
        Catalog,
        CatalogChange,
        CatalogKind,
        CatalogListChanged,
        ChangesMissed,
        Entry,
        EntryKey,
        FailureKind,
        ListenAcknowledged,
        ListenStarted,
        ListenUnsupported,
        ListReply,
        Partition,
        Policy,
        Principal,
        ReadReply,
        ReadResult,
        Remediation,
        RequestFailed,
        ResourceContents,
        ResourceInfo,
        ResourceListChanged,
        ResourceUpdated,
        Store,
        StreamClosed,
        StreamEvent,
        StreamLost,
        UntrustedMessage,
    )
    from ._core._backoff import BackoffSettings
    from ._middleware._cache import FreshCache, ListResult
    from ._middleware._context import ChangesDropped, Context, StateChange, StateChanges
    from ._middleware._passthrough import CompletionResult, PromptResult
    from ._middleware._store import MemoryStore
    from ._middleware._tools import ToolCall
    from ._protocol._wire import ClientIdentity, DenialRules
    from ._sources._http import Auth, HttpSource
    from ._sources._loader import Loaded, LoaderSource
    from ._sources._mcp_client import McpClientSource
    from ._sources._source import PROTOCOL_VERSION, ServerInfo, Source, SourceWrapper
    from ._sources._stdio import StdioSource
    from .fleet import Fleet

_ON_FIRST_USE = {
    "AWAITING_FRESH_SOURCE": "._core",
    "DENIED": "._core",
    "FRESH": "._core",
    "NOT_FOUND": "._core",
    "STALE": "._core",
    "Catalog": "._core",
    "CatalogChange": "._core",
    "CatalogKind": "._core",
    "CatalogListChanged": "._core",
    "ChangesMissed": "._core",
    "Entry": "._core",
    "EntryKey": "._core",
    "FailureKind": "._core",
    "ListenAcknowledged": "._core",
    "ListenStarted": "._core",
    "ListenUnsupported": "._core",
    "ListReply": "._core",
    "Partition": "._core",
    "Policy": "._core",
    "Principal": "._core",
    "ReadReply": "._core",
    "ReadResult": "._core",
    "Remediation": "._core",
    "RequestFailed": "._core",
    "ResourceContents": "._core",
    "ResourceInfo": "._core",
    "ResourceListChanged": "._core",
    "ResourceUpdated": "._core",
    "Store": "._core",
    "StreamClosed": "._core",
    "StreamEvent": "._core",
    "StreamLost": "._core",
    "UntrustedMessage": "._core",
    "BackoffSettings": "._core._backoff",
    "Fleet": ".fleet",
    "Auth": "._sources._http",
    "FreshCache": "._middleware._cache",
    "ListResult": "._middleware._cache",
    "ToolCall": "._middleware._tools",
    "PromptResult": "._middleware._passthrough",
    "CompletionResult": "._middleware._passthrough",
    "ChangesDropped": "._middleware._context",
    "Context": "._middleware._context",
    "StateChange": "._middleware._context",
    "StateChanges": "._middleware._context",
    "HttpSource": "._sources._http",
    "Loaded": "._sources._loader",
    "LoaderSource": "._sources._loader",
    "McpClientSource": "._sources._mcp_client",
    "PROTOCOL_VERSION": "._sources._source",
    "ServerInfo": "._sources._source",
    "Source": "._sources._source",
    "SourceWrapper": "._sources._source",
    "StdioSource": "._sources._stdio",
    "MemoryStore": "._middleware._store",
    "ClientIdentity": "._protocol._wire",
    "DenialRules": "._protocol._wire",
}
"""Public names whose modules load when first asked for: ``import freshcache`` loads the
errors alone (a command line's ``--help`` runs nothing else: issue 38, item 3), the
first core name the sans-IO core, the first ``freshcache.FreshCache`` the cache, and a
transport's class that transport (httpx, pydantic, an SDK)."""

__version__ = "0.1.0"

__all__ = [
    "AWAITING_FRESH_SOURCE",
    "DENIED",
    "FRESH",
    "NOT_FOUND",
    "PROTOCOL_VERSION",
    "STALE",
    "Auth",
    "BackoffSettings",
    "Catalog",
    "CatalogChange",
    "CatalogKind",
    "CatalogListChanged",
    "ChangesDropped",
    "ChangesMissed",
    "ClientIdentity",
    "CompletionResult",
    "ConfigurationError",
    "Context",
    "DenialRules",
    "Entry",
    "EntryKey",
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
    "MethodNotFoundError",
    "MissingDependencyError",
    "Partition",
    "Policy",
    "Principal",
    "PromptResult",
    "ProtocolError",
    "ReadReply",
    "ReadResult",
    "Remediation",
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
    "Store",
    "StreamClosed",
    "StreamEvent",
    "StreamLost",
    "TableError",
    "ToolCall",
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
    if module is None and name == "fleet":  # `freshcache.fleet` was loaded by the import
        return importlib.import_module(".fleet", __name__)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    importlib.import_module(module, __name__)
    # Every public name whose module is loaded now is taken at once (so the classes a
    # cache loaded say `freshcache.X` whichever of them was asked for first).
    names = globals()
    for other, where in _ON_FIRST_USE.items():
        if other not in names:
            loaded = sys.modules.get(__name__ + where)
            if loaded is not None and hasattr(loaded, other):
                value = getattr(loaded, other)
                _from_freshcache(value)
                names[other] = value
    return names[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


for _name in __all__:
    if _name not in _ON_FIRST_USE:
        _from_freshcache(globals()[_name])
del _name
