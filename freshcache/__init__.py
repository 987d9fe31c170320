"""freshcache: a client-side cache for MCP resources that never hands a model stale text.

The one promise: the text a read returns is never older than the newest change the
client has heard of; when that cannot be proven, the result says so with an explicit
state (``awaiting_fresh_source``, ``denied``, ``not_found``) instead of old text.
"""

from ._cache import FreshCache, ListResult
from ._core import (
    AWAITING_FRESH_SOURCE,
    DENIED,
    FRESH,
    NOT_FOUND,
    STALE,
    ListReply,
    Policy,
    ReadReply,
    ReadResult,
    RequestFailed,
    ResourceContents,
    ResourceInfo,
)
from ._core._backoff import BackoffSettings
from ._errors import (
    ConfigurationError,
    FreshCacheError,
    HeaderMismatchError,
    MissingDependencyError,
    ProtocolError,
    TableError,
    UnsupportedVersionError,
)
from ._http import HttpSource
from ._loader import Loaded, LoaderSource
from ._mcp_client import McpClientSource
from ._memory import InMemorySource
from ._reference import ReferenceServer
from ._source import PROTOCOL_VERSION, ServerInfo, Source
from ._stdio import StdioSource
from ._store import MemoryStore
from ._wire import ClientIdentity, DenialRules

__version__ = "0.1.0"

__all__ = [
    "AWAITING_FRESH_SOURCE",
    "DENIED",
    "FRESH",
    "NOT_FOUND",
    "PROTOCOL_VERSION",
    "STALE",
    "BackoffSettings",
    "ClientIdentity",
    "ConfigurationError",
    "DenialRules",
    "FreshCache",
    "FreshCacheError",
    "HeaderMismatchError",
    "HttpSource",
    "InMemorySource",
    "ListReply",
    "ListResult",
    "Loaded",
    "LoaderSource",
    "McpClientSource",
    "MemoryStore",
    "MissingDependencyError",
    "Policy",
    "ProtocolError",
    "ReadReply",
    "ReadResult",
    "ReferenceServer",
    "RequestFailed",
    "ResourceContents",
    "ResourceInfo",
    "ServerInfo",
    "Source",
    "StdioSource",
    "TableError",
    "UnsupportedVersionError",
    "__version__",
]
