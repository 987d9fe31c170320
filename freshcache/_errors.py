"""Exceptions freshcache raises. Expected outcomes (not fresh, denied, not found) are
result states, never exceptions; these are for misuse and misconfiguration.

    FreshCacheError
     ├── ConfigurationError        bad argument or option value
     ├── ProtocolError             the server speaks a protocol freshcache cannot use
     │    ├── UnsupportedVersionError   no protocol version in common (-32022)
     │    └── HeaderMismatchError       headers and body disagree (-32020)
     ├── TableError                an acceptance table is unusable (carries path:line problems)
     ├── MissingDependencyError    an optional integration's extra is not installed
     └── ResourceWithheldError     a framework API that can only return text was asked for
                                   a resource that is not fresh (carries the results)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._core._model import ReadResult


class FreshCacheError(Exception):
    """Root of every exception freshcache raises on purpose."""


class ConfigurationError(FreshCacheError, ValueError):
    """An argument or option has a value freshcache cannot work with."""


class ProtocolError(FreshCacheError):
    """The server answered in a way this client cannot use (wrong version, bad headers)."""


class UnsupportedVersionError(ProtocolError):
    """The server and freshcache share no protocol version."""

    def __init__(self, message: str, *, supported: Sequence[str], requested: str) -> None:
        super().__init__(message)
        self.supported = tuple(supported)
        self.requested = requested


class MethodNotFoundError(ProtocolError):
    """The server does not implement the method (``-32601``)."""


class HeaderMismatchError(ProtocolError):
    """The server says request headers and body disagree (``-32020``)."""


class MissingDependencyError(FreshCacheError, ImportError):
    """An optional integration was used without its extra installed."""


class ResourceWithheldError(FreshCacheError, RuntimeError):
    """A framework integration whose return type has no room for a state got a non-fresh result.

    Raised only where the framework's own API can carry text alone (LangChain's
    ``list[Blob]``, the Agents SDK's ``ReadResourceResult``); ``results`` holds the
    withheld `ReadResult` values (state, reason, detail). A `RuntimeError`, as
    ``load_mcp_resources`` raises for a failed read.
    """

    def __init__(self, results: Sequence[ReadResult]) -> None:
        self.results = tuple(results)
        named = ", ".join(f"{r.uri} is {r.state} ({r.reason})" for r in self.results)
        super().__init__(f"not fresh, so not handed out: {named}; read again later")


class TableError(FreshCacheError):
    """One or more acceptance-table files are unusable; ``problems`` holds ``path:line: what``."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)
